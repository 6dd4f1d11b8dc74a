"""The seeds' pooled table: each target and each LoRA-RAG − base RAG difference as one number over
every training seed, with a 95 % CI that resamples seeds and facts together.

The per-seed table (study/seeds.py) says how often a seed meets a target. This one says what the
recipe does with both sources of variation counted: which seed was drawn and which clusters were
asked (eval.stats.crossed_bootstrap; training seeds read the same items, split seeds each their own). The unit is the item's
cluster, the organisation (world) or the document (KB): a fact asked in two wordings, and the
facts of one organisation, whose name and language they share, are not counted as independent
items. Differences are paired: both systems are read on the same resampled clusters. Beside them,
per seed, McNemar's exact p over every item and over one item per cluster (the smallest qid).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from lorarag.eval.answer_metrics import is_correct
from lorarag.eval.records import ItemResult
from lorarag.eval.stats import crossed_bootstrap, mcnemar_exact, one_per_cluster

Pair = tuple[Sequence[ItemResult], Sequence[ItemResult]]  # (base RAG, LoRA-RAG) results of one seed
Stats = Callable[[Sequence[ItemResult], Sequence[ItemResult]], list[tuple[str, float]]]

# The cells whose LoRA − base accuracy difference the pooled table reports (the demo's targets).
DIFF_CELLS = (
    ("consistent", "known"),
    ("factual_error", "known"),
    ("fabricated", "known"),
    ("outdated", "known"),
    ("irrelevant", "known"),
    ("update", "known"),
    ("consistent", "unknown"),
)


@dataclass(frozen=True)
class PooledRow:
    """One statistic over every seed: its mean over seeds and the seeds x facts 95 % CI."""

    name: str
    value: float
    lo: float
    hi: float


@dataclass(frozen=True)
class PooledDiff:
    """One cell: base and LoRA accuracy over seeds, their paired difference, McNemar p per seed."""

    cell: str
    n_items: int  # a seed
    n_clusters: int
    base: PooledRow
    lora: PooledRow
    diff: PooledRow
    mcnemar_p: tuple[float, ...]  # per seed, in seed order, over every item
    mcnemar_p_cluster: tuple[float, ...] = ()  # per seed, over one item per cluster


def _by_unit(items: Sequence[ItemResult], units: Sequence[str]) -> list[list[ItemResult]]:
    index = {f: i for i, f in enumerate(units)}
    groups: list[list[ItemResult]] = [[] for _ in units]
    for r in items:
        groups[index[r.unit]].append(r)
    return groups


def pooled_rows(
    per_seed: Sequence[Pair], stats: Stats, *, resamples: int = 1000, seed: int = 0, own_items: bool = False
) -> list[PooledRow]:
    """`stats(base, lora)` at every seed, averaged over seeds, with a CI from resampling seeds
    and clusters (crossed). Base and LoRA hold the same items at each seed; across seeds the items
    are the same (training seeds), or with `own_items` each run's own (split seeds, `lorarag seeds
    --split-seeds`: the clusters are the world's organisations, shared by every split; a run without
    items in a resampled cell is left out of that cell's mean)."""
    if not per_seed:
        raise ValueError("no seeds to pool")
    qids = sorted(r.qid for r in per_seed[0][1])
    for base, lora in per_seed:
        own = sorted(r.qid for r in lora)
        if own != sorted(r.qid for r in base) or (own != qids and not own_items):
            raise ValueError("the seeds' results hold different items: pooling reads every seed on the same ones")
    mean = np.nanmean if own_items else np.mean
    units = sorted({r.unit for _, lora in per_seed for r in lora})
    grouped = [(_by_unit(b, units), _by_unit(lo, units)) for b, lo in per_seed]
    names = [n for n, _ in stats(*per_seed[0])]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a cell no run has: NaN
        point = mean([[v for _, v in stats(b, lo)] for b, lo in per_seed], axis=0)

    def stat(seed_idx: np.ndarray, unit_idx: np.ndarray) -> np.ndarray:
        rows = []
        for s in seed_idx:
            gb, gl = grouped[s]
            rows.append([v for _, v in stats([r for u in unit_idx for r in gb[u]], [r for u in unit_idx for r in gl[u]])])
        with np.errstate(invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a cell no resampled run has: NaN, as it should
            return mean(rows, axis=0)

    cis = crossed_bootstrap(stat, len(per_seed), len(units), resamples=resamples, seed=seed)
    return [PooledRow(n, float(v), lo, hi) for n, v, (lo, hi) in zip(names, point, cis)]


def cell_accuracies(
    base: Sequence[ItemResult], lora: Sequence[ItemResult], correct: Callable[[ItemResult], bool] = is_correct
) -> list[tuple[str, float]]:
    """Per DIFF_CELLS cell: base accuracy, LoRA accuracy, their difference (NaN where empty);
    `correct`: the KB's rule (eval/scoring.correct_fn)."""
    out = []
    for s, k in DIFF_CELLS:
        b = [correct(r) for r in base if r.scenario == s and r.knowledge == k]
        lo = [correct(r) for r in lora if r.scenario == s and r.knowledge == k]
        ab = sum(b) / len(b) if b else math.nan
        al = sum(lo) / len(lo) if lo else math.nan
        out += [(f"{s} ({k}) base", ab), (f"{s} ({k}) lora", al), (f"{s} ({k}) diff", al - ab)]
    return out


def pooled_differences(
    per_seed: Sequence[Pair],
    *,
    resamples: int = 1000,
    seed: int = 0,
    correct: Callable[[ItemResult], bool] = is_correct,
    own_items: bool = False,
) -> list[PooledDiff]:
    """LoRA − base accuracy per DIFF_CELLS cell over every seed (see module docstring)."""
    rows = pooled_rows(
        per_seed, lambda b, lo: cell_accuracies(b, lo, correct), resamples=resamples, seed=seed, own_items=own_items
    )
    out = []
    for i, (s, k) in enumerate(DIFF_CELLS):
        base_r, lora_r, diff_r = rows[3 * i : 3 * i + 3]
        cell = [r for r in per_seed[0][1] if r.scenario == s and r.knowledge == k]
        if not cell:
            continue
        ps, pcs = [], []
        for base, lora in per_seed:
            b = {r.qid: r for r in base if r.scenario == s and r.knowledge == k}
            lo = {r.qid: correct(r) for r in lora if r.scenario == s and r.knowledge == k}
            qids = sorted(b)
            yb, yl = np.array([correct(b[q]) for q in qids]), np.array([lo[q] for q in qids])
            ps.append(mcnemar_exact(yb, yl)[2])
            one = one_per_cluster([b[q].unit for q in qids], qids)
            pcs.append(mcnemar_exact(yb[one], yl[one])[2])
        out.append(
            PooledDiff(f"{s} ({k})", len(cell), len({r.unit for r in cell}), base_r, lora_r, diff_r, tuple(ps), tuple(pcs))
        )
    return out


def ci_text(r: PooledRow, signed: bool = False) -> str:
    """`0.88 [0.79, 0.97]` (signed: `+0.88 [...]`); `–` for an undefined value."""
    if math.isnan(r.value):
        return "–"
    f = "{:+.2f}" if signed else "{:.2f}"
    ci = "" if math.isnan(r.lo) else f" [{f.format(r.lo)}, {f.format(r.hi)}]"
    return f.format(r.value) + ci


def pooled_markdown(
    seeds: Sequence[int | str], targets: Sequence[PooledRow], diffs: Sequence[PooledDiff], resamples: int, right: str = ""
) -> str:
    """Markdown: the pooled targets, then the pooled differences with McNemar p per seed; `right` says
    what the differences count as right (eval.scoring.right_text)."""
    lines = [
        f"## Pooled over {len(seeds)} seeds and the facts asked",
        "",
        f"Mean over seeds; 95 % CI from {resamples} resamples of seeds and clusters together "
        "(organisations or documents: items that share one count once).",
        "",
        "| target | mean over seeds [95% CI] |",
        "|---|---|",
    ]
    lines += [f"| {r.name} | {ci_text(r)} |" for r in targets]
    if diffs:
        if right:
            lines += ["", f"Share of items right ({right}), the unit McNemar's test needs."]
        lines += [
            "",
            "| cell | items a seed (clusters) | base RAG | LoRA-RAG | LoRA − base [95% CI] | "
            "McNemar p per seed (items) | McNemar p per seed (one item a cluster) |",
            "|---|---|---|---|---|---|---|",
        ]
        for d in diffs:
            ps = ", ".join(f"{p:.2g}" for p in d.mcnemar_p)
            pcs = ", ".join(f"{p:.2g}" for p in d.mcnemar_p_cluster)
            lines.append(
                f"| {d.cell} | {d.n_items} ({d.n_clusters}) | {ci_text(d.base)} | {ci_text(d.lora)} | "
                f"{ci_text(d.diff, signed=True)} | {ps} | {pcs} |"
            )
    return "\n".join(lines) + "\n"
