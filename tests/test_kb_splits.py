"""Seeded splits by fact of a user's QA set, saved and hashed; the leak check on a user set."""

from __future__ import annotations

import json

import pytest

from lorarag.core.errors import RecordError
from lorarag.fallback.format import SourceText
from lorarag.rag.records import Chunk, read_jsonl
from lorarag.scenarios.config import SplitConfig
from lorarag.scenarios.kb_records import QAItem
from lorarag.scenarios.kb_splits import GROUPS, HELD_OUT, TRAIN_VISIBLE, facts, save_splits, split_by_fact
from lorarag.train.sft import LeakError, knowledge_row, rag_row
from lorarag.train.sft_kb import kb_leak_check


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

    s = Scenario(qid="x/consistent", fact_id="x", question=question, gold_answers=("v",), relevant_ids=(),
                 scenario="consistent", presented=tuple(PresentedChunk(f"p{i}", t) for i, t in enumerate(texts)),
                 context_answer="v")
    return rag_row(s, knows=True)


def test_leak_check_on_a_user_set():
    chunks = {"c1": Chunk("c1", "d", "d", "Item 1 holds   the value v1.", 0, 10),
              "c2": Chunk("c2", "d", "d", "Item 2 holds the value v2.", 0, 10)}
    held = [QAItem("q2", "What does item 2 hold?", ("v2",), ("c2",), wordings=("Item 2's value?",))]
    clean = [knowledge_row("What does item 1 hold?", "v1", "q1"),
             _scenario_row("What does item 1 hold?", [chunks["c1"].text])]
    kb_leak_check(clean, held, chunks)
    with pytest.raises(LeakError, match="row 0: the question of held-out q2"):
        kb_leak_check([knowledge_row("item 2's   VALUE?", "v2", "q9")], held, chunks)
    with pytest.raises(LeakError, match="row 2: the chunk answering held-out q2"):
        kb_leak_check(clean + [_scenario_row("What does item 1 hold?", ["Other.", chunks["c2"].text])], held, chunks)
    fake = "Item 1 holds the value v9."
    with pytest.raises(LeakError, match="a test scenario's passage"):
        kb_leak_check([_scenario_row("What does item 1 hold?", [fake])], held, chunks, test_passages=[fake])
    kb_leak_check([r.to_swift() for r in clean], held, chunks)  # rows read back from JSONL too
    assert SourceText  # the user turn the check parses is fallback/format's
