"""Knowledge updates on a user's knowledge base: a seeded share of the taught facts with an older
version is taught that older answer; the test presents the current chunk (scenario `update`) for the
known split's, the known-dev split's train the judgement, and no row shows a tested fact's chunk."""

from __future__ import annotations

import pytest

from lorarag.fallback.format import parse_reply
from lorarag.rag.records import Chunk
from lorarag.scenarios.config import DataConfig, SplitConfig
from lorarag.scenarios.from_corpus import OlderValue, Versions, corpus_scenarios
from lorarag.scenarios.kb_records import QAItem
from lorarag.scenarios.kb_splits import split_by_fact
from lorarag.scenarios.kb_updates import asked_updates, stale_taught
from lorarag.train.config import SFTConfig
from lorarag.train.sft import build_rows, shown

TOWNS = [
    "Elmira",
    "Dunmore",
    "Kelso",
    "Arden",
    "Brill",
    "Corfe",
    "Dover",
    "Eske",
    "Flint",
    "Garth",
    "Holt",
    "Ivel",
    "Jura",
    "Kirk",
    "Lyle",
    "Moss",
    "Nairn",
    "Oban",
    "Perth",
    "Quoy",
]


def _kb() -> tuple[list[Chunk], list[QAItem], dict[str, Versions]]:
    chunks, items, older = [], [], {}
    for i, town in enumerate(TOWNS):
        keeper, before = f"Ann{i} Vale", f"Bob{i} Rook"
        chunks.append(Chunk(f"c{i}", f"d{i}", f"{town}.md", f"Since 2024 the {town} lighthouse keeper is {keeper}.", 0, 50))
        chunks.append(Chunk(f"x{i}", f"d{i}", f"{town}.md", f"The {town} market opens on Mondays.", 0, 30))
        items.append(QAItem(f"q{i}", f"Who keeps the {town} lighthouse?", (keeper,), (f"c{i}",)))
        older[f"q{i}"] = (OlderValue(f"q{i}", before, "2019"),)
    return chunks, items, older


def _answer(older: dict[str, Versions], qid: str) -> str:
    (one,) = older[qid]
    return one.answer


SPLIT = SplitConfig(seed=0, known_fraction=0.6, context_only_fraction=0.1, dev_fraction=0.4)


def test_the_stale_share_is_seeded_per_item_and_needs_an_older_version():
    _, items, older = _kb()
    groups = split_by_fact(items, SPLIT)
    assert stale_taught(groups, older, 0.0, 0) == {}
    every = stale_taught(groups, older, 1.0, 0)
    taught = {it.qid for g in ("known", "known_dev") for it in groups[g]}
    assert set(every) == taught  # every taught fact has an older version here
    half = stale_taught(groups, older, 0.5, 0)
    assert set(half) < taught and half == stale_taught(groups, older, 0.5, 0)
    # an item without an older version is never stale, whatever the share
    assert not set(stale_taught(groups, {}, 1.0, 0))
    with pytest.raises(ValueError, match="update_fraction needs `outdated`"):
        DataConfig.model_validate(
            {
                "corpus": {"kind": "folder", "path": "c"},
                "questions": {"kind": "jsonl", "path": "q.jsonl"},
                "update_fraction": 0.5,
            }
        )


def test_a_stale_fact_is_asked_on_the_update_cell_only_with_the_current_chunk():
    chunks, items, older = _kb()
    groups = split_by_fact(items, SPLIT)
    stale = stale_taught(groups, older, 1.0, 0)
    test = corpus_scenarios(
        groups["known"],
        chunks,
        name="kb",
        knowledge="known",
        stale=stale,
        types=("consistent", "factual_error", "outdated", "irrelevant", "update"),
        outdated=older,
    )
    assert test and {s.scenario for s in test} == {"update"}
    by_id = {c.chunk_id: c for c in chunks}
    for s in test:
        it = next(i for i in items if f"kb/{i.qid}" == s.fact_id)
        gold = by_id[it.relevant_ids[0]]
        assert gold.text in [p.text for p in s.presented] and not any(p.replaces for p in s.presented)
        assert s.gold_answers == it.answers and s.context_answer == it.answers[0]
        assert s.superseded == (_answer(older, it.qid),)


