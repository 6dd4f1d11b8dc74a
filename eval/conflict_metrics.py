"""Conflict and fallback metrics per scenario type and knowledge split (pure functions).

Definitions (every rate carries its denominator `n`; NaN when n = 0):
- accuracy: `answer_metrics.is_correct` (contains-gold and not the source's wrong value) over
  answerable items; a correct abstention (on an unanswerable item) is its own rate,
  `correct_abstention`, never folded into accuracy.
- context bias (ClashEval's misled rate): P(the answer takes the context's wrong value | the
  model's closed-book answer was right), over factual_error/outdated items. "Takes the context's
  value" = contains the context's value and no gold answer.
- prior bias: P(the answer keeps the model's own wrong closed-book answer | the context was
  right), over consistent items whose closed-book answer misses the gold. "Keeps" = the answer
  and the closed-book answer contain one another (normalised tokens) and the answer is wrong.
- fallback success: P(route = fallback and correct) over factual_error/outdated items.
- over-fallback: P(not answered from the context) over consistent items: a fallback to memory
  or an abstention (context right: either is a wasted or harmful detour, and a system that abstains
  instead of falling back must not score 0); the abstention rate is reported beside it. Per
  knowledge split, so the unknown-fact row is the over-fallback on never-learned facts. NaN for
  systems without routing.
- long-form answers (ConflictNQ's answers are sentences, where contains-gold fails every system):
  mean token F1 to the true answer, and "sides with the source" = P(token F1 to the context's
  wrong value > token F1 to the true answer) over factual_error/outdated items; `sides_with_truth`
  is the per-item rule the other way round (eval/scoring.py scores by it); a tie sides with neither.
- detector: positive = the context should not be used as is (any scenario but the sound ones,
  `consistent` and `update`: a newer source is right even where it contradicts the memory);
  predicted positive = verdict != "supported". An `invalid` reply (no verdict could be read) is a
  miss whatever the truth: a false negative on a flawed context, a false positive on a consistent
  one, and the worst flag_score for the AUROC (0 on flawed, 1 on consistent); their number is
  `n_invalid`. AUROC from `flag_score` = 1 - P(supported), by sklearn, overall and per flawed
  scenario type against the sound items of the same split (`negatives` narrows them: outdated vs
  update asks whether the detector reads which version is newer).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from lorarag.eval.answer_metrics import contains_gold, is_correct, token_f1
from lorarag.eval.records import WRONG_VALUE_SCENARIOS, ItemResult
from lorarag.eval.stats import wilson_ci
from lorarag.scenarios.records import SCENARIO_TYPES, SOUND_CONTEXTS


def closed_book_correct(r: ItemResult) -> bool | None:
    """Whether the model's closed-book answer contains a gold answer (None: unknown)."""
    if r.closed_book_answer is None or not r.gold_answers:
        return None
    return contains_gold(r.closed_book_answer, r.gold_answers, r.language)


def is_misled(r: ItemResult) -> bool:
    """The answer states the context's value and no gold answer."""
    if r.abstained or not r.context_answer:
        return False
    return contains_gold(r.answer, (r.context_answer,), r.language) and not contains_gold(
        r.answer, r.gold_answers, r.language
    )


def keeps_prior(r: ItemResult) -> bool:
    """The answer repeats the model's (wrong) closed-book answer."""
    cb = r.closed_book_answer
    if r.abstained or not cb or is_correct(r):
        return False
    return contains_gold(r.answer, (cb,), r.language) or contains_gold(cb, (r.answer,), r.language)


@dataclass(frozen=True)
class Rate:
    """k of n items, with the Wilson 95 % CI of k/n (NaN value and bounds when n is 0)."""

    value: float
    k: int
    n: int
    lo: float
    hi: float


@dataclass(frozen=True)
class DetectorScore:
    """The verdict flag as a detector of flawed contexts: precision, recall, F1 and flag_score's AUROC."""

    precision: float
    recall: float
    f1: float
    auroc: float
    n: int
    n_pos: int
    n_invalid: int


