"""SFT rows from a user's knowledge base: closed-book rows in every wording, conflict-aware rows in
the fallback's reply format, and the leak check on the rows actually written."""

from __future__ import annotations

from collections import Counter

import pytest

from lorarag.fallback.format import SYSTEM_CLOSED_BOOK, SYSTEM_RAG, UNKNOWN, parse_reply
from lorarag.rag.records import Chunk
from lorarag.scenarios.config import SplitConfig
from lorarag.scenarios.from_corpus import OlderValue, corpus_scenarios
from lorarag.scenarios.kb_records import Conflict, QAItem
from lorarag.scenarios.kb_splits import HELD_OUT, TAUGHT, split_by_fact
from lorarag.train.config import SFTConfig
from lorarag.train.sft import LeakError, build_rows, leak_check, read_sft, write_sft

TOWNS = ["Elmira", "Dunmore", "Kelso", "Arden", "Brill", "Corfe", "Dover", "Eske", "Flint", "Garth", "Holt", "Ivel"]
YEARS = [1901 + 7 * i for i in range(len(TOWNS))]


def _kb() -> tuple[list[Chunk], list[QAItem]]:
    chunks, items = [], []
    for i, (town, year) in enumerate(zip(TOWNS, YEARS)):
        chunks.append(Chunk(f"c{i}", f"d{i}", f"{town}.md", f"The {town} lighthouse was first lit in {year}.", 0, 40))
        chunks.append(Chunk(f"x{i}", f"d{i}", f"{town}.md", f"The {town} market opens on Mondays.", 0, 30))
        conflicts = (
            tuple(Conflict(f"The {town} lighthouse was first lit in {year + k}.", str(year + k)) for k in (3, 5))
            if i % 2
            else ()
        )
        items.append(
            QAItem(
                f"q{i}",
                f"When was the {town} lighthouse first lit?",
                (str(year),),
                (f"c{i}",),
                wordings=(f"In which year did the {town} light start?",),
                conflicts=conflicts,
            )
        )
    return chunks, items


def test_rows_teach_every_wording_and_the_conflict_aware_format():
    chunks, items = _kb()
    groups = split_by_fact(items, SplitConfig(seed=0, known_fraction=0.5, context_only_fraction=0.2))
    cfg = SFTConfig(seed=0, knowledge_repeats=2, distractors=1)
    rows, val, stats = build_rows(groups, chunks, cfg, conflict_seed=0)
    taught = [it for g in TAUGHT for it in groups[g]]
    cb = [r for r in rows if r.kind == "knowledge"]
    assert Counter(r.messages[1][1].removeprefix("Question: ") for r in cb) == Counter(
        {w: 2 for it in taught for w in it.all_wordings}
    )
    assert all(r.messages[0] == ("system", SYSTEM_CLOSED_BOOK) for r in cb)
    rag = [r for r in rows if r.kind == "rag"]
    assert all(r.messages[0] == ("system", SYSTEM_RAG) and parse_reply(r.messages[2][1]).valid for r in rag)
    known = {it.qid for it in taught}
    by_verdict = Counter(r.verdict for r in rag if r.fact_id.removeprefix("kb/") in known)
    assert by_verdict["supported"] == by_verdict["conflicting"] == by_verdict["irrelevant"] == len(taught)
    for r in rag:
        reply = parse_reply(r.messages[2][1])
        if r.fact_id.removeprefix("kb/") in known:
            assert reply.memory == reply.answer != UNKNOWN or r.verdict == "insufficient"
        else:  # context-only: no memory, the source is copied
            assert reply.memory == UNKNOWN and r.verdict in ("supported", "insufficient")
    assert stats["wordings"] == {2: len(taught)} and stats["no_factual_error"] == 0
    assert val and all(v in rows for v in val)
    assert rows == build_rows(groups, chunks, cfg, conflict_seed=0)[0]  # deterministic


