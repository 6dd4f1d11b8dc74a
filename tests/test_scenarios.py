"""Scenario generation: identical-form perturbations, outdated without dates, hard distractors,
determinism, and validation of bad records and unknown chunk ids."""

from __future__ import annotations

import json
import random
import re

import pytest

from lorarag.core.errors import RecordError
from lorarag.rag.records import Chunk
from lorarag.scenarios.config import WorldConfig
from lorarag.scenarios.from_corpus import corpus_scenarios
from lorarag.scenarios.from_world import (
    PerturbationError,
    answer_type,
    index_world,
    replace_span,
    substitute_value,
    world_scenarios,
)
from lorarag.scenarios.kb_records import QAItem
from lorarag.scenarios.records import (
    Scenario,
    load_scenarios,
    save_scenarios,
    validate_against_kb,
)
from lorarag.scenarios.world import build_world


@pytest.fixture(scope="module")
def built():
    world = build_world(WorldConfig(seed=1, n_orgs=16))
    wi = index_world(world)
    return world, wi, world_scenarios(world, wi, ("known", "unknown"), "test", seed=5)


def test_every_fact_gets_each_type(built):
    world, _, sc = built
    facts = world.by_group("known", "unknown")
    kinds = {(s.fact_id, s.scenario) for s in sc}
    for f in facts:
        for t in ("consistent", "factual_error", "irrelevant"):
            assert (f.fact_id, t) in kinds
        assert ((f.fact_id, "outdated") in kinds) == bool(f.history)
    assert all(s.phrasing == 3 for s in sc)


def test_factual_error_is_the_gold_chunk_with_only_the_value_swapped(built):
    world, wi, sc = built
    facts = {f.fact_id: f for f in world.facts}
    for s in (x for x in sc if x.scenario == "factual_error"):
        f = facts[s.fact_id]
        pc = next(p for p in s.presented if p.replaces)
        gold = next(c for c in wi.chunks if c.chunk_id == pc.replaces)
        assert s.context_answer != f.value and s.context_answer not in {v for v, _ in f.history}
        assert pc.text == gold.text.replace(f.value, s.context_answer)
        assert answer_type(s.context_answer) == answer_type(f.value)


def test_outdated_dated_or_not(built):
    """Dev (as training): the KB's own older versions, dated archive chunks or the profile with an
    older value. Test: an older version that exists only in the test, dated before every version
    the KB keeps or undated, in the gold chunk's place."""
    world, wi, test = built
    facts = {f.fact_id: f for f in world.facts}
    dev = world_scenarios(world, wi, ("known", "unknown"), "dev", seed=5)
    out = [s for s in dev if s.scenario == "outdated"]
    undated = [s for s in out if not s.removes]
    dated = [s for s in out if s.removes]
    assert undated and dated  # about half each (undated_fraction 0.5)
    for s in undated:  # the profile paragraph with an older value: no year anywhere
        pc = next(p for p in s.presented if p.replaces)
        assert pc.date is None and not re.search(r"(19|20)\d\d", pc.text) or facts[s.fact_id].attribute == "founded"
        assert s.context_answer in {v for v, _ in facts[s.fact_id].history}
    for s in dated:
        years = {y for v, y in facts[s.fact_id].history if v == s.context_answer}
        assert any(p.date in years for p in s.presented)
        assert s.removes == s.relevant_ids
    held = [s for s in test if s.scenario == "outdated"]
    assert any(p.date for s in held for p in s.presented if p.replaces)
    assert any(not p.date for s in held for p in s.presented if p.replaces)
    kb_texts = {c.text for c in wi.chunks}
    for s in held:
        f = facts[s.fact_id]
        (pc,) = [p for p in s.presented if p.replaces]
        assert pc.replaces == s.relevant_ids[0] and not s.removes and pc.text not in kb_texts
        assert s.context_answer != f.value and s.context_answer not in {v for v, _ in f.history}
        if pc.date:
            assert int(pc.date) < min(int(y) for _, y in f.history) and pc.date in pc.text


