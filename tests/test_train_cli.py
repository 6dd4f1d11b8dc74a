"""`lorarag world`, `lorarag sft` and the inputs of `lorarag train` through the real CLI: the world's
knowledge base read back by the KB loaders, a run config's SFT rows with nothing held out in them,
and the one-line errors of a train config whose rows or pairs were never built."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from lorarag.rag.config import ChunkerConfig
from lorarag.scenarios.config import CorpusSource, QuestionSource
from lorarag.scenarios.from_corpus import check_outdated, load_outdated
from lorarag.scenarios.kb_corpus import load_corpus
from lorarag.scenarios.kb_labels import map_labels
from lorarag.scenarios.kb_questions import check_against_corpus, load_questions

from .conftest import REPO
from .test_bad_input import one_line_error


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def test_world_out_writes_a_knowledge_base_the_kb_loaders_read(tmp_path, cli):
    out = tmp_path / "w"
    code, stdout, err = cli("world", "--out", out, "--n-orgs", 4, "--wordings", 3)
    assert code == 0, err
    corpus = load_corpus(CorpusSource(kind="beir", path=str(out / "corpus.jsonl")), ChunkerConfig())
    items, _ = map_labels(load_questions(QuestionSource(kind="jsonl", path=str(out / "questions.jsonl"))), corpus)
    check_against_corpus(items, corpus)
    older = load_outdated(str(out / "older.jsonl"))
    check_outdated(older, items, str(out / "questions.jsonl"))
    # 4 organisations x 5 attributes: 20 profile paragraphs and 20 answerable questions, plus one
    # unanswerable question per organisation; each question in 3 wordings, its organisation its cluster
    answerable = [it for it in items if it.answers]
    assert len(corpus.documents) == 20 and len(items) == 24 and len(answerable) == 20
    assert sum(it.unanswerable for it in items) == 4 and all(len(it.all_wordings) == 3 for it in items)
    assert {it.cluster for it in items} == {"org000", "org001", "org002", "org003"}
    by_id = {c.chunk_id: c for c in corpus.chunks}
    for it in answerable:  # the label is the chunk of the fact's own paragraph, which states the answer
        (cid,) = it.relevant_ids
        org, attribute = it.qid.split("/")
        assert by_id[cid].doc_id == f"orgs/{org}/profile#{attribute}" and it.cluster == org
        assert any(a in by_id[cid].text for a in it.answers)
    assert older and set(older) <= {it.qid for it in answerable}
    assert stdout.splitlines() == [
        f"20 documents -> {out / 'corpus.jsonl'}",
        f"24 questions (3 wordings each) -> {out / 'questions.jsonl'}",
        f"{len(_jsonl(out / 'older.jsonl'))} older versions -> {out / 'older.jsonl'}",
    ]
    one_line_error(*cli("world", "--out", tmp_path / "x", "--wordings", 11)[::2], "lorarag world", "wordings")
    assert not (tmp_path / "x").exists()


def test_sft_writes_a_run_configs_rows_with_nothing_held_out_in_them(tmp_path, cli, monkeypatch):
    """ci-tiny (a world run config): the rows, the scenarios and the splits are written, nothing is
    trained, and no row asks a never-learned question, a held-out test or dev wording of a known
    fact, or shows a chunk that answers a never-learned question (read back from the files)."""
    monkeypatch.chdir(tmp_path)  # ci-tiny's relative paths (runs/, checkpoints/) land here
    code, out, err = cli("sft", REPO / "configs/run/ci-tiny.yaml")
    assert code == 0, err
    root = tmp_path / "runs/ci-tiny"
    train = _jsonl(root / "sft/train.jsonl")
    assert out.strip().splitlines()[-1] == f"{len(train)} training rows (leak check passed)"
    for name in (
        "world/corpus.jsonl",
        "world/questions.jsonl",
        "world/older.jsonl",
        "sft/val.jsonl",
        "sft/rag-sft/train.jsonl",
        "scenarios/test.jsonl",
        "scenarios/dev-known.jsonl",
    ):
        assert (root / name).is_file(), name
    assert not (tmp_path / "runs/train").exists()  # no training

    turns = [m["content"] for r in train + _jsonl(root / "sft/val.jsonl") for m in r["messages"] if m["role"] == "user"]
    asked = {t.rsplit("Question: ", 1)[-1] for t in turns}
    splits = {g: _jsonl(root / f"data/splits/{g}.jsonl") for g in ("known", "unseen", "unseen_dev")}
    never = [it for g in ("unseen", "unseen_dev") for it in splits[g]]
    held = {w for it in never for w in (it["question"], *it["wordings"])}
    held |= {
        s["question"]
        for f in ("test", "dev-known")
        for s in _jsonl(root / f"scenarios/{f}.jsonl")
        if s["knowledge"] == "known"
    }
    trained = {w for it in splits["known"] for w in (it["question"], *it["wordings"])}
    assert never and asked & trained  # the rows ask the known facts as the splits write them ...
    assert not asked & held  # ... and none of the held-out questions
    chunks = {c["chunk_id"]: " ".join(c["text"].split()) for c in _jsonl(root / "data/chunks.jsonl")}
    shown = "\n".join(turns)
    assert any(chunks[c] in shown for it in splits["known"] for c in it["relevant_ids"])
    assert not [c for it in never for c in it["relevant_ids"] if chunks[c] in shown]


def test_train_without_its_rows_or_pairs_says_how_to_build_them(tmp_path, cli):
    data = yaml.safe_load((REPO / "configs/train/tiny.yaml").read_text())
    data.update(dataset=str(tmp_path / "none/train.jsonl"), runs_dir=str(tmp_path / "runs"))
    cfg = tmp_path / "train.yaml"
    cfg.write_text(yaml.safe_dump(data))
    one_line_error(*cli("train", cfg)[::2], "none/train.jsonl", "lorarag sft <run config>")
    rows = tmp_path / "none/train.jsonl"
    rows.parent.mkdir()
    rows.write_text(
        json.dumps({"messages": [{"role": "user", "content": "Question: q"}, {"role": "assistant", "content": "a"}]}) + "\n"
    )
    cfg.write_text(yaml.safe_dump({**data, "preference": {"enabled": True}}))
    one_line_error(*cli("train", cfg)[::2], "none/train.pairs.jsonl", "lorarag sft <run config>")
    assert not (tmp_path / "runs").exists()  # refused before any training started
