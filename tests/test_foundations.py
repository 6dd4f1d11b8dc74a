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
    text = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True, enable_thinking=False
    )
    assert text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    ids = tok(text, return_tensors="pt")
    with torch.no_grad():
        out = model(**ids)
    assert out.logits.shape[-1] == len(tok)


def test_cli_help_lists_subcommands_and_validate_runs():
    out = subprocess.run(
        [sys.executable, "-m", "lorarag.cli", "--help"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "validate" in out.stdout and "bench" in out.stdout
    val = subprocess.run(
        [sys.executable, "-m", "lorarag.cli", "validate"], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert val.returncode == 0, val.stdout + val.stderr


def test_record_types_are_checked_not_coerced(tmp_path):
    """A string where a list is expected is an error naming file:line and the field, never a
    list of characters; a number where text is expected too, nested fields by their path."""
    from lorarag.rag.records import from_dict

    good = {"chunk_id": "a", "doc_id": "d", "source": "d", "text": "t", "start": 0, "end": 1}
    p = tmp_path / "c.jsonl"
    p.write_text("\n".join(json.dumps(x) for x in [good, {**good, "heading_path": "Intro"}]) + "\n")
    with pytest.raises(RecordError, match=r"c.jsonl:2: heading_path: expected a list of strings, got a string"):
        read_jsonl(p, Chunk)
    p.write_text(json.dumps(good) + "\n\n" + json.dumps({**good, "start": "0"}) + "\n")  # line 3: blank line kept
    with pytest.raises(RecordError, match=r"c.jsonl:3: start: expected an integer, got a string"):
        read_jsonl(p, Chunk)
    with pytest.raises(RecordError, match=r"start: expected an integer, got true/false"):
        from_dict(Chunk, {**good, "start": True})
    with pytest.raises(RecordError, match="Chunk without field"):
        from_dict(Chunk, {"chunk_id": "a"})
    r = {"chunk": {**good, "text": 5}, "score": 1, "rank": 1}
    with pytest.raises(RecordError, match=r"chunk\.text: expected a string, got a number"):
        from_dict(Retrieved, r)
    back = from_dict(Retrieved, {**r, "chunk": good})
    assert back.score == 1.0 and isinstance(back.score, float) and back.chunk.heading_path == ()
    t = {"question": "q", "timings_s": [["generate", "fast"]]}
    with pytest.raises(RecordError, match=r"timings_s\[0\]\[1\]: expected a number, got a string"):
        from_dict(Trace, t)
    assert from_dict(Chunk, {**good, "page": None}).page is None


def test_non_utf8_jsonl_is_one_line_record_error(tmp_path):
    p = tmp_path / "latin.jsonl"
    p.write_bytes('{"text": "café"}\n'.encode("latin-1"))
    with pytest.raises(RecordError, match=r"latin.jsonl: not UTF-8 text \(invalid byte at offset 13\)"):
        read_jsonl(p, Chunk)


def test_duplicate_yaml_keys_are_refused(tmp_path):
    p = tmp_path / "dup.yaml"
    p.write_text("corpus: {paths: [x]}\nindex: {dir: a}\nindex: {dir: b}\n")
    with pytest.raises(ConfigError, match=r"dup.yaml: line 3: duplicate key 'index'"):
        load_config(p, RAGConfig)