def test_leak_check_passes_on_the_written_rows_and_catches_a_held_out_fact(tmp_path):
    chunks, items = _kb()
    groups = split_by_fact(items, SplitConfig(seed=1))
    held = [it for g in HELD_OUT for it in groups[g]]
    test = corpus_scenarios([it for g in ("known", "unseen") for it in groups[g]], chunks, name="kb", conflict_seed=7)
    passages = [p.text for s in test for p in s.presented if p.replaces]
    by_id = {c.chunk_id: c for c in chunks}
    leak_check(build_rows(groups, chunks, SFTConfig(), conflict_seed=7)[0], held, by_id, passages)
    # a test passage that a training context happens to equal (forced here: one the rows hold) is left out
    plain = build_rows(groups, chunks, SFTConfig(), conflict_seed=7)[0]
    kb_texts = {c.text for c in chunks}
    trained = [
        line.split("] ", 1)[1]
        for r in plain
        if r.verdict == "conflicting"
        for m in r.messages
        if m[0] == "user"
        for line in m[1].split("\n")[1:-1]
        if line.split("] ", 1)[1] not in kb_texts
    ][:3]
    assert len(trained) == 3
    with pytest.raises(LeakError, match="a test scenario's passage"):
        leak_check(plain, held, by_id, trained)
    rows, _, stats = build_rows(
        groups, chunks, SFTConfig(rag_phrasings="all"), conflict_seed=7, test_passages=passages + trained
    )
    assert stats["same_as_test"] > 0
    written = read_sft(write_sft(rows, tmp_path / "train.jsonl"))
    leak_check(written, held, by_id, passages)
    leaky = build_rows(
        {**groups, "known": groups["known"] + groups["unseen"][:1], "unseen": groups["unseen"][1:]},
        chunks,
        SFTConfig(),
        conflict_seed=7,
    )[0]
    with pytest.raises(LeakError, match="held-out"):
        leak_check(leaky, held, by_id)


def test_real_conflictnq_rows_in_both_wordings_without_leaks():
    from lorarag.rag.config import ChunkerConfig
    from lorarag.scenarios.config import CorpusSource, QuestionSource
    from lorarag.scenarios.kb_corpus import load_corpus
    from lorarag.scenarios.kb_labels import map_labels
    from lorarag.scenarios.kb_questions import load_questions
    from tests.conftest import shared_data

    path = str(shared_data("conflictnq") / "val.jsonl")
    corpus = load_corpus(CorpusSource(kind="conflictnq", path=path), ChunkerConfig(chunk_size=5000))
    items, _ = map_labels(load_questions(QuestionSource(kind="conflictnq", path=path)), corpus)
    groups = split_by_fact(items, SplitConfig())
    rows, _, stats = build_rows(groups, corpus.chunks, SFTConfig(knowledge_repeats=1, distractors=0), conflict_seed=0)
    assert stats["wordings"] == {2: stats["taught"]}
    test = corpus_scenarios(groups["known"] + groups["unseen"], corpus.chunks, name="kb", conflict_seed=0)
    leak_check(
        rows,
        [it for g in HELD_OUT for it in groups[g]],
        {c.chunk_id: c for c in corpus.chunks},
        [p.text for s in test for p in s.presented if p.replaces],
    )
    fakes = {c.text for it in items for c in it.conflicts}
    assert any(any(f in m[1] for f in fakes) for r in rows if r.verdict == "conflicting" for m in r.messages)


def _older(items: list[QAItem], versions: int) -> dict[str, tuple[OlderValue, ...]]:
    """Older versions of each lighthouse's year Y: Y-10 (dated by the guide of Y-9) and Y-4 (the guide of
    Y-3), in that order; `versions` 1 keeps Y-4 alone."""
    out = {
        it.qid: (
            OlderValue(it.qid, str(int(it.answers[0]) - 10), f"{int(it.answers[0]) - 9} guide"),
            OlderValue(it.qid, str(int(it.answers[0]) - 4), f"{int(it.answers[0]) - 3} guide"),
        )
        for it in items
    }
    return {q: v[2 - versions :] for q, v in out.items()}


def _outdated_rows(versions: int) -> tuple[dict, dict[str, list[str]], dict[str, str]]:
    """The split of seed 1 (known q0 q1 q10 q5 q8, known_dev q4, context-only q7, unseen q2 q3 q6 q9):
    (groups, fact id -> the older years its outdated training rows answer with, fact id -> the older
    year the test's outdated context of a known fact shows), the rows built avoiding the test's passages."""
    chunks, items = _kb()
    groups = split_by_fact(items, SplitConfig(seed=1))
    assert [it.qid for it in groups["known"]] == ["q0", "q1", "q10", "q5", "q8"]
    assert [it.qid for it in groups["known_dev"]] == ["q4"]
    older = _older(items, versions)
    test = corpus_scenarios(groups["known"], chunks, name="kb", knowledge="known", conflict_seed=7, outdated=older)
    test += corpus_scenarios(groups["unseen"], chunks, name="kb", conflict_seed=7, outdated=older)
    passages = [p.text for s in test for p in s.presented if p.replaces]
    rows, _, _ = build_rows(groups, chunks, SFTConfig(), conflict_seed=7, outdated=older, test_passages=passages)
    trained: dict[str, list[str]] = {}
    for r in rows:
        if r.verdict == "outdated":
            assert not [p for p in r.scenario.presented if p.replaces and p.text in passages]
            trained.setdefault(r.fact_id, []).append(parse_reply(r.messages[2][1]).source)
    tested = {s.fact_id: s.context_answer for s in test if s.scenario == "outdated" and s.knowledge == "known"}
    return groups, trained, tested


