"""Pinned CPU numerics (core/numerics.py): the kernel path a CPU picks changes the trained
adapter; with `numerics: {cpu_isa: avx2}` two different kernel choices train the same bits."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lorarag.core.errors import ConfigError
from lorarag.core.numerics import NumericsConfig, apply, cpu_flags, describe, pinned_env

REPO = Path(__file__).resolve().parents[1]
PINNED = NumericsConfig(cpu_isa="avx2", threads=1)
# What another CPU's libraries would choose, forced on this one: ATen's scalar kernels and MKL's
# SSE2-compatible GEMM instead of AVX2 (each changes the product of the same matrices here).
OTHER_CPU = {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"}


def test_pins_name_every_kernel_family_and_the_threads():
    assert pinned_env(NumericsConfig()) == {}
    assert pinned_env(PINNED) == {
        "ATEN_CPU_CAPABILITY": "avx2",
        "MKL_CBWR": "AVX2,STRICT",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }
    env = {"ATEN_CPU_CAPABILITY": "default", "PATH": "/bin"}
    assert apply(PINNED, env)["ATEN_CPU_CAPABILITY"] == "avx2"
    assert env["ATEN_CPU_CAPABILITY"] == "avx2" and env["PATH"] == "/bin"
    with pytest.raises(ValueError):
        NumericsConfig(cpu_isa="avx512")
    with pytest.raises(ValueError):
        NumericsConfig(threads=0)


def test_pinning_after_torch_loaded_is_refused(monkeypatch):
    import torch  # noqa: F401  (loaded: its kernels are chosen)

    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    with pytest.raises(ConfigError, match="torch is already loaded"):
        apply(NumericsConfig(cpu_isa="avx2"))
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    monkeypatch.setenv("MKL_CBWR", "AVX2,STRICT")
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    apply(NumericsConfig(cpu_isa="avx2"))  # already in effect: nothing to refuse


def test_cpu_flags_and_description(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f amx_bf16 avx512_bf16\n")
    assert cpu_flags(info) == ["avx2", "avx512f", "avx512_bf16", "amx_bf16"]
    assert cpu_flags(tmp_path / "missing") == []
    d = describe({"MKL_CBWR": "AVX2,STRICT", "HOME": "/root"})
    assert d["env"] == {"MKL_CBWR": "AVX2,STRICT"}


def _train(tmp_path: Path, name: str, lm: Path, data: Path, env: dict[str, str]) -> str:
    args = {
        "lora_rank": 4,
        "lora_alpha": 8,
        "max_steps": 3,
        "save_steps": 3,
        "per_device_train_batch_size": 4,
        "max_length": 512,
        "torch_dtype": "float32",
        "learning_rate": 5e-3,
    }
    out = tmp_path / name
    cmd = [
        sys.executable,
        "-m",
        "lorarag.train.peft_trainer",
        "--model",
        str(lm),
        "--dataset",
        str(data),
        "--output_dir",
        str(out),
        "--seed",
        "0",
        "--args",
        json.dumps(args),
    ]
    clean = {k: v for k, v in os.environ.items() if k not in {*OTHER_CPU, *pinned_env(PINNED)}}
    subprocess.run(cmd, cwd=REPO, env={**clean, **env}, check=True, capture_output=True, timeout=300)
    return hashlib.sha256((out / "checkpoint-3" / "adapter_model.safetensors").read_bytes()).hexdigest()


@pytest.mark.slow
def test_pinned_numerics_train_the_same_adapter_whatever_kernels_the_cpu_offers(tmp_path, tiny_models):
    from lorarag.bench.demo_kb import load_world_kb, world_rows
    from lorarag.rag.config import ChunkerConfig
    from lorarag.scenarios.config import SplitConfig, WorldConfig
    from lorarag.train.config import SFTConfig
    from lorarag.train.sft import write_sft

    kb = load_world_kb(WorldConfig(seed=0, n_orgs=8), ChunkerConfig(), tmp_path / "world")
    data = write_sft(world_rows(kb, SplitConfig(), SFTConfig(knowledge_repeats=1))[:12], tmp_path / "train.jsonl")
    lm = tiny_models["lm"]
    pin = pinned_env(PINNED)
    other = _train(tmp_path, "other", lm, data, {**OTHER_CPU, "OMP_NUM_THREADS": "1"})
    pinned_other = _train(tmp_path, "pinned-other", lm, data, {**OTHER_CPU, **pin})
    pinned_here = _train(tmp_path, "pinned-here", lm, data, pin)
    assert other != pinned_other  # the kernel path alone changes the adapter's bits
    assert pinned_other == pinned_here  # pinned, the machine's own choice no longer matters


def test_run_json_records_the_kernels_and_a_pinned_config_says_so(tmp_path):
    from lorarag.core.config import load_config
    from lorarag.core.runinfo import start_run
    from lorarag.study.pipeline import run
    from lorarag.trained.config import RunConfig

    info = json.loads((start_run(tmp_path / "r", None) / "run.json").read_text())
    assert info["numerics"]["cpu_flags"] == cpu_flags() and "env" in info["numerics"]
    cfg = load_config(REPO / "configs/run/cpu-demo-pinned.yaml", RunConfig)
    assert cfg.numerics == NumericsConfig(cpu_isa="avx2", threads=2)
    lines: list[str] = []
    run(cfg, dry_run=True, echo=lines.append)
    assert lines[0].startswith("numerics  ATEN_CPU_CAPABILITY=avx2 MKL_CBWR=AVX2,STRICT")
