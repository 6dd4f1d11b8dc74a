"""Abstention as a detector of unanswerable questions, per system: recall and precision.

A system should say it cannot answer where nothing in its sources answers (an `unanswerable`
item, no gold answer) and answer everywhere else. Over one system's items:
- abstention recall: abstained unanswerable items / unanswerable items (the unanswerable cells'
  score, eval.conflict_metrics.correct_abstention);
- abstention precision: abstained unanswerable items / all its abstentions (the rest are answerable
  items it declined, each a miss in the accuracy cells).
Each with its Wilson 95 % CI (eval.stats.wilson_ci). A system that never abstains has no precision
(NaN, printed `–`). Pure functions over ItemResults, so the table can be rebuilt from any run folder.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lorarag.eval.conflict_metrics import Rate, correct_abstention
from lorarag.eval.records import ItemResult
from lorarag.eval.stats import wilson_ci

NO_UNANSWERABLE = "no unanswerable questions in this set"


@dataclass(frozen=True)
class Abstention:
    """One system's abstentions: on unanswerable items (recall) and of all it made (precision)."""

    system: str
    unanswerable: int  # items without a gold answer
    answerable: int
    declined: int  # answerable items it abstained on
    recall: Rate  # k: abstained unanswerable items, n: unanswerable items
    precision: Rate  # k: abstained unanswerable items, n: all its abstentions


def abstention(system: str, items: Sequence[ItemResult]) -> Abstention:
    """Recall and precision of `items`' abstentions on their unanswerable items, with Wilson CIs."""
    recall = correct_abstention(items)
    answerable = [r for r in items if r.gold_answers]
    declined = sum(r.abstained for r in answerable)
    n = recall.k + declined
    lo, hi = wilson_ci(recall.k, n)
    precision = Rate(recall.k / n if n else math.nan, recall.k, n, lo, hi)
    return Abstention(system, recall.n, len(answerable), declined, recall, precision)


def _rate(r: Rate) -> str:
    return "–" if not r.n else f"{r.value:.2f} [{r.lo:.2f}, {r.hi:.2f}] ({r.k}/{r.n})"


def abstention_lines(
    results: Mapping[str, Sequence[ItemResult]], names: Sequence[str], ctx: str, *, asked: bool = True
) -> list[str]:
    """Markdown lines: abstention recall and precision of each system in `names` (those in
    `results`), side by side; where no listed system has an unanswerable item, one line saying why:
    the set has none, or (`asked` False) the run does not evaluate the `unanswerable` scenario."""
    rows = [abstention(m, results[m]) for m in names if m in results]
    title = [f"### Abstention on unanswerable questions ({ctx} context)", ""]
    if not any(a.unanswerable for a in rows):
        why = NO_UNANSWERABLE if asked else "the run does not evaluate the `unanswerable` scenario"
        return [*title, f"The `unanswerable` cell has no items: {why}.", ""]
    return [
        *title,
        "Recall: the share of unanswerable questions (nothing in the sources answers them) the system "
        "abstained on. Precision: the share of its abstentions that were on unanswerable questions; the "
        "rest declined an answerable item (by cell in the declined table). Wilson 95 % CIs; `–`: no "
        "abstention.",
        "",
        "| system | unanswerable | abstention recall [95% CI] | answerable | declined | abstention precision [95% CI] |",
        "|---|---|---|---|---|---|",
        *(
            f"| {a.system} | {a.unanswerable} | {_rate(a.recall)} | {a.answerable} | {a.declined} | {_rate(a.precision)} |"
            for a in rows
        ),
        "",
    ]
