"""Per-item scoring by `data.answer_metric`: what a reply scores, when it counts as right, and
what the tables call the score.

- `contains`: a gold answer in the reply (eval.answer_metrics.is_correct);
- `token_f1` (sentence answers, ConflictNQ): on a source asserting a wrong value (factual error,
  outdated) whether the reply sides with the truth (eval.conflict_metrics.sides_with_truth: closer
  in token F1 to the true answer than to the source's value); elsewhere the mean token F1 to the
  true answer (unanswerable: abstaining is right); on an update, whether the reply is closer to the
  current answer than to the superseded one the LoRA learned.
"""

from __future__ import annotations

from collections.abc import Callable

from lorarag.eval.answer_metrics import is_correct, token_f1
from lorarag.eval.conflict_metrics import sides_with_truth
from lorarag.eval.records import WRONG_VALUE_SCENARIOS, ItemResult

Score = Callable[[ItemResult], float]

F1_CORRECT = 0.5  # token F1 at which a sentence answer counts as right in the attribution table


def score_fn(metric: str) -> Score:
    """Per-item score for `data.answer_metric` (see the module docstring)."""
    if metric == "contains":
        return lambda r: float(is_correct(r))

    def f1(r: ItemResult) -> float:
        if not r.gold_answers:
            return float(is_correct(r))
        if r.scenario in WRONG_VALUE_SCENARIOS and r.context_answer:
            return float(sides_with_truth(r))
        if r.scenario == "update" and r.superseded:  # closer to the current answer than to the stale one
            return float(token_f1(r.answer, r.gold_answers, r.language) > token_f1(r.answer, r.superseded, r.language))
        return token_f1(r.answer, r.gold_answers, r.language)

    return f1


def correct_fn(metric: str) -> Callable[[ItemResult], bool]:
    """Rule 5 of eval.attribution for `data.answer_metric`: contains-gold, or for `token_f1` siding
    with the truth on a wrong source and token F1 >= F1_CORRECT elsewhere."""
    if metric == "contains":
        return is_correct
    score = score_fn(metric)
    return lambda r: (
        not r.abstained
        and score(r)
        >= (
            1.0
            if (r.scenario in WRONG_VALUE_SCENARIOS and r.context_answer) or (r.scenario == "update" and r.superseded)
            else F1_CORRECT
        )
    )


def right_text(metric: str) -> str:
    """What `correct_fn(metric)` counts as right, for the captions of tables that share items right."""
    if metric == "contains":
        return "a gold answer in the reply and not the source's wrong value; on an unanswerable item, an abstention"
    return (
        f"token F1 >= {F1_CORRECT} to the true answer; on a wrong source, closer to the truth than to its "
        "value; never an abstention on an answerable item"
    )


def metric_name(metric: str, scenario: str) -> str:
    """The score's name in a table's metric column: accuracy, or what `score_fn("token_f1")` measures
    on the scenario."""
    if metric == "contains":
        return "accuracy"
    if scenario == "update":
        return "sides with the update"
    return "sides with truth" if scenario in WRONG_VALUE_SCENARIOS else "token F1"
