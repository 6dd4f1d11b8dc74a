"""Benchmark: retrieval metrics over many result items, vectorised numpy vs a per-item Python loop.

Synthetic ranked lists (seeded) stand in for a run's `retrieved_ids`; both forms compute the
same six metrics at K = 1, 3, 5, 10 plus MRR and must agree to 1e-9 before the ratio is reported.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

import numpy as np

from lorarag.eval import retrieval_metrics as rm

KS = (1, 3, 5, 10)


@dataclass(frozen=True)
class BenchResult:
    """Timings (seconds) of both forms and their ratio."""

    n_items: int
    build_s: float  # relevance matrix construction (part of the vectorised time)
    vector_s: float
    loop_s: float

    @property
    def speedup(self) -> float:
        """loop time / vectorised time (construction included)."""
        return self.loop_s / self.vector_s


def synthetic_runs(n: int, seed: int = 0, depth: int = 20, pool: int = 200):
    """n ranked lists of `depth` ids and their qrels (1-4 relevant ids, grades 1-3, some none)."""
    rnd = random.Random(seed)
    ids = [f"c{i}" for i in range(pool)]
    runs, qrels = [], []
    for i in range(n):
        runs.append(rnd.sample(ids, depth))
        rel = {} if i % 10 == 0 else {d: rnd.randint(1, 3) for d in rnd.sample(ids[:40], rnd.randint(1, 4))}
        qrels.append(rel)
    return runs, qrels


def _vectorised(runs, qrels) -> tuple[dict[str, float], float]:
    t0 = time.perf_counter()
    m = rm.relevance_matrix(runs, qrels, max(KS))
    build = time.perf_counter() - t0
    out: dict[str, float] = {"mrr": float(np.nanmean(rm.mrr(m)))}
    for k in KS:
        out[f"p@{k}"] = float(np.nanmean(rm.precision_at_k(m, k)))
        out[f"r@{k}"] = float(np.nanmean(rm.recall_at_k(m, k)))
        out[f"hit@{k}"] = float(np.nanmean(rm.hit_at_k(m, k)))
        out[f"ndcg@{k}"] = float(np.nanmean(rm.ndcg_at_k(m, k)))
        out[f"map@{k}"] = float(np.nanmean(rm.map_at_k(m, k)))
        out[f"cp@{k}"] = float(np.nanmean(rm.context_precision_at_k(m, k)))
    return out, build


def _loop(runs, qrels) -> dict[str, float]:
    out: dict[str, float] = {"mrr": float(np.nanmean([rm.item_mrr(r[: max(KS)], q) for r, q in zip(runs, qrels)]))}
    for k in KS:
        for name, fn in (
            ("p", rm.item_precision),
            ("r", rm.item_recall),
            ("hit", rm.item_hit),
            ("ndcg", rm.item_ndcg),
            ("map", rm.item_map),
            ("cp", rm.item_context_precision),
        ):
            out[f"{name}@{k}"] = float(np.nanmean([fn(r, q, k) for r, q in zip(runs, qrels)]))
    return out


def run(n: int = 100_000, seed: int = 0) -> BenchResult:
    """Time both forms on n synthetic items; ValueError if they disagree."""
    runs, qrels = synthetic_runs(n, seed)
    t0 = time.perf_counter()
    vec, build = _vectorised(runs, qrels)
    vector_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    loop = _loop(runs, qrels)
    loop_s = time.perf_counter() - t0
    bad = [k for k in vec if abs(vec[k] - loop[k]) > 1e-9]
    if bad:
        raise ValueError(f"vectorised and loop metrics disagree on {bad}")
    return BenchResult(n, build, vector_s, loop_s)
