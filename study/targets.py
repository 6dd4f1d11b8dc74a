"""The product's absolute targets (accuracy per cell, over-fallback, detector AUROC) for KBs
scored by `contains` (the demo world's), abstention on unanswerable questions for every KB that
has them, the pair of systems they compare, and the table of a real conflict set evaluated beside
the run.

Pure functions over ItemResults (eval/), so the same numbers can be rebuilt from any run folder.
Every target line states the measured number, the 95 % CI bound its verdict read and whether it
is met: met only when that bound clears the bar (a lower bound for "at least", an upper bound for
"at most", the whole interval for a band), never on the point estimate. A missed target is never
hidden. study/headline.py writes them into the run's one headline.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from lorarag.eval.conflict_metrics import (
    cell_rate,
    consistent_abstention,
    correct_abstention,
    detector,
    gold_f1,
    left_context,
    over_fallback,
    routed_consistent,
    sides_with_source,
)
from lorarag.eval.records import ItemResult
from lorarag.eval.stats import cluster_rate, paired_auroc
from lorarag.scenarios.records import SCENARIO_TYPES, SOUND_CONTEXTS
from lorarag.trained.config import RunConfig


def _first(cfg: RunConfig, results: Mapping[str, Sequence[ItemResult]], kind: str) -> tuple[str, list[ItemResult]] | None:
    for s in cfg.systems:
        if s.kind == kind and s.name in results and not s.is_variant:  # a policy variant is an ablation
            return s.name, list(results[s.name])
    return None


def pair_names(cfg: RunConfig, results: Mapping[str, Sequence[ItemResult]]) -> tuple[str, str] | None:
    """(base RAG system, LoRA-RAG system) names of the run, when both were evaluated."""
    base, lora = _first(cfg, results, "base_rag"), _first(cfg, results, "lora_rag")
    return (base[0], lora[0]) if base and lora else None


def _cell(items: Sequence[ItemResult], scenario: str, knowledge: str) -> list[ItemResult]:
    return [r for r in items if r.scenario == scenario and r.knowledge == knowledge]


def _acc(items: Sequence[ItemResult]) -> str:
    if not items:
        return "–"
    a = cell_rate(items)
    return f"{a.value:.2f} [{a.lo:.2f}, {a.hi:.2f}] (n={a.n})"


def _num(x: float) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.2f}"


BASE_TARGET = "base RAG"  # prefix of the base-RAG targets; the others are LoRA-RAG's and its detector's


@dataclass(frozen=True)
class Target:
    """One target: the measured number, whether its 95 % CI clears the bar (`met`), and the bound the
    verdict read, as the targets table prints it (`bound`, e.g. `upper 0.25 (Wilson)`)."""

    name: str
    value: float
    met: bool
    bound: str


def judge(name: str, value: float, lo: float, hi: float, bar: float | tuple[float, float], how: str) -> Target:
    """A target met only past its CI: `bar` a float is "at least" when `name` has `>=` in it (the lower
    bound must reach it) and "at most" otherwise (the upper bound must stay under it); a pair
    (low, high) is a band the whole interval must lie in. A NaN value or bound is not met."""

    def ok(x: float) -> bool:
        return not math.isnan(value) and not math.isnan(x)

    if isinstance(bar, tuple):
        met = ok(lo) and ok(hi) and bar[0] <= lo and hi <= bar[1]
        return Target(name, value, met, f"{_num(lo)} to {_num(hi)} ({how})")
    if ">=" in name:
        return Target(name, value, ok(lo) and lo >= bar, f"lower {_num(lo)} ({how})")
    return Target(name, value, ok(hi) and hi <= bar, f"upper {_num(hi)} ({how})")


def auroc_ci(
    items: Sequence[ItemResult],
    positives: Sequence[str] | None,
    negatives: Sequence[str],
    resamples: int = 1000,
    seed: int = 0,
) -> tuple[float, float]:
    """95 % CI of the detector's AUROC (eval.conflict_metrics.detector: flawed `positives` against
    `negatives`, an invalid reply the worst score) from a stratified cluster bootstrap
    (eval.stats.paired_auroc against a constant score, whose AUROC is 0.5 on every resample)."""
    pos = set(positives) if positives else {s for s in SCENARIO_TYPES if s not in SOUND_CONTEXTS}
    sel = [
        r
        for r in items
        if (r.flag_score is not None or r.verdict == "invalid") and (r.scenario in pos or r.scenario in negatives)
    ]
    y = np.array([r.scenario in pos for r in sel], dtype=bool)
    scores = np.array(
        [(0.0 if t else 1.0) if r.verdict == "invalid" else r.flag_score for r, t in zip(sel, y)], dtype=np.float64
    )
    if not len(sel) or y.all() or not y.any():
        return math.nan, math.nan
    d = paired_auroc(np.zeros(len(sel)), scores, y, [r.unit for r in sel], resamples=resamples, seed=seed)
    return 0.5 + d.lo, 0.5 + d.hi


ABSTAIN_BAR = 0.70  # LoRA-RAG abstains on at least this share of the unanswerable questions
ABSTAIN_TARGET = f"LoRA-RAG, abstains on unanswerable >= {ABSTAIN_BAR:.2f}"


def abstention_rows(lora: Sequence[ItemResult], asked: bool | None = None) -> list[Target]:
    """The abstention target: LoRA-RAG abstains on >= ABSTAIN_BAR of the unanswerable questions (every
    knowledge split), met only when the Wilson lower bound reaches it. Where `asked` (None: where
    `lora` holds unanswerable items; [] otherwise): a resampling caller passes it, so a resample
    that drew no unanswerable item reports the target too, undefined (NaN) and never met."""
    if not (asked if asked is not None else any(not r.gold_answers for r in lora)):
        return []
    r = correct_abstention(lora)
    return [judge(ABSTAIN_TARGET, r.value, r.lo, r.hi, ABSTAIN_BAR, "Wilson")]


def target_rows(
    base: Sequence[ItemResult],
    lora: Sequence[ItemResult],
    *,
    updates: bool | None = None,
    bounds: bool = True,
    unanswerable: bool | None = None,
) -> list[Target]:
    """Every target of the CPU demo, each met only when its 95 % CI bound clears the bar (`judge`):
    accuracies and over-fallback by their Wilson interval, AUROCs by `auroc_ci`. The `update` targets
    where the run evaluates that cell (`updates`; None: where `lora` holds update items), the
    abstention target where it has unanswerable questions (`unanswerable`, as `abstention_rows`'
    `asked`). Resampling callers pass both, so every resample reports the same targets, and
    `bounds=False`: the values only, without the AUROC's bootstrap (no verdict is met then)."""
    nan = (math.nan, math.nan, math.nan)

    def acc(items, s, k):
        sel = _cell(items, s, k)
        if not sel:
            return nan
        a = cell_rate(sel)
        return a.value, a.lo, a.hi

    def auroc(items, k, pos=None, neg=SOUND_CONTEXTS):
        sel = [r for r in items if r.knowledge == k]
        if not sel:
            return nan
        return detector(sel, pos, neg).auroc, *(auroc_ci(sel, pos, neg) if bounds else (math.nan, math.nan))

    ofb = over_fallback([r for r in lora if r.knowledge == "unknown"])
    wilson, bamber = "Wilson", "cluster bootstrap"
    rows = [
        (f"{BASE_TARGET}, consistent (known) >= 0.9", acc(base, "consistent", "known"), 0.9, wilson),
        (f"{BASE_TARGET}, factual error (known) ~ 0 (<= 0.2)", acc(base, "factual_error", "known"), 0.2, wilson),
        (f"{BASE_TARGET}, outdated (known) ~ 0 (<= 0.2)", acc(base, "outdated", "known"), 0.2, wilson),
        ("LoRA-RAG, consistent (known) >= 0.9", acc(lora, "consistent", "known"), 0.9, wilson),
        ("LoRA-RAG, factual error (known) >= 0.8", acc(lora, "factual_error", "known"), 0.8, wilson),
        ("LoRA-RAG, outdated (known) >= 0.9", acc(lora, "outdated", "known"), 0.9, wilson),
        ("LoRA-RAG, irrelevant (known) >= 0.9", acc(lora, "irrelevant", "known"), 0.9, wilson),
        ("LoRA-RAG, over-fallback on consistent unknown facts <= 0.10", (ofb.value, ofb.lo, ofb.hi), 0.10, wilson),
        ("detector AUROC, known, all flawed >= 0.9", auroc(lora, "known"), 0.9, bamber),
        ("detector AUROC, known, factual error >= 0.9", auroc(lora, "known", ["factual_error"]), 0.9, bamber),
        (
            "detector AUROC, unknown, factual error ~ 0.5 (0.35-0.65)",
            auroc(lora, "unknown", ["factual_error"]),
            (0.35, 0.65),
            bamber,
        ),
    ]
    if updates if updates is not None else any(r.scenario == "update" for r in lora):
        # the context right, the memory stale: the cells that tell detection from memory
        # an update differs from the memory as a factual error does: only what the source says about
        # itself (its date) can tell a newer value from a wrong one, and outdated from newer
        rows += [
            ("LoRA-RAG, update (known) >= 0.85", acc(lora, "update", "known"), 0.85, wilson),
            (
                "detector AUROC, known, outdated vs update >= 0.9",
                auroc(lora, "known", ["outdated"], ["update"]),
                0.9,
                bamber,
            ),
            (
                "detector AUROC, known, factual error vs update >= 0.9",
                auroc(lora, "known", ["factual_error"], ["update"]),
                0.9,
                bamber,
            ),
        ]
    return [judge(name, v, lo, hi, bar, how) for name, (v, lo, hi), bar, how in rows] + abstention_rows(lora, unanswerable)