def test_no_flawed_test_context_is_one_the_sft_rows_show(tmp_path):
    """The demo world's test split against its SFT rows as written to disk (train and val):
    no factual-error, outdated or irrelevant context verbatim or as a near copy; the consistent
    ones are the KB's own chunks, which training shows."""
    from lorarag.fallback.format import inert_question
    from lorarag.train.config import SFTConfig
    from lorarag.train.overlap import TrainingSources, leaking, overlap_table
    from lorarag.train.sft import build_rows, read_sft, trained_contexts, write_sft

    world = build_world(WorldConfig(seed=0, n_orgs=30))
    wi = index_world(world)
    sft = SFTConfig()
    rows, val = build_rows(world, sft)
    disk = read_sft(write_sft(rows, tmp_path / "t.jsonl")) + read_sft(write_sft(val, tmp_path / "v.jsonl"))
    owners = {" ".join(inert_question(q).split()): (f.fact_id, f.org_id) for f in world.facts for q in f.questions}
    src = TrainingSources(disk, lambda q: owners.get(" ".join(q.split()), (None, None)))
    kb = {c.chunk_id: c.text for c in wi.chunks}
    held = world_scenarios(world, wi, ("known", "unknown"), "test", seed=0, trained=trained_contexts(world, sft))
    table = overlap_table(held, src, kb)
    assert not leaking(table), [c for c in table if c.near]
    cons = next(c for c in table if (c.scenario, c.knowledge) == ("consistent", "known"))
    assert cons.verbatim == cons.n  # the gold chunks are the KB training shows
    # without `trained` the same split shows what training saw: the check is not vacuous
    assert leaking(overlap_table(world_scenarios(world, wi, ("known", "unknown"), "test", seed=0), src, kb))


def test_irrelevant_contexts_never_contain_the_answer(built):
    _, _, sc = built
    for s in (x for x in sc if x.scenario in ("irrelevant", "unanswerable")):
        assert s.presented
        for p in s.presented:
            assert all(a.lower() not in p.text.lower() for a in s.gold_answers)
            assert p.chunk_id not in s.relevant_ids


def test_irrelevant_distractors_are_hard(built):
    """Distractors share the organisation (English) or a 4-character phrase (Chinese) with the question."""
    world, _, sc = built
    facts = {f.fact_id: f for f in world.facts}
    for s in (x for x in sc if x.scenario == "irrelevant"):
        if s.language == "en":
            assert any(facts[s.fact_id].org in p.text for p in s.presented)
        else:
            grams = {s.question[i:i + 4] for i in range(len(s.question) - 3)}
            assert any(g in p.text for p in s.presented for g in grams)


def test_deterministic_by_seed(built):
    world, wi, sc = built
    assert world_scenarios(world, wi, ("known", "unknown"), "test", seed=5) == sc
    other = world_scenarios(world, wi, ("known", "unknown"), "test", seed=6)
    assert [s.context_answer for s in other] != [s.context_answer for s in sc]


def test_validation_lists_unknown_chunk_ids(built):
    _, wi, sc = built
    kb = {c.chunk_id for c in wi.chunks}
    validate_against_kb(sc, kb)
    bad = sc[0].__class__(**{**sc[0].__dict__, "relevant_ids": ("nope#1", "nope#2")})
    with pytest.raises(RecordError, match="nope#1, nope#2"):
        validate_against_kb(sc[:3] + [bad], kb)


def test_bad_records_are_rejected(tmp_path, built):
    _, _, sc = built
    path = tmp_path / "s.jsonl"
    save_scenarios(path, sc[:2])
    assert load_scenarios(path) == sc[:2]
    row = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
    row["scenario"] = "contradiction"
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    with pytest.raises(RecordError, match="contradiction"):
        load_scenarios(path)
    with pytest.raises(RecordError, match="no gold answer"):
        Scenario("q", "f", "?", (), (), "consistent", (), None)


def test_substitution_keeps_the_type_and_format():
    rng = random.Random(0)
    for _ in range(20):
        y = substitute_value("1987", rng)
        assert re.fullmatch(r"(19|20)\d\d", y) and y != "1987" and 1957 <= int(y) <= 2017
        m = substitute_value("$12.4 million", rng)
        assert re.fullmatch(r"\$[1-9]\d\.\d million", m) and m != "$12.4 million"
        z = substitute_value("58.9亿元", rng)
        assert re.fullmatch(r"[1-9]\d\.\d亿元", z) and z != "58.9亿元"
    pool = ["Marie Curie", "Lyon", "42", "Alan Turing"]
    assert substitute_value("Ada Lovelace", rng, pool) in {"Marie Curie", "Lyon", "Alan Turing"}
    assert substitute_value("周磊", rng, ["王芳", "Lyon"]) == "王芳"
    with pytest.raises(PerturbationError):
        substitute_value("周磊", rng, ["Lyon"])
    with pytest.raises(PerturbationError, match="not found"):
        replace_span("The CEO is Ada.", "Bob", "Carl")


