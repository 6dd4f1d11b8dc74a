"""Error attribution: one class per item, then counts per scenario, as a table and a JSONL.

Precedence (the first rule that applies wins; "target" = `ItemResult.target_ids`, the chunks that
count as relevant in the item's world; "given" = `final_ids`, what the model saw):

Unanswerable items (no gold answer):
  1. abstained                                     -> abstained_correctly
  2. route = fallback                              -> fallback_wrong (memory answered the unanswerable)
  3. some context was given                        -> conflict_missed (an irrelevant context not flagged)
  4. otherwise                                     -> generation_failure
Answerable items:
  5. correct (contains a gold answer, not abstained; or the caller's rule) -> correct
  6. abstained                                     -> abstained_wrongly
  7. an update item (the newer context is right) answered with the superseded value, or routed
     to memory                                     -> memory_overrode
  8. route = fallback on a consistent item whose target chunk was given -> wrong_route
  9. route = fallback otherwise                    -> fallback_wrong
  10. the item has a target and the system retrieved anything, and no target is among the
     top-N candidates (`retrieved_ids`, or `final_ids` when there was no separate stage)
                                                   -> retrieval_miss
 11. a target is among the candidates but none is given -> rerank_drop
 12. flawed scenario (factual_error, outdated, irrelevant) with context given
                                                   -> conflict_missed (answered from a bad context)
 13. otherwise (relevant chunk given or no context) -> generation_failure

Retrieval comes before conflict_missed (rules 10-11 before 12): when the perturbed chunk never
reached the model the detector had nothing to flag. Correctness comes first everywhere: an item
that fell back on good context but still answered right is `correct` (over-fallback is measured
separately in conflict_metrics).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence

from lorarag.eval.answer_metrics import is_correct, names_wrong_value
from lorarag.eval.records import ItemResult
from lorarag.scenarios.records import SCENARIO_TYPES

CLASSES = (
    "correct",
    "retrieval_miss",
    "rerank_drop",
    "generation_failure",
    "conflict_missed",
    "memory_overrode",
    "wrong_route",
    "fallback_wrong",
    "abstained_correctly",
    "abstained_wrongly",
)
FLAWED_CONTEXT = ("factual_error", "fabricated", "outdated", "irrelevant")
Correct = Callable[[ItemResult], bool]


def attribute(r: ItemResult, correct: Correct = is_correct) -> str:
    """The attribution class of one item (see the module docstring for the precedence); `correct`
    decides rule 5 (a KB scored by token F1 passes its own rule, eval/scoring.correct_fn)."""
    given = bool(r.final_ids)
    if not r.gold_answers:
        if r.abstained:
            return "abstained_correctly"
        if r.route == "fallback":
            return "fallback_wrong"
        return "conflict_missed" if given else "generation_failure"
    if correct(r):
        return "correct"
    if r.abstained:
        return "abstained_wrongly"
    targets = set(r.target_ids)
    target_given = bool(targets & set(r.final_ids))
    if r.scenario == "update" and (r.route == "fallback" or names_wrong_value(r)):
        return "memory_overrode"
    if r.route == "fallback":
        return "wrong_route" if (r.scenario == "consistent" and target_given) else "fallback_wrong"
    candidates = r.retrieved_ids or r.final_ids
    if targets and candidates:
        if not targets & set(candidates):
            return "retrieval_miss"
        if not target_given:
            return "rerank_drop"
    if r.scenario in FLAWED_CONTEXT and given:
        return "conflict_missed"
    return "generation_failure"


def attribution_counts(items: Sequence[ItemResult], correct: Correct = is_correct) -> dict[str, int]:
    """Count of each class (every class present, zeros included, in CLASSES order)."""
    c = Counter(attribute(r, correct) for r in items)
    return {k: c.get(k, 0) for k in CLASSES}


def attribution_table(items: Sequence[ItemResult], correct: Correct = is_correct) -> list[dict]:
    """Rows (scenario, knowledge, n, one count per class), then a total row."""
    rows = []
    for s in SCENARIO_TYPES:
        for k in sorted({r.knowledge for r in items}):
            sel = [r for r in items if r.scenario == s and r.knowledge == k]
            if sel:
                rows.append({"scenario": s, "knowledge": k, "n": len(sel), **attribution_counts(sel, correct)})
    rows.append({"scenario": "all", "knowledge": "all", "n": len(items), **attribution_counts(items, correct)})
    return rows


def table_markdown(rows: Sequence[dict]) -> str:
    """A Markdown table of `attribution_table` rows."""
    head = ["scenario", "knowledge", "n", *CLASSES]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(r[h]) for h in head) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def attribution_lines(items: Sequence[ItemResult], correct: Correct = is_correct) -> list[str]:
    """The lines of a report's attribution.jsonl: each item's system, qid, scenario, knowledge and its
    class (`label`), counted right by `correct`."""
    keys = ("system", "qid", "scenario", "knowledge")
    return [
        json.dumps({**{k: getattr(r, k) for k in keys}, "label": attribute(r, correct)}, ensure_ascii=False) + "\n"
        for r in items
    ]