def _rate(items: Iterable[ItemResult], where: Callable[[ItemResult], bool], hit: Callable[[ItemResult], bool]) -> Rate:
    sel = [r for r in items if where(r)]
    k = sum(1 for r in sel if hit(r))
    lo, hi = wilson_ci(k, len(sel))
    return Rate(k / len(sel) if sel else math.nan, k, len(sel), lo, hi)


def accuracy(items: Sequence[ItemResult]) -> Rate:
    """Accuracy over answerable items with its Wilson 95 % CI (NaN on a cell of unanswerable items)."""
    return _rate(items, lambda r: bool(r.gold_answers), is_correct)


def correct_abstention(items: Sequence[ItemResult]) -> Rate:
    """P(abstained | unanswerable): the right reply where no source holds the answer."""
    return _rate(items, lambda r: not r.gold_answers, lambda r: r.abstained)


def cell_rate(items: Sequence[ItemResult]) -> Rate:
    """A cell's score: accuracy where it holds answerable items, else (the `unanswerable` cells) the
    correct-abstention rate, named as such by the cell."""
    return accuracy(items) if any(r.gold_answers for r in items) else correct_abstention(items)


def context_bias(items: Sequence[ItemResult]) -> Rate:
    """P(misled by the context's wrong value | closed-book answer right)."""
    return _rate(items, lambda r: r.scenario in WRONG_VALUE_SCENARIOS and closed_book_correct(r) is True, is_misled)


def prior_bias(items: Sequence[ItemResult]) -> Rate:
    """P(keeps its own wrong closed-book answer | context right)."""
    return _rate(items, lambda r: r.scenario == "consistent" and closed_book_correct(r) is False, keeps_prior)


def fallback_success(items: Sequence[ItemResult]) -> Rate:
    """P(fell back and answered correctly) on factual_error/outdated items."""
    return _rate(
        items,
        lambda r: r.scenario in WRONG_VALUE_SCENARIOS and r.route is not None,
        lambda r: r.route == "fallback" and is_correct(r),
    )


def left_context(r: ItemResult) -> bool:
    """The system did not answer from the context: it fell back to memory or abstained."""
    return r.route in ("fallback", "abstain") or r.abstained


def routed_consistent(r: ItemResult) -> bool:
    """A consistent-context item of a routing system: over-fallback's denominator."""
    return r.scenario == "consistent" and r.route is not None


def over_fallback(items: Sequence[ItemResult]) -> Rate:
    """P(not answered from the context: fallback or abstention) on consistent contexts (NaN without
    routing)."""
    return _rate(items, routed_consistent, left_context)


def consistent_abstention(items: Sequence[ItemResult]) -> Rate:
    """P(abstained) on consistent contexts of routing systems: the part of over-fallback that is
    abstention."""
    return _rate(items, routed_consistent, lambda r: r.abstained)


def detector(
    items: Sequence[ItemResult], positives: Sequence[str] | None = None, negatives: Sequence[str] = SOUND_CONTEXTS
) -> DetectorScore:
    """Precision, recall, F1 of the verdict flag and AUROC of flag_score.

    `positives`: flawed scenario types to score against the `negatives` (default: every flawed type
    against every sound one).
    """
    from sklearn.metrics import roc_auc_score

    pos = set(positives) if positives else {s for s in SCENARIO_TYPES if s not in SOUND_CONTEXTS}
    sel = [
        r
        for r in items
        if (r.flag_score is not None or r.verdict == "invalid") and (r.scenario in pos or r.scenario in negatives)
    ]
    y = [r.scenario in pos for r in sel]
    # an invalid reply is wrong either way: not flagged when flawed, flagged when consistent
    pred = [
        (not t) if r.verdict == "invalid" else (r.verdict is not None and r.verdict != "supported") for r, t in zip(sel, y)
    ]
    scores = [(0.0 if t else 1.0) if r.verdict == "invalid" else r.flag_score for r, t in zip(sel, y)]
    tp = sum(1 for t, p in zip(y, pred) if t and p)
    fp = sum(1 for t, p in zip(y, pred) if p and not t)
    fn = sum(1 for t, p in zip(y, pred) if t and not p)
    prec = tp / (tp + fp) if tp + fp else math.nan
    rec = tp / (tp + fn) if tp + fn else math.nan
    f1 = 2 * tp / (2 * tp + fp + fn) if (tp + fp + fn) else math.nan
    auroc = float(roc_auc_score(y, scores)) if 0 < sum(y) < len(y) else math.nan
    return DetectorScore(prec, rec, f1, auroc, len(sel), sum(y), sum(1 for r in sel if r.verdict == "invalid"))


