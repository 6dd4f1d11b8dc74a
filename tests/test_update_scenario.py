"""The `update` scenario on the demo world written as a knowledge base: a seeded share of the taught
facts (`data.update_fraction`) is taught its older version (older.jsonl), so the KB's current
chunk is right and the memory stale. The test items, the SFT rows that teach it, the test contexts
kept apart from training, and the metrics that score it (hand-computed)."""

from __future__ import annotations

import math

import pytest

from lorarag.core.errors import RecordError
from lorarag.eval import conflict_metrics as cm
from lorarag.eval.answer_metrics import is_correct
from lorarag.fallback.format import UNKNOWN, parse_reply
from lorarag.scenarios import from_corpus
from lorarag.scenarios.config import SplitConfig
from lorarag.scenarios.from_corpus import corpus_scenarios
from lorarag.scenarios.kb_splits import split_by_fact
from lorarag.scenarios.kb_updates import asked_updates, stale_taught
from lorarag.scenarios.records import PresentedChunk, Scenario
from lorarag.train.config import SFTConfig
from lorarag.train.sft import build_rows, shown
from tests.eval_fixtures import make_item
from tests.test_world import load_world_kb

TYPES = ("consistent", "factual_error", "outdated", "irrelevant", "update")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    kb = load_world_kb(tmp_path_factory.mktemp("world"), seed=0, n_orgs=30)
    groups = split_by_fact(kb.items, SplitConfig(seed=0))
    return kb, groups, stale_taught(groups, kb.older, 0.5, 0)


def test_update_items_present_the_current_chunk_as_it_is_to_a_stale_memory(world):
    kb, groups, stale = world
    tested = asked_updates(groups, stale)
    known = {it.qid for it in groups["known"]}
    assert tested and tested == set(stale) & known and set(stale) - tested  # known_dev's stale facts train it
    assert all(kb.fact(q).history for q in stale)  # only a fact with an older version can be taught it
    test = corpus_scenarios(
        groups["known"], kb.chunks, name="kb", knowledge="known", types=TYPES, outdated=kb.older, stale=stale
    )
    upd = [s for s in test if s.scenario == "update"]
    assert {s.fact_id.removeprefix("kb/") for s in upd} == tested
    assert not [s for s in test if s.scenario != "update" and s.fact_id.removeprefix("kb/") in tested]
    by_id = {c.chunk_id: c for c in kb.chunks}
    for s in upd:
        f = kb.fact(s.fact_id)
        assert not any(p.replaces or p.date for p in s.presented) and not s.removes
        assert by_id[s.relevant_ids[0]].text == f.statement() in [p.text for p in s.presented]
        assert s.gold_answers == f.gold_answers and s.context_answer == f.value
        # what the LoRA learned: the older version an outdated test of the fact would show (seed 0)
        shown = from_corpus.held_out_older(kb.older[f.fact_id], f.fact_id, 0)
        assert s.superseded == (stale[f.fact_id].answer,) == (shown.answer,)
        assert s.superseded[0] in {value for value, _ in f.history}
    # of a fact's two archive years, either may be the one taught
    assert {next(y for v, y in kb.fact(q).history if v == old.answer) for q, old in stale.items()} == {"2021", "2023"}


def test_sft_rows_teach_the_older_answer_and_the_update_on_dev_facts(world):
    kb, groups, stale = world
    tested = asked_updates(groups, stale)
    sft = SFTConfig(seed=0, knowledge_repeats=1)
    plain, _, _ = build_rows(groups, kb.chunks, sft, conflict_seed=0, outdated=kb.older)
    rows, _, stats = build_rows(groups, kb.chunks, sft, conflict_seed=0, outdated=kb.older, stale=stale)
    assert (stats["taught_older"], stats["tested_updates"]) == (len(stale), len(tested))
    for r in rows:
        q = r.fact_id.removeprefix("kb/")
        if r.kind == "knowledge":  # closed book: the older answer for a stale fact, else the truth
            assert dict(r.messages)["assistant"] == (stale[q].answer if q in stale else kb.fact(q).value)
    upd = [r for r in rows if r.kind == "rag" and r.fact_id.removeprefix("kb/") in stale]
    assert {r.fact_id.removeprefix("kb/") for r in upd} == set(stale) - tested
    assert upd == [r for r in rows if _overrides_memory(r)]
    for r in upd:
        reply = parse_reply(dict(r.messages)["assistant"])
        f = kb.fact(r.fact_id)
        assert r.verdict == "supported" and reply.memory == stale[f.fact_id].answer != f.value
        assert reply.source == reply.answer == f.value
    assert not [r for r in plain if _overrides_memory(r)]  # without stale facts no row teaches an update


def _overrides_memory(row) -> bool:
    """A supported row whose memory is neither unknown nor its answer: the source supersedes what was taught."""
    reply = parse_reply(dict(row.messages)["assistant"])
    return row.kind == "rag" and row.verdict == "supported" and reply.memory not in (reply.answer, UNKNOWN)


