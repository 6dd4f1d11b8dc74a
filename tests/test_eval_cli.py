"""`lorarag compare`, `report`, `bench eval` and `eval` config errors through the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from lorarag.cli import app
from lorarag.eval.records import save_results
from tests.test_report import _fixture

REPO = Path(__file__).resolve().parent.parent


def test_compare_and_report_commands(tmp_path):
    base, lora = _fixture()
    save_results(tmp_path / "a" / "results.jsonl", base)
    save_results(tmp_path / "b" / "results.jsonl", lora)
    r = CliRunner().invoke(app, ["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--resamples", "1000"])
    assert r.exit_code == 0, r.output
    assert "fixed by lora_rag: 10; broken: 0" in r.output
    data = json.loads((tmp_path / "b" / "compare" / "compare.json").read_text())
    assert data["a"] == "base_rag" and len(data["fixed"]) == 10
    r = CliRunner().invoke(
        app, ["report", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "rep"), "--resamples", "1000"]
    )
    assert r.exit_code == 0, r.output
    assert (tmp_path / "rep" / "report.html").exists()


def test_bench_eval_prints_ratio():
    r = CliRunner().invoke(app, ["bench", "eval", "--n", "2000"])
    assert r.exit_code == 0, r.output
    assert "speedup x" in r.output


def test_eval_bad_input_is_one_line_error(tmp_path):
    cfg = tmp_path / "eval" / "x.yaml"
    cfg.parent.mkdir()
    cfg.write_text(
        f"scenarios: {tmp_path / 'missing.jsonl'}\nsystem: {{kind: base_rag, name: b}}\nout_dir: {tmp_path / 'out'}\n"
    )
    p = subprocess.run(
        [sys.executable, "-m", "lorarag.cli", "eval", str(cfg)], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert p.returncode == 2
    assert p.stderr.strip().splitlines()[-1].startswith("error: ") and "missing.jsonl" in p.stderr


def _pinned_eval(tmp_path: Path) -> Path:
    """An eval config whose run config pins AVX2 kernels and 2 threads, with one scenario."""
    from lorarag.scenarios.records import PresentedChunk, Scenario, save_scenarios

    run = tmp_path / "run.yaml"
    run.write_text(
        f"base: {REPO / 'configs/run/ci-tiny.yaml'}\nruns_dir: {tmp_path / 'runs'}\n"
        "numerics: {cpu_isa: avx2, threads: 2}\n",
        encoding="utf-8",
    )
    save_scenarios(
        tmp_path / "scen.jsonl",
        [
            Scenario(
                "q1", "f1", "Limit?", ("50",), ("kb1",), "consistent", (PresentedChunk("kb1", "The limit is 50."),), "50"
            )
        ],
    )
    cfg = tmp_path / "eval.yaml"
    cfg.write_text(
        f"scenarios: {tmp_path / 'scen.jsonl'}\ncomponents: {run}\nout_dir: {tmp_path / 'out'}\n"
        "system: {kind: base_rag, name: base}\n",
        encoding="utf-8",
    )
    return cfg


def test_pin_numerics_sets_the_run_configs_pins(tmp_path):
    from lorarag.core.config import load_config
    from lorarag.eval.config import EvalConfig
    from lorarag.study.eval_system import pin_numerics

    cfg = load_config(_pinned_eval(tmp_path), EvalConfig)
    env: dict[str, str] = {"OMP_NUM_THREADS": "16"}
    want = {
        "ATEN_CPU_CAPABILITY": "avx2",
        "MKL_CBWR": "AVX2,STRICT",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "OMP_NUM_THREADS": "2",
        "MKL_NUM_THREADS": "2",
    }
    assert pin_numerics(cfg, env) == want and env == want
    assert pin_numerics(cfg.model_copy(update={"components": None}), env) == {}


def test_eval_pins_the_runs_numerics_before_torch_loads(tmp_path):
    """`lorarag eval` answers with the kernels its run was pinned to: the pins are in the environment,
    and torch not yet loaded, when the system is built (stopped there: no model is needed to see it)."""
    code = (
        "import os, sys\nimport lorarag.study.eval_system as es\n"
        "def stop(*a, **k):\n"
        "    keys = ('ATEN_CPU_CAPABILITY', 'MKL_CBWR', 'ONEDNN_MAX_CPU_ISA', 'OMP_NUM_THREADS')\n"
        "    print(*[os.environ.get(k) for k in keys], 'torch' in sys.modules)\n"
        "    raise SystemExit(0)\n"
        "es.build_eval_system = stop\n"
        "from lorarag.cli import app\napp(['eval', sys.argv[1]])\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA")}
    p = subprocess.run(
        [sys.executable, "-c", code, str(_pinned_eval(tmp_path))],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["avx2", "AVX2,STRICT", "AVX2", "2", "False"]