def roc_points(items: Sequence[ItemResult]) -> tuple[list[float], list[float]]:
    """(FPR, TPR) of flag_score, flawed vs consistent (empty when undefined)."""
    from sklearn.metrics import roc_curve

    sel = [r for r in items if r.flag_score is not None or r.verdict == "invalid"]
    y = [r.scenario not in SOUND_CONTEXTS for r in sel]
    if not 0 < sum(y) < len(y):
        return [], []
    fpr, tpr, _ = roc_curve(y, [(0.0 if t else 1.0) if r.verdict == "invalid" else r.flag_score for r, t in zip(sel, y)])
    return fpr.tolist(), tpr.tolist()


def groups(items: Sequence[ItemResult]) -> list[tuple[str, str, list[ItemResult]]]:
    """(scenario, knowledge, items) for every present cell, then ("all", knowledge), then ("all", "all")."""
    out = []
    knows = sorted({r.knowledge for r in items})
    for s in SCENARIO_TYPES:
        for k in knows:
            sel = [r for r in items if r.scenario == s and r.knowledge == k]
            if sel:
                out.append((s, k, sel))
    for k in knows:
        out.append(("all", k, [r for r in items if r.knowledge == k]))
    out.append(("all", "all", list(items)))
    return out


def conflict_table(items: Sequence[ItemResult]) -> list[dict]:
    """One row per (scenario, knowledge) cell with every conflict metric."""
    rows = []
    for s, k, sel in groups(items):
        acc = accuracy(sel)
        rows.append(
            {
                "scenario": s,
                "knowledge": k,
                "n": len(sel),
                "accuracy": acc.value,
                "acc_lo": acc.lo,
                "acc_hi": acc.hi,
                "context_bias": context_bias(sel).value,
                "prior_bias": prior_bias(sel).value,
                "fallback_success": fallback_success(sel).value,
                "over_fallback": over_fallback(sel).value,
                "consistent_abstention": consistent_abstention(sel).value,
                "fallback_rate": _rate(sel, lambda r: r.route is not None, lambda r: r.route == "fallback").value,
                "abstain_rate": sum(r.abstained for r in sel) / len(sel),
                "correct_abstention": correct_abstention(sel).value,
            }
        )
    return rows


def gold_f1(items: Sequence[ItemResult]) -> float:
    """Mean SQuAD token F1 of the answers to the true answers (NaN without items)."""
    return sum(token_f1(r.answer, r.gold_answers, r.language) for r in items) / len(items) if items else math.nan


def sides_with_truth(r: ItemResult) -> bool:
    """The reply is closer, in token F1, to the true answer than to the source's wrong value (an item
    without one is compared with the empty string). Not the complement of `sides_with_source`'s rule:
    a reply equally far from both (an abstention, say) sides with neither."""
    return token_f1(r.answer, r.gold_answers, r.language) > token_f1(r.answer, (r.context_answer or "",), r.language)


