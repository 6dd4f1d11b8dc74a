"""Attribution: one hand-built item per class, plus the precedence between overlapping rules."""

from __future__ import annotations

import json

import pytest

from lorarag.eval.attribution import (
    CLASSES,
    attribute,
    attribution_counts,
    attribution_lines,
    attribution_table,
    table_markdown,
)
from lorarag.eval.records import item_result
from lorarag.rag.records import Answer, Chunk, Retrieved, Trace
from lorarag.scenarios.records import PresentedChunk, Scenario
from tests.eval_fixtures import make_item

WRONG = "70 km/h"
CASES = {
    "correct": make_item(),
    # Relevant kb1 not among the top-N candidates at all.
    "retrieval_miss": make_item(retrieved_ids=("kb4", "kb5"), final_ids=("kb4",), answer=WRONG),
    # kb1 retrieved at rank 3, dropped by the reranker from the final top-2.
    "rerank_drop": make_item(retrieved_ids=("kb2", "kb3", "kb1"), final_ids=("kb2", "kb3"), answer=WRONG),
    # The right chunk was given and the model still answered wrong.
    "generation_failure": make_item(answer=WRONG),
    # A perturbed stand-in was given (it is the target) and answered from, not flagged.
    "conflict_missed": make_item(
        scenario="factual_error",
        context_answer=WRONG,
        target_ids=("kb1~fe",),
        retrieved_ids=("kb1~fe",),
        final_ids=("kb1~fe",),
        answer=WRONG,
        route="context",
        verdict="supported",
        flag_score=0.1,
    ),
    # A newer source (the update, 60 km/h) was given and the memory's superseded 50 km/h answered.
    "memory_overrode": make_item(
        scenario="update",
        gold_answers=("60 km/h",),
        context_answer="60 km/h",
        superseded=("50 km/h",),
        target_ids=("kb1~new2025",),
        retrieved_ids=("kb1~new2025",),
        final_ids=("kb1~new2025",),
        route="fallback",
        verdict="outdated",
        answer="50 km/h",
    ),
    # Fell back although the consistent context with the answer was given, and got it wrong.
    "wrong_route": make_item(route="fallback", verdict="conflicting", answer="60 km/h"),
    # Fell back on a factual error, memory wrong as well.
    "fallback_wrong": make_item(
        scenario="factual_error",
        context_answer=WRONG,
        target_ids=("kb1~fe",),
        retrieved_ids=("kb1~fe",),
        final_ids=("kb1~fe",),
        route="fallback",
        answer="60 km/h",
    ),
    "abstained_correctly": make_item(
        scenario="unanswerable",
        gold_answers=(),
        context_answer=None,
        target_ids=(),
        abstained=True,
        answer="I don't know",
        route="abstain",
    ),
    "abstained_wrongly": make_item(abstained=True, answer="", route="abstain"),
}


@pytest.mark.parametrize("label", CLASSES)
def test_one_item_per_class(label):
    assert attribute(CASES[label]) == label


def test_update_names_the_stale_value_without_a_route():
    # A system with no route (base RAG, closed book) that answers the superseded value is overridden
    # by memory too; naming both values is not an answer; the new value alone is correct.
    upd = dict(
        scenario="update",
        gold_answers=("60 km/h",),
        context_answer="60 km/h",
        superseded=("50 km/h",),
        target_ids=("kb1~new2025",),
        retrieved_ids=("kb1~new2025",),
        final_ids=("kb1~new2025",),
    )
    assert attribute(make_item(**upd, answer="50 km/h")) == "memory_overrode"
    assert attribute(make_item(**upd, answer="it was 50 km/h, now 60 km/h")) == "memory_overrode"
    assert attribute(make_item(**upd, answer="60 km/h")) == "correct"
    assert attribute(make_item(**upd, answer="70 km/h")) == "generation_failure"


def test_precedence_between_rules():
    # Correct beats everything, even a fallback on a good context.
    assert attribute(make_item(route="fallback")) == "correct"
    # A fallback on a consistent item whose gold chunk was NOT given is not a wrong route.
    assert (
        attribute(make_item(route="fallback", answer=WRONG, retrieved_ids=("kb7",), final_ids=("kb7",))) == "fallback_wrong"
    )
    # A factual error whose perturbed chunk never reached the model is a retrieval miss first.
    assert (
        attribute(
            make_item(
                scenario="factual_error",
                context_answer=WRONG,
                target_ids=("kb1~fe",),
                retrieved_ids=("kb8",),
                final_ids=("kb8",),
                answer=WRONG,
            )
        )
        == "retrieval_miss"
    )
    # An irrelevant context (relevant chunk removed: no target) answered from is a missed conflict.
    assert (
        attribute(make_item(scenario="irrelevant", target_ids=(), retrieved_ids=("kb8",), final_ids=("kb8",), answer=WRONG))
        == "conflict_missed"
    )
    # Unanswerable, answered without abstaining from a given context: missed; closed-book: generation.
    assert attribute(make_item(scenario="unanswerable", gold_answers=(), target_ids=(), answer="9")) == "conflict_missed"
    assert (
        attribute(
            make_item(scenario="unanswerable", gold_answers=(), target_ids=(), answer="9", retrieved_ids=(), final_ids=())
        )
        == "generation_failure"
    )


def test_targets_from_scenario_include_the_perturbed_standin():
    sc = Scenario(
        qid="q",
        fact_id="f",
        question="Limit?",
        gold_answers=("50 km/h",),
        relevant_ids=("kb1",),
        scenario="factual_error",
        context_answer=WRONG,
        presented=(PresentedChunk("kb1~fe", "The limit is 70 km/h.", replaces="kb1"),),
    )
    ch = Chunk("kb1~fe", "d", "d", "The limit is 70 km/h.", 0, 10)
    tr = Trace(
        "Limit?",
        retrieved=(Retrieved(ch, 1.0, 1),),
        route="context",
        verdict="supported",
        verdict_probs=(("supported", 0.8), ("conflicting", 0.2)),
    )
    r = item_result("s", sc, Answer("Limit?", "70 km/h", trace=tr), closed_book_answer="50 km/h")
    assert r.target_ids == ("kb1", "kb1~fe") and r.final_ids == ("kb1~fe",)
    assert r.flag_score == pytest.approx(0.2)
    assert attribute(r) == "conflict_missed"


def test_counts_and_lines():
    items = [CASES[c] for c in CLASSES]
    counts = attribution_counts(items)
    assert list(counts) == list(CLASSES) and set(counts.values()) == {1}
    rows = [json.loads(x) for x in attribution_lines(items)]
    assert [r["label"] for r in rows] == list(CLASSES)
    assert set(rows[0]) == {"system", "qid", "scenario", "knowledge", "label"}  # docs/outputs.md's columns
    table = table_markdown(attribution_table(items))
    assert "| all | all | 10 | 1 |" in table and "retrieval_miss" in table.splitlines()[0]