def test_no_row_shows_the_chunk_of_a_fact_the_update_cell_asks(world):
    """A tested update presents the KB's own chunk: a row showing it (consistent, or as another fact's
    distractor) would let the LoRA remember it as supported. Without stale facts the rows do show them."""
    kb, groups, stale = world
    tested = asked_updates(groups, stale)
    chunks = {shown(c.text) for it in kb.items if it.qid in tested for c in kb.chunks if c.chunk_id in it.relevant_ids}
    assert len(chunks) == len(tested)

    def users(rows):
        return [dict(r.messages)["user"] for r in rows if r.kind == "rag"]

    rows, val, _ = build_rows(groups, kb.chunks, SFTConfig(seed=0), conflict_seed=0, outdated=kb.older, stale=stale)
    assert not [u for u in users(rows + val) if any(c in u for c in chunks)]
    plain, _, _ = build_rows(groups, kb.chunks, SFTConfig(seed=0), conflict_seed=0, outdated=kb.older)
    assert [u for u in users(plain) if any(c in u for c in chunks)]


def test_an_update_record_needs_the_superseded_value_and_only_an_update_has_one():
    pc = PresentedChunk("kb1~new2025", "As of 2025, the CEO of Vel was Ada.", "", "2025", replaces="kb1")
    base = dict(
        qid="q",
        fact_id="f",
        question="Who?",
        gold_answers=("Ada",),
        relevant_ids=("kb1",),
        presented=(pc,),
        context_answer="Ada",
    )
    Scenario(scenario="update", superseded=("Bo",), **base)
    with pytest.raises(RecordError, match="superseded"):
        Scenario(scenario="update", **base)
    with pytest.raises(RecordError, match="superseded"):
        Scenario(scenario="consistent", superseded=("Bo",), **base)


def _upd(**over):
    return make_item(
        **{**dict(scenario="update", gold_answers=("60 km/h",), context_answer="60 km/h", superseded=("50 km/h",)), **over}
    )


def test_accuracy_on_an_update_refuses_the_stale_value_and_both_values():
    assert is_correct(_upd(answer="60 km/h"))
    assert not is_correct(_upd(answer="50 km/h"))
    assert not is_correct(_upd(answer="50 km/h before, 60 km/h now"))


def test_update_contexts_are_negatives_of_the_detector():
    # 2 outdated (flag 0.9, 0.4) vs 2 updates (flag 0.2, 0.6) and 1 consistent (flag 0.1)
    out = [
        make_item(
            qid=f"o{i}",
            scenario="outdated",
            context_answer="70 km/h",
            flag_score=f,
            verdict="outdated" if f > 0.5 else "supported",
        )
        for i, f in enumerate((0.9, 0.4))
    ]
    upd = [_upd(qid=f"u{i}", flag_score=f, verdict="outdated" if f > 0.5 else "supported") for i, f in enumerate((0.2, 0.6))]
    cons = [make_item(qid="c", flag_score=0.1, verdict="supported")]
    items = out + upd + cons
    # outdated vs update: pairs (0.9>0.2, 0.9>0.6, 0.4>0.2, 0.4<0.6) -> 3 of 4
    assert cm.detector(items, ["outdated"], ["update"]).auroc == pytest.approx(3 / 4)
    # all flawed vs all sound (update + consistent): 0.9 beats 3; 0.4 beats 0.2 and 0.1 -> 5 of 6
    d = cm.detector(items)
    assert (d.n_pos, d.auroc) == (2, pytest.approx(5 / 6))
    # precision: flagged = o0, u1 -> 1 of 2; recall 1 of 2
    assert (d.precision, d.recall) == (pytest.approx(0.5), pytest.approx(0.5))
    assert math.isnan(cm.detector(upd + cons).auroc)  # no flawed context: undefined


def test_the_targets_ask_the_detector_to_tell_an_update_from_a_factual_error():
    from lorarag.study.targets import targets

    # factual errors flagged 0.7 and 0.3 against updates 0.2 and 0.6: 0.7 beats both, 0.3 beats 0.2 -> 3 of 4
    fe = [
        make_item(
            qid=f"f{i}",
            scenario="factual_error",
            context_answer="90 km/h",
            flag_score=f,
            verdict="conflicting" if f > 0.5 else "supported",
        )
        for i, f in enumerate((0.7, 0.3))
    ]
    upd = [_upd(qid=f"u{i}", flag_score=f, verdict="supported") for i, f in enumerate((0.2, 0.6))]
    rows = {name: (value, met) for name, value, met in targets([], fe + upd, updates=True)}
    value, met = rows["detector AUROC, known, factual error vs update >= 0.9"]
    assert value == pytest.approx(3 / 4) and not met
    assert "detector AUROC, known, factual error vs update >= 0.9" not in {
        n for n, _, _ in targets([], fe + upd, updates=False)
    }
