"""Shared fixtures: tiny local Qwen3 models (built once per session) and shared-data paths."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MODELSCOPE_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("VLLM_PLUGINS", "")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = REPO.parent / "shared" / "data"


def shared_data(sub: str) -> Path:
    """Path to a folder of ../shared/data, or skip the test cleanly when it is absent."""
    p = SHARED_DATA / sub
    if not p.exists():
        pytest.skip(f"shared data not present: {p}")
    return p


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory) -> dict[str, Path]:
    """Tiny random Qwen3 causal LM, embedding model and reranker (safetensors, local)."""
    from lorarag.testing.tiny import build_all

    return build_all(tmp_path_factory.mktemp("tiny-models"))


@pytest.fixture(scope="session")
def lora(tiny_models, tmp_path_factory) -> Path:
    """One tiny peft LoRA on the tiny LM, shared by every test (peft's A init is unseeded, so two
    builds would differ and backends could not be compared across modules)."""
    from tests.tiny_lora import build_lora

    return build_lora(tiny_models["lm"], tmp_path_factory.mktemp("lora") / "sft")


@pytest.fixture
def cli(monkeypatch, capsys):
    """Run `lorarag ARGS...` in-process through `main()`: (exit code, stdout, stderr)."""
    from lorarag.cli import main

    def run(*args) -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "argv", ["lorarag", *map(str, args)])
        code = 0
        try:
            main()
        except SystemExit as exc:
            code = 0 if exc.code is None else exc.code
        out, err = capsys.readouterr()
        return code, out, err

    return run
