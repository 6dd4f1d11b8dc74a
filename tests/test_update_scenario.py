"""The `update` scenario: the context carries a version dated after what the LoRA learned, so the
context is right and the memory stale. World items, the SFT rows that teach it, the test contexts
kept apart from training, and the metrics that score it (hand-computed)."""

from __future__ import annotations

import math

import pytest

from lorarag.core.errors import RecordError
from lorarag.eval import conflict_metrics as cm
from lorarag.eval.answer_metrics import is_correct
from lorarag.fallback.format import inert_question, parse_reply
from lorarag.scenarios.config import WorldConfig
from lorarag.scenarios.from_world import index_world, world_scenarios
from lorarag.scenarios.records import PresentedChunk, Scenario
from lorarag.scenarios.world import CURRENT_YEAR, build_world
from lorarag.scenarios.world_text import ARCHIVE
from lorarag.train.config import SFTConfig
from lorarag.train.overlap import TrainingSources, leaking, overlap_table
from lorarag.train.sft import build_rows, read_sft, trained_contexts, write_sft
from tests.eval_fixtures import make_item

TYPES = ("consistent", "factual_error", "outdated", "irrelevant", "update")


@pytest.fixture(scope="module")
def world():
    return build_world(WorldConfig(seed=0, n_orgs=30))


def test_update_items_carry_a_newer_dated_value_in_the_gold_chunks_place(world):
    wi = index_world(world)
    sft = SFTConfig(updates=True)
    trained = trained_contexts(world, sft)
    test = world_scenarios(world, wi, ("known", "unknown"), "test", seed=0, types=TYPES, trained=trained)
    facts = {f.fact_id: f for f in world.facts}
    upd = [s for s in test if s.scenario == "update"]
    # every fact whose attribute has a dated wording (all but the founding year) gets one
    assert {s.fact_id for s in upd} == {f.fact_id for f in world.by_group("known", "unknown")
                                        if f.attribute in ARCHIVE[f.language]}
    for s in upd:
        f = facts[s.fact_id]
        (pc,) = [p for p in s.presented if p.replaces]
        assert pc.replaces == s.relevant_ids[0] and not s.removes
        assert int(pc.date) > CURRENT_YEAR and pc.date in pc.text
        assert s.gold_answers == (s.context_answer,) and s.context_answer in pc.text
        assert s.superseded == f.gold_answers  # what the LoRA learned
        assert s.context_answer != f.value and s.context_answer not in {v for v, _ in f.history}
        assert s.context_answer not in trained.values.get(s.fact_id, ())  # a value no training row asserts


def test_sft_rows_teach_the_update_beside_the_outdated_context(world):
    plain, _ = build_rows(world, SFTConfig())
    rows, val = build_rows(world, SFTConfig(updates=True))
    facts = {f.fact_id: f for f in world.facts}
    upd = [r for r in rows if r.kind == "rag" and "update" in _source_years(r)]
    assert upd and not [r for r in plain if "update" in _source_years(r)]
    for r in upd:
        reply = parse_reply(dict(r.messages)["assistant"])
        f = facts[r.fact_id]
        assert f.group == "known" and r.verdict == "supported"
        assert reply.memory == f.value and reply.source == reply.answer != f.value
    # the rows without updates are the rows of before, plus the update rows
    assert len(rows) == len(plain) + len(upd)


def _source_years(row) -> str:
    user = dict(row.messages)["user"]
    return "update" if any(str(y) in user for y in (CURRENT_YEAR + 1, CURRENT_YEAR + 2)) else ""


def test_no_update_test_context_is_one_the_sft_rows_show(world, tmp_path):
    wi = index_world(world)
    sft = SFTConfig(updates=True)
    rows, val = build_rows(world, sft)
    disk = read_sft(write_sft(rows, tmp_path / "t.jsonl")) + read_sft(write_sft(val, tmp_path / "v.jsonl"))
    owners = {" ".join(inert_question(q).split()): (f.fact_id, f.org_id) for f in world.facts for q in f.questions}
    src = TrainingSources(disk, lambda q: owners.get(" ".join(q.split()), (None, None)))
    kb = {c.chunk_id: c.text for c in wi.chunks}
    test = world_scenarios(world, wi, ("known", "unknown"), "test", seed=0, types=TYPES,
                           trained=trained_contexts(world, sft))
    table = overlap_table(test, src, kb)
    assert not leaking(table), [c for c in table if c.near]
    assert any(c.scenario == "update" for c in table)
    # drawn like training's (the same seed stream, no `trained`), the update contexts would repeat rows
    train_like = world_scenarios(world, index_world(world, groups=("known", "context_only")), ("known",), "train",
                                 seed=sft.seed, types=("update",))
    assert [c for c in leaking(overlap_table(train_like, src, kb)) if c.scenario == "update"]


def test_an_update_record_needs_the_superseded_value_and_only_an_update_has_one():
    pc = PresentedChunk("kb1~new2025", "As of 2025, the CEO of Vel was Ada.", "", "2025", replaces="kb1")
    base = dict(qid="q", fact_id="f", question="Who?", gold_answers=("Ada",), relevant_ids=("kb1",),
                presented=(pc,), context_answer="Ada")
    Scenario(scenario="update", superseded=("Bo",), **base)
    with pytest.raises(RecordError, match="superseded"):
        Scenario(scenario="update", **base)
    with pytest.raises(RecordError, match="superseded"):
        Scenario(scenario="consistent", superseded=("Bo",), **base)


def _upd(**over):
    return make_item(**{**dict(scenario="update", gold_answers=("60 km/h",), context_answer="60 km/h",
                               superseded=("50 km/h",)), **over})


def test_accuracy_on_an_update_refuses_the_stale_value_and_both_values():
    assert is_correct(_upd(answer="60 km/h"))
    assert not is_correct(_upd(answer="50 km/h"))
    assert not is_correct(_upd(answer="50 km/h before, 60 km/h now"))


def test_update_contexts_are_negatives_of_the_detector():
    # 2 outdated (flag 0.9, 0.4) vs 2 updates (flag 0.2, 0.6) and 1 consistent (flag 0.1)
    out = [make_item(qid=f"o{i}", scenario="outdated", context_answer="70 km/h", flag_score=f,
                     verdict="outdated" if f > 0.5 else "supported") for i, f in enumerate((0.9, 0.4))]
    upd = [_upd(qid=f"u{i}", flag_score=f, verdict="outdated" if f > 0.5 else "supported")
           for i, f in enumerate((0.2, 0.6))]
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
