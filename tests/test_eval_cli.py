"""`lorarag compare`, `report`, `bench eval` and `eval` config errors through the real CLI."""

from __future__ import annotations

import json
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
    r = CliRunner().invoke(app, ["report", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "rep"),
                                 "--resamples", "1000"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "rep" / "report.html").exists()


def test_bench_eval_prints_ratio():
    r = CliRunner().invoke(app, ["bench", "eval", "--n", "2000"])
    assert r.exit_code == 0, r.output
    assert "speedup x" in r.output


def test_eval_bad_input_is_one_line_error(tmp_path):
    cfg = tmp_path / "eval" / "x.yaml"
    cfg.parent.mkdir()
    cfg.write_text(f"scenarios: {tmp_path / 'missing.jsonl'}\nsystem: {{kind: base_rag, name: b}}\n"
                   f"out_dir: {tmp_path / 'out'}\n")
    p = subprocess.run([sys.executable, "-m", "lorarag.cli", "eval", str(cfg)], cwd=REPO, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 2
    assert p.stderr.strip().splitlines()[-1].startswith("error: ") and "missing.jsonl" in p.stderr