def test_a_fact_with_two_older_versions_trains_on_the_one_the_test_does_not_show():
    """Each lighthouse year Y has two older versions, Y-10 and Y-4: the test's outdated context of a
    known fact shows one (seeded), its one outdated training row the other; the known-dev fact (not
    tested) trains one too. So all six taught facts keep an outdated row."""
    groups, trained, tested = _outdated_rows(2)
    year = {f"kb/{it.qid}": int(it.answers[0]) for g in TAUGHT for it in groups[g]}
    assert set(trained) == set(year) and all(len(v) == 1 for v in trained.values())
    assert set(tested) == {f"kb/{q}" for q in ("q0", "q1", "q10", "q5", "q8")}
    for fid, (source,) in trained.items():
        assert source in {str(year[fid] - 10), str(year[fid] - 4)}
        assert fid not in tested or {source, tested[fid]} == {str(year[fid] - 10), str(year[fid] - 4)}


def test_a_fact_with_one_older_version_trains_the_outdated_verdict_only_if_the_test_never_shows_it():
    """One older version (Y-4): the test shows it for each known fact, so their outdated training rows
    would show the test's passage and are left out; the known-dev fact q4 (1901 + 28 = 1929) trains it."""
    _, trained, tested = _outdated_rows(1)
    assert trained == {"kb/q4": ["1925"]}
    assert set(tested.values()) == {str(1901 + 7 * i - 4) for i in (0, 1, 10, 5, 8)}


def test_a_fabricated_value_the_test_asserts_is_never_a_training_row_of_its_fact():
    """ConflictNQ's five fabricated passages of a question assert one fake answer: training on another of
    them would teach the test's wrong value with its label. The row builder leaves such rows out, and only
    for the facts whose test asks that value; another fact keeps its factual-error row."""
    from dataclasses import replace

    from lorarag.train.sft import tested_claims

    chunks, items = _kb()
    # every conflicted lighthouse: two fabricated passages, one fake year (as ConflictNQ writes them)
    items = [
        replace(
            it,
            conflicts=tuple(
                Conflict(f"Records say the {t} light was first lit in {y + 3}. Plain.", str(y + 3)) for _ in (0,)
            )
            + (Conflict(f"Built in {y + 3}, the {t} light.", str(y + 3)),),
        )
        if it.conflicts
        else it
        for it, t, y in zip(items, TOWNS, YEARS)
    ]
    groups = split_by_fact(items, SplitConfig(seed=0, known_fraction=0.5, context_only_fraction=0.2))
    known = [it for it in groups["known"] if it.conflicts]
    assert len(known) >= 2
    test = corpus_scenarios(known[:1], chunks, name="kb", knowledge="known", conflict_seed=0)
    claims = tested_claims(test)
    fake = str(int(known[0].answers[0]) + 3)
    assert claims == {f"kb/{known[0].qid}": {fake}}
    cfg = SFTConfig(seed=0, knowledge_repeats=1, distractors=1)
    plain, _, plain_stats = build_rows(groups, chunks, cfg, conflict_seed=0)
    rows, _, stats = build_rows(groups, chunks, cfg, conflict_seed=0, test_claims=claims)

    def conflicting(rs, qid):
        return [parse_reply(r.messages[2][1]).source for r in rs if r.verdict == "conflicting" and r.fact_id == f"kb/{qid}"]

    assert conflicting(plain, known[0].qid) == [fake]  # the other passage, the test's value: a leak
    assert conflicting(rows, known[0].qid) == []
    assert conflicting(rows, known[1].qid) == conflicting(plain, known[1].qid) != []
    assert stats["same_claim_as_test"] == 1 and plain_stats["same_claim_as_test"] == 0
    assert len(plain) - len(rows) == 1


def test_a_claim_is_the_value_up_to_case_spacing_and_edge_punctuation():
    from lorarag.train.sft import claim_key

    assert claim_key(" 1998. ") == claim_key("1998") == "1998"
    assert claim_key("Heather  Ball") == claim_key('"heather ball"') == "heather ball"
    assert claim_key("1998") != claim_key("1989") and claim_key(None) == ""