def targets(
    base: Sequence[ItemResult], lora: Sequence[ItemResult], *, updates: bool | None = None
) -> list[tuple[str, float, bool]]:
    """(target, measured, met) of `target_rows`, for callers that need no bound."""
    return [(t.name, t.value, t.met) for t in target_rows(base, lora, updates=updates)]


def target_values(
    base: Sequence[ItemResult], lora: Sequence[ItemResult], *, updates: bool | None = None, unanswerable: bool | None = None
) -> list[tuple[str, float]]:
    """(target, measured) of `target_rows` without bounds: for a caller that resamples (study/pooled_targets.py)."""
    return [(t.name, t.value) for t in target_rows(base, lora, updates=updates, bounds=False, unanswerable=unanswerable)]


def over_fallback_cell(cfg: RunConfig, items: Sequence[ItemResult]) -> str:
    """Over-fallback on a cell's consistent items with a 95 % CI that resamples clusters (a met
    target needs its upper bound, not its mean, under the bar), then the abstention part."""
    sel = [r for r in items if routed_consistent(r)]
    if not sel:
        return "–"
    rate, lo, hi = cluster_rate(
        np.array([float(left_context(r)) for r in sel]),
        [r.unit for r in sel],
        resamples=cfg.eval.bootstrap,
        seed=cfg.eval.seed,
    )
    ci = "" if math.isnan(lo) else f" [{lo:.2f}, {hi:.2f}]"
    return f"{_num(rate)}{ci} ({_num(consistent_abstention(sel).value)})"


def set_table(title: str, results: Mapping[str, Sequence[ItemResult]]) -> str:
    """Markdown for a real conflict set, one row per system x cell: accuracy (95 % CI), mean token
    F1 to the true answer and how often the answer sides with a wrong source (both readable where
    answers are sentences), and for systems with a verdict, over-fallback and detector AUROC."""
    lines = [
        f"## {title}: by system and cell",
        "",
        "| system | cell | accuracy [95% CI] | token F1 to true answer | sides with wrong source "
        "| over-fallback | detector AUROC |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, items in results.items():
        judged = any(r.flag_score is not None for r in items)
        extra = [_num(over_fallback(items).value), _num(detector(items).auroc)] if judged else ["–", "–"]
        cells = [(s, k) for s in SCENARIO_TYPES for k in sorted({r.knowledge for r in items}) if _cell(items, s, k)]
        for i, (s, k) in enumerate(cells):
            sel = _cell(items, s, k)
            lines.append(
                f"| {name} | {s} ({k}) | {_acc(sel)} | {_num(gold_f1(sel))} | "
                f"{_num(sides_with_source(sel).value)} | " + " | ".join(extra if i == 0 else ["", ""]) + " |"
            )
    return "\n".join(lines) + "\n"
