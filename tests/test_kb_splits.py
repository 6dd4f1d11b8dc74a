"""Seeded splits by fact of a QA set (a cluster's items together, each language alike on request), saved
and hashed; the leak check on a user set."""

from __future__ import annotations

import json
import re

import pytest

from lorarag.core.errors import RecordError
from lorarag.fallback.format import SourceText
from lorarag.rag.records import Chunk, read_jsonl
from lorarag.scenarios.config import SplitConfig
from lorarag.scenarios.kb_records import QAItem
from lorarag.scenarios.kb_splits import GROUPS, HELD_OUT, TRAIN_VISIBLE, facts, save_splits, split_by_fact
from lorarag.train.sft import LeakError, knowledge_row, leak_check, rag_row


def _items(n: int = 40) -> list[QAItem]:
    out = [QAItem(f"q{i:02d}", f"What is the value of item {i}?", (f"v{i}",), (f"c{i}",)) for i in range(n)]
    # q00 and q01 share an answer chunk: one fact, never split apart
    out[1] = QAItem("q01", "Which value does item 0 hold, again?", ("v0",), ("c0", "c1"))
    out.append(QAItem("r1", "A query without answers", (), ("c5",)))  # BEIR without answers
    out.append(QAItem("u1", "A question answered nowhere", (), (), unanswerable=True))
    return out


def test_splits_are_by_fact_seeded_and_cover_every_item_once():
    items = _items()
    assert len(facts(items)) == len(items) - 2  # q00+q01 are one fact; r1 joins c5's fact
    a = split_by_fact(items, SplitConfig(seed=3))
    assert a == split_by_fact(list(reversed(items)), SplitConfig(seed=3))  # order of the file does not matter
    assert a != split_by_fact(items, SplitConfig(seed=4))
    placed = [it.qid for g in GROUPS for it in a[g]]
    assert sorted(placed) == sorted(it.qid for it in items if it.qid != "r1")
    assert [it.qid for it in a["retrieval_only"]] == ["r1"]
    where = {it.qid: g for g in GROUPS for it in a[g]}
    assert where["q00"] == where["q01"]
    assert all(a[g] for g in GROUPS)
    n = len(facts([it for it in items if it.qid != "r1"]))
    assert len(facts(a["known"] + a["known_dev"])) == round(0.5 * n)
    held = {c for g in HELD_OUT for it in a[g] for c in it.relevant_ids}
    assert not held & {c for g in TRAIN_VISIBLE for it in a[g] for c in it.relevant_ids}
    with pytest.raises(RecordError, match="too few to split"):
        split_by_fact(items[:4], SplitConfig())


def test_saved_splits_round_trip_and_are_hashed_into_run_json(tmp_path):
    from lorarag.core.runinfo import start_run

    groups = split_by_fact(_items(), SplitConfig(seed=1))
    paths = save_splits(groups, tmp_path / "data/splits", seed=1)
    assert read_jsonl(tmp_path / "data/splits/unseen.jsonl", QAItem) == groups["unseen"]
    summary = json.loads((tmp_path / "data/splits/split.json").read_text())
    assert summary["seed"] == 1 and summary["items"]["unseen"] == len(groups["unseen"])
    start_run(tmp_path / "run", None, data=paths)
    hashes = json.loads((tmp_path / "run/run.json").read_text())["data_hashes"]
    assert set(hashes) == {str(p) for p in paths}


def _scenario_row(question: str, texts: list[str]):
    from lorarag.scenarios.records import PresentedChunk, Scenario

    s = Scenario(
        qid="x/consistent",
        fact_id="x",
        question=question,
        gold_answers=("v",),
        relevant_ids=(),
        scenario="consistent",
        presented=tuple(PresentedChunk(f"p{i}", t) for i, t in enumerate(texts)),
        context_answer="v",
    )
    return rag_row(s, knows=True)


def test_leak_check_on_a_user_set():
    chunks = {
        "c1": Chunk("c1", "d", "d", "Item 1 holds   the value v1.", 0, 10),
        "c2": Chunk("c2", "d", "d", "Item 2 holds the value v2.", 0, 10),
    }
    held = [QAItem("q2", "What does item 2 hold?", ("v2",), ("c2",), wordings=("Item 2's value?",))]
    clean = [
        knowledge_row("What does item 1 hold?", "v1", "q1"),
        _scenario_row("What does item 1 hold?", [chunks["c1"].text]),
    ]
    leak_check(clean, held, chunks)
    with pytest.raises(LeakError, match="row 0: the question of held-out q2"):
        leak_check([knowledge_row("item 2's   VALUE?", "v2", "q9")], held, chunks)
    with pytest.raises(LeakError, match="row 2: the chunk answering held-out q2"):
        leak_check(clean + [_scenario_row("What does item 1 hold?", ["Other.", chunks["c2"].text])], held, chunks)
    fake = "Item 1 holds the value v9."
    with pytest.raises(LeakError, match="a test scenario's passage"):
        leak_check([_scenario_row("What does item 1 hold?", [fake])], held, chunks, test_passages=[fake])
    leak_check([r.to_swift() for r in clean], held, chunks)  # rows read back from JSONL too
    assert SourceText  # the user turn the check parses is fallback/format's