def sides_with_source(items: Sequence[ItemResult]) -> Rate:
    """P(the answer is closer, in token F1, to the context's wrong value than to the true answer) over
    the factual-error/outdated items that name such a value: `sides_with_truth` the other way round,
    as a rate; a reply equally far from both counts as siding with neither."""

    def closer(r: ItemResult) -> bool:
        return token_f1(r.answer, (r.context_answer,), r.language) > token_f1(r.answer, r.gold_answers, r.language)

    return _rate(items, lambda r: r.scenario in WRONG_VALUE_SCENARIOS and r.context_answer is not None, closer)


def language_table(items: Sequence[ItemResult]) -> list[dict]:
    """Accuracy (Wilson 95 % CI) per language x scenario x knowledge cell, then per language overall.

    A bilingual world mixes a model's reading in each language into one cell: this splits it."""
    rows = []
    for lang in sorted({r.language for r in items}):
        mine = [r for r in items if r.language == lang]
        for s, k, sel in groups(mine)[:-1]:  # the cells and ("all", knowledge); the grand total below
            acc = accuracy(sel)
            rows.append(
                {
                    "language": lang,
                    "scenario": s,
                    "knowledge": k,
                    "n": len(sel),
                    "accuracy": acc.value,
                    "acc_lo": acc.lo,
                    "acc_hi": acc.hi,
                }
            )
    return rows


def detector_table(items: Sequence[ItemResult]) -> list[dict]:
    """Detector scores per knowledge split: all flawed types, then each type vs consistent."""
    rows = []
    for k in sorted({r.knowledge for r in items}) + ["all"]:
        sel = [r for r in items if k == "all" or r.knowledge == k]
        rows.append({"knowledge": k, "positives": "all", **asdict(detector(sel))})
        for s in SCENARIO_TYPES:
            if s not in SOUND_CONTEXTS and any(r.scenario == s for r in sel):
                rows.append({"knowledge": k, "positives": s, **asdict(detector(sel, [s]))})
    return rows


@dataclass(frozen=True)
class ClashEvalScore:
    """ClashEval's two biases (Wu et al., 2024), each with a 95 % bootstrap percentile CI over items.

    Only items where exactly one of the model's prior (its closed-book answer) and the context is
    right count: `context_bias` = P(the answer repeats the context's wrong value | prior right,
    context wrong), over factual-error and outdated items; `prior_bias` = P(the answer keeps the
    wrong prior | prior wrong, context right), over consistent items. `balanced` = 1 - their mean:
    the share of such conflicts resolved toward the right side, weighting both kinds equally.
    NaN where a subset is empty (no closed-book answers, or no such conflict).
    """

    context_bias: float
    context_bias_lo: float
    context_bias_hi: float
    n_context: int
    prior_bias: float
    prior_bias_lo: float
    prior_bias_hi: float
    n_prior: int
    balanced: float


def _boot(hits: list[bool], resamples: int, rng: np.random.Generator) -> tuple[float, float, float]:
    if not hits:
        return math.nan, math.nan, math.nan
    x = np.asarray(hits, dtype=float)
    means = x[rng.integers(0, len(x), size=(resamples, len(x)))].mean(axis=1)
    return float(x.mean()), float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def clasheval(items: Sequence[ItemResult], *, resamples: int = 1000, seed: int = 0) -> ClashEvalScore:
    """The ClashEval biases of `items` (see ClashEvalScore); the same seed gives the same CIs."""
    rng = np.random.default_rng(seed)
    ctx = [is_misled(r) for r in items if r.scenario in WRONG_VALUE_SCENARIOS and closed_book_correct(r) is True]
    pri = [keeps_prior(r) for r in items if r.scenario == "consistent" and closed_book_correct(r) is False]
    cb, cb_lo, cb_hi = _boot(ctx, resamples, rng)
    pb, pb_lo, pb_hi = _boot(pri, resamples, rng)
    return ClashEvalScore(cb, cb_lo, cb_hi, len(ctx), pb, pb_lo, pb_hi, len(pri), 1 - (cb + pb) / 2)
