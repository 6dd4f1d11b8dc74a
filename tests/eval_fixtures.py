"""Hand-built ItemResult records for the eval tests (defaults: a correct consistent item)."""

from __future__ import annotations

from typing import Any

from lorarag.eval.records import ItemResult

_DEFAULTS: dict[str, Any] = dict(
    system="sys", qid="q1", fact_id="f1", scenario="consistent", knowledge="known", language="en",
    question="What is the speed limit?", gold_answers=("50 km/h",), context_answer="50 km/h",
    relevant_ids=("kb1",), target_ids=("kb1",), retrieved_ids=("kb1", "kb2", "kb3"),
    final_ids=("kb1", "kb2"), final_texts=("The limit is 50 km/h.", "Other text."),
    answer="50 km/h", abstained=False, cited=("S1",), bad_citations=(), verdict=None,
    verdict_score=None, flag_score=None, route=None, context_answer_model=None, memory_answer=None,
    closed_book_answer=None, latency_s=0.1,
)


def make_item(**over: Any) -> ItemResult:
    """An ItemResult with test defaults overridden by keyword."""
    data = dict(_DEFAULTS)
    data.update(over)
    return ItemResult(**data)
