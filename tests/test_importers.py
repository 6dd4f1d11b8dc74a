"""Importers of the shared conflict sets (skipped cleanly when ../shared/data is absent)."""

from __future__ import annotations

import json

import pytest

from lorarag.core.errors import RecordError
from lorarag.rag.records import Chunk, read_jsonl
from lorarag.scenarios.importers import conflictnq, conflictqa, import_set
from lorarag.scenarios.records import load_scenarios, validate_against_kb
from tests.conftest import shared_data


def test_conflictnq_counts_match_the_file():
    path = shared_data("conflictnq") / "test.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    scenarios, chunks = conflictnq(path)
    n_fake = sum(len(r["fake_passages"]) for r in rows)
    assert sum(s.scenario == "consistent" for s in scenarios) == len(rows) == 226
    assert sum(s.scenario == "factual_error" for s in scenarios) == n_fake
    assert len(chunks) == sum(len(r["real_passages"]) for r in rows)
    validate_against_kb(scenarios, {c.chunk_id for c in chunks})
    first = next(s for s in scenarios if s.fact_id == f"conflictnq/{rows[0]['id']}" and s.scenario == "factual_error")
    assert first.context_answer == rows[0]["fake_short_answer"]
    assert first.presented[0].text == rows[0]["fake_passages"][0]["passage"]
    assert first.gold_answers == (rows[0]["real_short_answer"],)


def test_conflictqa_truth_follows_ground_truth_and_polarity():
    path = shared_data("conflictqa") / "strategyqa-chatgpt.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    scenarios, chunks = conflictqa(path)
    by_id = {s.qid: s for s in scenarios}
    # Row 0 (hand-checked): ground truth True; the memory answer is affirmative, so the
    # memory-aligned evidence is the true one and the counter evidence is the factual error.
    s0 = by_id["conflictqa/00000/consistent"]
    assert s0.gold_answers[0] == "yes"
    assert s0.presented[0].text == rows[0]["parametric_memory_aligned_evidence"]
    assert by_id["conflictqa/00000/factual_error"].presented[0].text == rows[0]["counter_memory_aligned_evidence"]
    # Row 1: ground truth False, memory "could not perform lawful arrests": memory is right again.
    s1 = by_id["conflictqa/00001/consistent"]
    assert s1.gold_answers[0] == "no" and s1.presented[0].text == rows[1]["parametric_memory_aligned_evidence"]
    assert len(scenarios) == 2 * len(chunks) and len(chunks) <= len(rows)
    validate_against_kb(scenarios, {c.chunk_id for c in chunks})


def test_import_set_writes_scenarios_and_kb(tmp_path):
    shared_data("conflictnq")
    out = tmp_path / "cnq.jsonl"
    n = import_set("conflictnq", shared_data("conflictnq").parent, out, split="val")
    assert n == len(load_scenarios(out))
    kb = read_jsonl(tmp_path / "cnq.chunks.jsonl", Chunk)
    validate_against_kb(load_scenarios(out), {c.chunk_id for c in kb})
    with pytest.raises(RecordError, match="unknown conflict set"):
        import_set("conflictxx", tmp_path, out)


def test_a_broken_file_names_the_line(tmp_path):
    bad = tmp_path / "conflictnq" / "test.jsonl"
    bad.parent.mkdir()
    bad.write_text('{"id": 1}\n{oops\n', encoding="utf-8")
    with pytest.raises(RecordError, match=":2:"):
        conflictnq(bad)


def _cnq(qid, answer="Paris"):
    return {
        "id": qid,
        "question": "capital?",
        "real_passages": [{"passage": "Paris is the capital."}],
        "fake_passages": [{"passage": "Lyon is the capital."}],
        "real_short_answer": answer,
        "fake_short_answer": "Lyon",
    }


def test_duplicate_upstream_ids_empty_files_and_non_utf8_are_errors(tmp_path):
    path = tmp_path / "test.jsonl"
    path.write_text("".join(json.dumps(_cnq(q)) + "\n" for q in (1, 2, 1)), encoding="utf-8")
    with pytest.raises(RecordError, match=r"test.jsonl:3: duplicate id '1' \(first at line 1\)"):
        conflictnq(path)
    path.write_text("\n\n", encoding="utf-8")
    with pytest.raises(RecordError, match=r"test.jsonl: no rows \(empty file\)"):
        conflictnq(path)
    path.write_bytes(json.dumps(_cnq(1)).replace("Paris", "Pàris").encode("latin-1") + b"\n")
    with pytest.raises(RecordError, match="test.jsonl: not UTF-8"):
        conflictnq(path)
    path.write_text(json.dumps(_cnq(1, answer=["Paris"])) + "\n", encoding="utf-8")
    with pytest.raises(RecordError, match=r"test.jsonl:1: ConflictNQ row 1: real_short_answer is not text"):
        conflictnq(path)
    # ConflictQA rows whose answers all share a polarity give no scenario: an error, not 0 written
    qa = tmp_path / "conflictqa" / "strategyqa-chatgpt.jsonl"
    qa.parent.mkdir()
    qa.write_text(
        json.dumps(
            {
                "question": "q?",
                "ground_truth": ["True"],
                "memory_answer": "yes it is",
                "counter_answer": "it is",
                "parametric_memory_aligned_evidence": "a",
                "counter_memory_aligned_evidence": "b",
            }
        )
        + "\n",
        encoding="utf-8",
    )
    with pytest.raises(RecordError, match=r"strategyqa-chatgpt.jsonl: no usable rows \(0 scenarios\)"):
        import_set("conflictqa", tmp_path, tmp_path / "out.jsonl")
    assert not (tmp_path / "out.jsonl").exists()
