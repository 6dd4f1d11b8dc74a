"""The seeds' baselines table: LoRA-RAG against every system that knows what the LoRA knows, per
scenario x knowledge cell, pooled over training seeds.

One seed's headline (study/baseline_tables.py) names the best system per cell on that seed's adapter.
A recipe's claim needs it over seeds: closed-book LoRA, memory_or_context, RAG-SFT and the
baselines run with the adapter move with the training seed as LoRA-RAG does. Per cell, every
system's accuracy is the mean over seeds of its per-seed accuracy on the cell's items, and LoRA-RAG
minus each system is paired (the same items, seed by seed) with a 95 % CI that resamples seeds and
clusters together (eval.stats.crossed_bootstrap; the cluster is the organisation or document, as in
study/pooled_targets.py, whose resampling this one draws identically). The oracle router (closed-book LoRA's
answer where it is right, else base RAG's) is a column of its own, and "best" names the deployable
system with the highest pooled accuracy (the `oracle` kind, which reads the gold chunk, and the
router are not deployable). `captured` is study/baseline_tables.py's column on the pooled means: the share
of the router's gain over the better of closed-book LoRA and base RAG that LoRA-RAG realises.

Counts are held as arrays (seed x system x cell x cluster), so a resample costs index sums rather
than a pass over the items: 1,000 resamples of 5 seeds x 8 systems x 960 items take about a second.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from lorarag.eval.records import ItemResult
from lorarag.eval.stats import crossed_bootstrap
from lorarag.scenarios.records import SCENARIO_TYPES
from lorarag.study.baseline_tables import MIN_ROUTER_GAIN, captured
from lorarag.study.pooled_targets import PooledRow, ci_text

ROUTER = "oracle router"


@dataclass(frozen=True)
class BaselineCell:
    """One cell over every seed: LoRA-RAG, then each other system with LoRA-RAG minus it."""

    cell: str
    n_items: int  # a seed
    n_clusters: int
    lora: PooledRow
    others: tuple[tuple[str, PooledRow, PooledRow], ...]  # (system, accuracy, LoRA-RAG − it)
    best: str
    captured: str = "–"  # the share of the oracle router's gain LoRA-RAG realises (study/baselines.captured)


def _cells(items: Sequence[ItemResult]) -> list[tuple[str, str]]:
    have = {(r.scenario, r.knowledge) for r in items}
    return [(s, k) for s in SCENARIO_TYPES for k in ("known", "unknown") if (s, k) in have]


def _kept(results: Mapping[str, Sequence[ItemResult]], names: Sequence[str], s: str, k: str) -> list[str]:
    """The qids of cell (s, k) that every system in `names` answered, sorted."""
    have = [{r.qid for r in results[n] if r.scenario == s and r.knowledge == k} for n in names]
    return sorted(set.intersection(*have))


def pooled_baselines(
    per_seed: Sequence[Mapping[str, Sequence[ItemResult]]],
    lora: str,
    others: Sequence[str],
    deployable: Sequence[str],
    correct: Callable[[ItemResult], bool],
    *,
    router: tuple[str, str] | None = None,
    resamples: int = 1000,
    seed: int = 0,
    own_items: bool = False,
) -> list[BaselineCell]:
    """Per cell of `lora`'s items: every system's accuracy over seeds and LoRA-RAG minus each, with
    seeds x clusters CIs. `router` = (closed-book LoRA, base RAG) adds the oracle router. A cell
    keeps the items every system answered at the first seed; every seed must hold the same ones, unless
    `own_items` (split seeds: each run its own items of the world's clusters; a run without items in a
    resampled cell is left out of its mean)."""
    if not per_seed:
        raise ValueError("no seeds to pool")
    names = [n for n in others if n != lora]
    if router is not None and not set(router) <= set(names):
        raise ValueError(f"the oracle router reads {router}, which are not among {names}")
    first = per_seed[0]
    cells = _cells(first[lora])
    if own_items:  # split seeds: each run keeps its own items of every cell
        keeps = [[_kept(results, [lora, *names], s, k) for s, k in cells] for results in per_seed]
    else:
        kept = [_kept(first, [lora, *names], s, k) for s, k in cells]
        cells, kept = [c for c, q in zip(cells, kept) if q], [q for q in kept if q]
        for i, results in enumerate(per_seed):
            by = [{r.qid for r in results[n]} for n in [lora, *names]]
            for c, keep in enumerate(kept):
                if any(q not in have for have in by for q in keep):
                    raise ValueError(f"seed {i + 1} lacks items of {cells[c]}: pooling reads every seed on the same ones")
        keeps = [kept] * len(per_seed)
    qids = keeps[0]
    units = sorted({r.unit for results in per_seed for r in results[lora]})
    col = {u: i for i, u in enumerate(units)}
    systems = [lora, *names] + ([ROUTER] if router else [])
    hits = np.zeros((len(per_seed), len(systems), len(cells), len(units)))
    count = np.zeros((len(per_seed), len(cells), len(units)))
    for i, results in enumerate(per_seed):
        unit_of = {r.qid: col[r.unit] for r in results[lora]}
        by = {n: {r.qid: r for r in results[n]} for n in [lora, *names]}
        for c, keep in enumerate(keeps[i]):
            for q in keep:
                u = unit_of[q]
                count[i, c, u] += 1
                right = [correct(by[n][q]) for n in [lora, *names]]
                if router:
                    right.append(correct(by[router[0]][q]) or correct(by[router[1]][q]))
                hits[i, :, c, u] += right
    mean = np.nanmean if own_items else np.mean  # runs of their own items: one without items in a cell is left out

    def stat(seed_idx: np.ndarray, unit_idx: np.ndarray) -> np.ndarray:
        n = count[seed_idx][:, :, unit_idx].sum(axis=2)[:, None, :]  # seeds x 1 x cells
        with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            acc = np.where(n > 0, hits[seed_idx][:, :, :, unit_idx].sum(axis=3) / n, np.nan)  # seeds x systems x cells
            return np.concatenate([mean(acc, axis=0).ravel(), mean(acc[:, :1] - acc[:, 1:], axis=0).ravel()])

    point = stat(np.arange(len(per_seed)), np.arange(len(units)))
    cis = crossed_bootstrap(stat, len(per_seed), len(units), resamples=resamples, seed=seed)
    n_sys, n_cells = len(systems), len(cells)

    def row(label: str, j: int) -> PooledRow:
        return PooledRow(label, float(point[j]), *cis[j])

    out = []
    for c, (s, k) in enumerate(cells):
        acc = {name: row(name, m * n_cells + c) for m, name in enumerate(systems)}
        diffs = {
            name: row(f"{lora} − {name}", n_sys * n_cells + (m - 1) * n_cells + c) for m, name in enumerate(systems) if m > 0
        }
        ranked = {n: acc[n].value for n in [lora, *deployable] if n in acc}
        top = max(ranked.values())
        tied = [n for n, v in ranked.items() if v >= top - 1e-9]
        share = captured(acc[lora].value, acc[ROUTER].value, [acc[n].value for n in router]) if router else "–"
        out.append(
            BaselineCell(
                f"{s} ({k})",
                len(qids[c]),
                int((count[0, c] > 0).sum()),
                acc[lora],
                tuple((n, acc[n], diffs[n]) for n in systems[1:]),
                tied[0] if len(tied) == 1 else "tie: " + ", ".join(tied),
                share,
            )
        )
    return out


def _n(x: float) -> str:
    return "–" if math.isnan(x) else f"{x:.2f}"


def baselines_markdown(
    seeds: Sequence[int | str], lora: str, cells: Sequence[BaselineCell], resamples: int, right: str = ""
) -> str:
    """Markdown: per cell, LoRA-RAG and each system as `accuracy (LoRA-RAG − it [95% CI])`; `right`
    says what counts as right (eval.scoring.right_text), which for sentence answers is a threshold
    on token F1, not the mean F1 of the run's headline."""
    if not cells:
        return ""
    names = [n for n, _, _ in cells[0].others]
    head = ["cell", "items a seed (clusters)", lora, *names, "best (deployable)", "captured"]
    lines = [
        f"## {lora} against every baseline, pooled over {len(seeds)} seed{'s' * (len(seeds) != 1)}",
        "",
        f"Each system: accuracy{f' (right: {right})' if right else ''}, mean over seeds "
        f"(`{lora}` minus it [95% CI], {resamples} resamples of "
        "seeds and clusters, paired on the same items). The oracle router takes closed-book LoRA's answer "
        "where it is right, else base RAG's; `captured` is the share of its gain over the better of those "
        f"two that `{lora}` realises (`–` where it gains under {MIN_ROUTER_GAIN:.2f}).",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for c in cells:
        cols = [f"{_n(a.value)} ({ci_text(d, signed=True)})" for _, a, d in c.others]
        lines.append(
            f"| {c.cell} | {c.n_items} ({c.n_clusters}) | {ci_text(c.lora)} | "
            + " | ".join(cols)
            + f" | {c.best} | {c.captured} |"
        )
    return "\n".join(lines) + "\n"