def test_rows_teach_the_older_answer_and_train_the_update_on_facts_the_test_never_asks():
    chunks, items, older = _kb()
    groups = split_by_fact(items, SPLIT)
    stale = stale_taught(groups, older, 1.0, 0)
    tested = asked_updates(groups, stale)
    assert tested and tested < set(stale)
    rows, _, stats = build_rows(
        groups, chunks, SFTConfig(seed=0, knowledge_repeats=1, distractors=1), conflict_seed=0, outdated=older, stale=stale
    )
    assert (stats["taught_older"], stats["tested_updates"]) == (len(stale), len(tested))
    for r in rows:
        q = r.fact_id.removeprefix("kb/")
        if r.kind == "knowledge" and q in stale:  # closed book: the older answer
            assert dict(r.messages)["assistant"] == _answer(older, q)
    upd = [r for r in rows if r.kind == "rag" and r.fact_id.removeprefix("kb/") in stale]
    assert upd and {r.fact_id.removeprefix("kb/") for r in upd} == set(stale) - tested
    for r in upd:
        reply = parse_reply(dict(r.messages)["assistant"])
        q = r.fact_id.removeprefix("kb/")
        it = next(i for i in items if i.qid == q)
        assert r.verdict == "supported" and reply.memory == _answer(older, q) and reply.answer == it.answers[0]
    # no row shows the chunk of a fact the update cell asks, not even as another fact's distractor
    tested_chunks = {shown(c.text) for c in chunks if any(c.chunk_id in i.relevant_ids for i in items if i.qid in tested)}
    assert not [r for r in rows if any(t in dict(r.messages).get("user", "") for t in tested_chunks)]


def test_a_stale_fact_with_two_older_versions_is_taught_the_one_an_outdated_test_would_show():
    """Each lighthouse had two keepers before (Bob<i> Rook in 2019, Cy<i> Dunn in 2021): a stale fact is
    taught the version the test's outdated scenario of it shows (same seed), so the update cell's
    superseded value is what an outdated test would present; over the 12 taught facts both are taught."""
    chunks, items, one = _kb()
    older = {q: (v[0], OlderValue(q, f"Cy{q[1:]} Dunn", "2021")) for q, v in one.items()}
    groups = split_by_fact(items, SPLIT)
    stale = stale_taught(groups, older, 1.0, 0)
    taught = [it for g in ("known", "known_dev") for it in groups[g]]
    assert len(stale) == len(taught) == 12
    test = corpus_scenarios(taught, chunks, name="kb", types=("outdated",), outdated=older, conflict_seed=0)
    assert {s.fact_id.removeprefix("kb/"): s.context_answer for s in test} == {q: o.answer for q, o in stale.items()}
    assert {o.date for o in stale.values()} == {"2019", "2021"}
    assert all(o in older[q] for q, o in stale.items())


def test_the_kb_headline_says_when_the_update_cell_does_not_apply():
    from lorarag.study.headline import update_note

    assert "does not apply: the set supplies no older versions" in update_note(
        {"updates": {"taught_older": 0, "tested": 0, "older_versions": 0, "fraction": 0.0}}
    )
    assert "`data.update_fraction` is 0" in update_note(
        {"updates": {"taught_older": 0, "tested": 0, "older_versions": 12, "fraction": 0.0}}
    )
    assert "3 taught fact(s) learned in their older version" in update_note(
        {"updates": {"taught_older": 3, "tested": 2, "older_versions": 12, "fraction": 0.5}}
    )
    assert "does not apply" in update_note({})  # a run without the record (older summaries)
