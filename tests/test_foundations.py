"""Foundations: config validation errors, record round-trips, tiny-model factory."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from lorarag.core.config import load_config
from lorarag.core.errors import ConfigError, RecordError
from lorarag.rag.config import ChunkerConfig, RAGConfig
from lorarag.rag.records import Answer, Chunk, Retrieved, Trace, read_jsonl, write_jsonl

from .conftest import REPO


def test_config_typo_is_one_line_error_naming_key_and_file(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("corpus: {paths: [x]}\nindex: {dir: d}\nchunker: {chunk_szie: 300}\n")
    with pytest.raises(ConfigError) as ei:
        load_config(p, RAGConfig)
    msg = str(ei.value)
    assert "\n" not in msg
    assert str(p) in msg and "chunker.chunk_szie" in msg and "unknown key" in msg


def test_config_rejects_bad_overlap_and_bad_yaml(tmp_path):
    with pytest.raises(ValueError):
        ChunkerConfig(chunk_size=100, chunk_overlap=100)
    p = tmp_path / "broken.yaml"
    p.write_text("corpus: [unclosed\n")
    with pytest.raises(ConfigError, match="broken.yaml"):
        load_config(p, RAGConfig)


def test_records_round_trip_through_jsonl(tmp_path):
    c = Chunk("c1", "d.md", "d.md", "第五条 文本", 0, 6, ("第二章", "第一节"), None)
    r = Retrieved(c, 1.5, 1, "bm25")
    a = Answer("q?", "ans [S1]", ("S1",), (), ("d.md",), False, Trace("q?", (r,), (r,), "p", "raw"))
    write_jsonl(tmp_path / "a.jsonl", [a, a])
    back = read_jsonl(tmp_path / "a.jsonl", Answer)
    assert back == [a, a]
    assert back[0].trace.retrieved[0].chunk.heading_path == ("第二章", "第一节")


def test_malformed_jsonl_names_file_and_line(tmp_path):
    p = tmp_path / "x.jsonl"
    good = {"chunk_id": "a", "doc_id": "d", "source": "d", "text": "t", "start": 0, "end": 1}
    p.write_text(json.dumps(good) + "\n{not json\n")
    with pytest.raises(RecordError, match=r"x.jsonl:2: malformed JSON"):
        read_jsonl(p, Chunk)


def test_tiny_models_load_and_run(tiny_models):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_models["lm"])
    model = AutoModelForCausalLM.from_pretrained(tiny_models["lm"])
    assert model.config.head_dim >= 32
    assert (tiny_models["lm"] / "model.safetensors").exists()
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                   add_generation_prompt=True, enable_thinking=False)
    assert text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    ids = tok(text, return_tensors="pt")
    with torch.no_grad():
        out = model(**ids)
    assert out.logits.shape[-1] == len(tok)


def test_cli_help_lists_subcommands_and_validate_runs():
    out = subprocess.run([sys.executable, "-m", "lorarag.cli", "--help"], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "validate" in out.stdout and "bench" in out.stdout
    val = subprocess.run([sys.executable, "-m", "lorarag.cli", "validate"], cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert val.returncode == 0, val.stdout + val.stderr