def test_any_corpus_and_qa_set():
    chunks = [Chunk("c1", "d", "d", "The Eiffel Tower was completed in 1889 in Paris.", 0, 48),
              Chunk("c2", "d", "d", "The Colosseum stands in Rome and opened in 80 AD.", 0, 50),
              Chunk("c3", "d", "d", "The Eiffel Tower is made of wrought iron.", 0, 41)]
    items = [QAItem("q1", "When was the Eiffel Tower completed?", ("1889",), ("c1",)),
             QAItem("q2", "How tall is the Eiffel Tower's flagpole?", (), (), unanswerable=True)]
    sc = corpus_scenarios(items, chunks, name="toy", seed=0, distractors=0)
    kinds = [s.scenario for s in sc]
    assert kinds == ["consistent", "factual_error", "irrelevant", "unanswerable"]
    fe = sc[1].presented[0]
    assert fe.replaces == "c1" and fe.text == chunks[0].text.replace("1889", sc[1].context_answer)
    assert sc[2].presented[0].chunk_id == "c3"  # the best-scoring chunk without the answer
    validate_against_kb(sc, {"c1", "c2", "c3"})
    with pytest.raises(RecordError, match="c9"):
        corpus_scenarios([QAItem("q3", "?", ("x",), ("c9",))], chunks, name="toy")


def test_trained_and_untrained_phrasings_by_hand():
    """Closed-book rows: 0, 1 (+ 4, 5 at 4 wordings, + 6-9 at 8); the gate's dev questions get the
    dev phrasing 2 and what training leaves out; the test phrasing 3 is in neither."""
    from lorarag.scenarios.world import closed_book_phrasings, untrained_phrasings

    assert [closed_book_phrasings(k) for k in (2, 4, 8)] == [(0, 1), (0, 1, 4, 5), (0, 1, 4, 5, 6, 7, 8, 9)]
    assert [untrained_phrasings(k) for k in (2, 4, 8, None)] == [
        (2, 4, 5, 6, 7, 8, 9), (2, 6, 7, 8, 9), (2,), (2,)]


def test_ask_in_phrasings_reads_each_fact_once_per_wording(built):
    from lorarag.scenarios.from_world import ask_in_phrasings

    world, wi, _ = built
    dev = world_scenarios(world, wi, ("known",), "dev", seed=3)  # several types per fact, phrasing 2
    sample = dev[:7]
    facts = list(dict.fromkeys(s.fact_id for s in sample))
    assert len(facts) < len(sample)  # the sample repeats facts: they must not count twice
    out = ask_in_phrasings(sample, world, (2, 6, 7))
    by_id = {f.fact_id: f for f in world.facts}
    assert [(s.fact_id, s.phrasing) for s in out] == [(f, ph) for f in facts for ph in (2, 6, 7)]
    assert all(s.question == by_id[s.fact_id].questions[s.phrasing] for s in out)
    assert len({s.qid for s in out}) == len(out) and all(f"/p{s.phrasing}/" in s.qid for s in out)
    first = {f: next(s for s in sample if s.fact_id == f) for f in facts}
    assert all(s.scenario == first[s.fact_id].scenario and s.presented == first[s.fact_id].presented for s in out)
    assert len({s.question for s in out}) == len(out)  # the wordings differ


def _row(qid: str, **kw) -> dict:
    row = {"qid": qid, "fact_id": "f", "question": "Capital of France?", "gold_answers": ["Paris"],
           "relevant_ids": ["kb1"], "scenario": "consistent",
           "presented": [{"chunk_id": "kb1", "text": "Paris is the capital."}], "context_answer": "Paris"}
    return {**row, **kw}


def test_a_string_gold_answer_is_an_error_not_five_letters(tmp_path):
    """`gold_answers: "Paris"` would be split into characters: any answer with an "a" would score."""
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps(_row("q1")) + "\n" + json.dumps(_row("q2", gold_answers="Paris")) + "\n")
    with pytest.raises(RecordError, match=r"s.jsonl:2: gold_answers: expected a list of strings, got a string"):
        load_scenarios(path)
    path.write_text(json.dumps(_row("q1", presented=[{"chunk_id": "kb1", "text": ["Paris"]}])) + "\n")
    with pytest.raises(RecordError, match=r"s.jsonl:1: presented\[0\]\.text: expected a string, got a list"):
        load_scenarios(path)
    path.write_text(json.dumps(_row("q1", relevant_ids="kb1")) + "\n")
    with pytest.raises(RecordError, match=r"relevant_ids: expected a list of strings, got a string"):
        load_scenarios(path)


def test_duplicate_qids_are_refused_on_read_and_write(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(_row(q)) + "\n" for q in ("q1", "q2", "q1")))
    with pytest.raises(RecordError, match=r"s.jsonl:3: duplicate qid 'q1' \(first at line 1\)"):
        load_scenarios(path)
    item = Scenario("q1", "f", "?", ("a",), ("kb1",), "consistent", (), "a")
    with pytest.raises(RecordError, match="duplicate qid 'q1'; nothing written"):
        save_scenarios(tmp_path / "out.jsonl", [item, item])
    assert not (tmp_path / "out.jsonl").exists()