def test_items_sharing_a_cluster_are_one_unit_of_the_split(tmp_path):
    """The world written as a KB: each organisation's 6 questions (5 facts + the unanswerable one) share
    its cluster and no chunk, yet land in one split. 12 organisations: known _cut(12, 0.5, keep 3) = 6, of
    which round(0.2 x 6) = 1 dev; context-only round(0.1 x 12) = 1; the 5 never-learned give
    round(0.2 x 5) = 1 dev and 4 test."""
    from tests.test_world import load_world_kb

    kb = load_world_kb(tmp_path, seed=0, n_orgs=12)
    assert len(facts(kb.items)) == 12 and all(len(f) == 6 for f in facts(kb.items))
    for seed in range(3):
        groups = split_by_fact(kb.items, SplitConfig(seed=seed))
        where: dict[str, set[str]] = {}
        for g in GROUPS:
            for it in groups[g]:
                where.setdefault(it.cluster, set()).add(g)
        assert len(where) == 12 and all(len(gs) == 1 for gs in where.values())
        orgs = {g: sum(gs == {g} for gs in where.values()) for g in GROUPS}
        assert orgs == {"known": 5, "known_dev": 1, "context_only": 1, "unseen_dev": 1, "unseen": 4}
    # without the cluster each fact (its own chunk) is a unit, and an organisation is split up
    from dataclasses import replace

    loose = split_by_fact([replace(it, cluster="") for it in kb.items], SplitConfig(seed=0))
    spread = {
        it.qid.split("/")[0]: {g for g in GROUPS for x in loose[g] if x.qid.split("/")[0] == it.qid.split("/")[0]}
        for it in kb.items
    }
    assert any(len(gs) > 1 for gs in spread.values())


def _lang_items(n_en: int, n_zh: int) -> list[QAItem]:
    en = [
        QAItem(f"e{i:02d}", f"What is the value of item {i}?", (f"v{i}",), (f"ce{i}",), language="en") for i in range(n_en)
    ]
    zh = [QAItem(f"z{i:02d}", f"第{i}项的值是多少？", (f"值{i}",), (f"cz{i}",), language="zh") for i in range(n_zh)]
    return en + zh


def test_stratify_languages_cuts_each_language_in_the_same_fractions():
    """20 English and 10 Chinese facts, known 0.5, context-only 0.1, dev 0.2, cut per language:
    en: known 10 (dev round(2.0) = 2), context-only 2, never-learned 8 (dev round(1.6) = 2);
    zh: known 5 (dev round(1.0) = 1), context-only 1, never-learned 4 (dev round(0.8) = 1):
    each language half known and 40% never learned, whatever the seed."""
    items = _lang_items(20, 10)
    cfg = dict(known_fraction=0.5, context_only_fraction=0.1, dev_fraction=0.2, stratify_languages=True)
    want = {
        "en": {"known": 8, "known_dev": 2, "context_only": 2, "unseen_dev": 2, "unseen": 6},
        "zh": {"known": 4, "known_dev": 1, "context_only": 1, "unseen_dev": 1, "unseen": 3},
    }
    for seed in range(4):
        groups = split_by_fact(items, SplitConfig(seed=seed, **cfg))
        got = {lang: {g: sum(it.language == lang for it in groups[g]) for g in GROUPS} for lang in ("en", "zh")}
        assert got == want
    # one draw over all 30 facts keeps the totals (known 15 = 12 + 3 dev, context-only 3, never-learned
    # 12 = round(2.4) = 2 dev + 10) but not the languages' shares
    plain = split_by_fact(items, SplitConfig(seed=0, **{**cfg, "stratify_languages": False}))
    assert {g: len(plain[g]) for g in GROUPS} == {
        "known": 12,
        "known_dev": 3,
        "context_only": 3,
        "unseen_dev": 2,
        "unseen": 10,
    }


def test_a_jsonl_cluster_is_read_and_a_non_string_one_is_a_one_line_error(tmp_path):
    from lorarag.scenarios.config import QuestionSource
    from lorarag.scenarios.kb_questions import load_questions

    path = tmp_path / "qa.jsonl"
    rows = [
        {"id": "a", "question": "Who leads Vel?", "answers": ["Ada"], "relevant_ids": ["d1"], "cluster": "vel"},
        {"id": "b", "question": "Where is Vel?", "answers": ["Lyon"], "relevant_ids": ["d2"], "cluster": "vel"},
        {"id": "c", "question": "Who leads Kor?", "answers": ["Bo"], "relevant_ids": ["d3"]},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    items = load_questions(QuestionSource(kind="jsonl", path=str(path)))
    assert [it.cluster for it in items] == ["vel", "vel", ""]
    assert [
        len(f) for f in facts([QAItem(it.qid, it.question, it.answers, (it.qid,), cluster=it.cluster) for it in items])
    ] == [2, 1]  # a and b: one unit; c alone
    for bad, message in ((3, "expected a string, got a number"), (["vel"], "expected a string, got a list"), ("", "empty")):
        path.write_text(json.dumps({**rows[0], "cluster": bad}) + "\n", encoding="utf-8")
        with pytest.raises(RecordError, match=rf"^{re.escape(str(path))}:1 \(id a\): cluster: {message}$") as e:
            load_questions(QuestionSource(kind="jsonl", path=str(path)))
        assert "\n" not in str(e.value)
