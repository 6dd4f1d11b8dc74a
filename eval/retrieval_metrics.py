"""Ranked-retrieval metrics with trec_eval's definitions, vectorised over many queries.

Two forms of every metric: a vectorised one over a `RelMatrix` (numpy, one row per query) and a
simple per-item one over (ranked ids, qrels) used as the readable reference and by the bench.

Conventions (each equal to trec_eval 9.x as exposed by pytrec_eval; tests check both forms):
- Relevance: a document is relevant when its qrels grade is >= 1 (trec_eval `-l 1`); grades are
  the gains of nDCG (linear gain, trec_eval `ndcg_cut`, not Burges' 2^g - 1).
- Fewer than K results: missing ranks count as non-relevant; P@K still divides by K
  (trec_eval `P_k`), never by the number returned.
- Recall@K and MAP@K divide by the number of relevant documents in the qrels, not by
  min(K, num_rel) (trec_eval `recall_k`, `map_cut_k`).
- nDCG@K: DCG = sum_i g_i / log2(i + 1) over ranks i = 1..K; the ideal DCG sorts all qrels
  grades (not only retrieved ones) descending and cuts at K.
- MRR: 1 / rank of the first relevant document, 0 when none is retrieved (trec_eval
  `recip_rank`, no cutoff unless `k` is given).
- Queries with no relevant document: trec_eval scores a query judged with no relevant document
  as 0 and skips a query absent from the qrels. An item without any relevant chunk id is
  absent from our qrels, so its value is NaN and `nanmean` skips it (`no_relevant="zero"`
  gives trec_eval's judged-but-none-relevant 0 instead).
- Ties: the input is a ranked list; `rank_by_score` orders a scored run as trec_eval does
  (score descending, then document id descending). A document repeated in a ranked list counts
  once, at its first rank.
- RAGAS Context Precision@K = sum_{k<=K} P@k * rel_k / (number of relevant in the top K), 0 when
  none of the top K is relevant. Relevance 1,1,0,1,0 gives (1 + 1 + 3/4) / 3 = 0.9167 (the
  original write-up's 0.75 is an arithmetic slip). Context Recall (RAGAS id-based form) =
  |given ∩ relevant| / |relevant|, i.e. recall over the whole given list.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

NoRelevant = Literal["nan", "zero"]


@dataclass(frozen=True)
class RelMatrix:
    """Relevance of ranked lists: `gains` (Q, K) grade at each rank (0 = not relevant or no
    document), `n_rel` (Q,) relevant documents in the qrels, `ideal` (Q, K) qrels grades sorted
    descending (zero padded)."""

    gains: np.ndarray
    n_rel: np.ndarray
    ideal: np.ndarray

    @property
    def depth(self) -> int:
        """K: the number of ranks held."""
        return int(self.gains.shape[1])


def rank_by_score(scores: Mapping[str, float]) -> list[str]:
    """Document ids ranked as trec_eval does: score descending, ties by id descending."""
    return [d for d, _ in sorted(scores.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)]


def _dedupe(ranked: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(ranked))  # first occurrence kept, order preserved


def relevance_matrix(runs: Sequence[Sequence[str]], qrels: Sequence[Mapping[str, int]], depth: int) -> RelMatrix:
    """Build the (Q, depth) relevance matrix of ranked lists against graded qrels."""
    if len(runs) != len(qrels):
        raise ValueError(f"{len(runs)} ranked lists but {len(qrels)} qrels")
    if depth < 1:
        raise ValueError("depth must be >= 1")
    q = len(runs)
    gains = np.zeros((q, depth), dtype=np.float64)
    ideal = np.zeros((q, depth), dtype=np.float64)
    n_rel = np.zeros(q, dtype=np.int64)
    for i, (ranked, rel) in enumerate(zip(runs, qrels)):
        if not rel:  # no judged document: the row stays zero (n_rel 0 -> NaN)
            continue
        row = [rel.get(d, 0) for d in _dedupe(ranked)[:depth]]
        gains[i, : len(row)] = row
        grades = sorted((g for g in rel.values() if g > 0), reverse=True)
        n_rel[i] = len(grades)
        ideal[i, : min(depth, len(grades))] = grades[:depth]
    return RelMatrix(np.maximum(gains, 0.0), n_rel, ideal)


def _cut(m: RelMatrix, k: int | None) -> int:
    k = m.depth if k is None else k
    if k < 1 or k > m.depth:
        raise ValueError(f"k={k} outside 1..{m.depth} (build the matrix deeper)")
    return k


def _finish(values: np.ndarray, m: RelMatrix, no_relevant: NoRelevant) -> np.ndarray:
    empty = m.n_rel == 0
    values = np.where(empty, np.nan if no_relevant == "nan" else 0.0, values)
    return values


def precision_at_k(m: RelMatrix, k: int, no_relevant: NoRelevant = "nan") -> np.ndarray:
    """P@K per query: relevant in the top K / K."""
    k = _cut(m, k)
    return _finish((m.gains[:, :k] > 0).sum(1) / k, m, no_relevant)


def recall_at_k(m: RelMatrix, k: int, no_relevant: NoRelevant = "nan") -> np.ndarray:
    """Recall@K per query: relevant in the top K / relevant in the qrels."""
    k = _cut(m, k)
    hits = (m.gains[:, :k] > 0).sum(1)
    return _finish(hits / np.maximum(m.n_rel, 1), m, no_relevant)


def hit_at_k(m: RelMatrix, k: int, no_relevant: NoRelevant = "nan") -> np.ndarray:
    """Hit@K (trec_eval success_K): 1 when any of the top K is relevant."""
    k = _cut(m, k)
    return _finish((m.gains[:, :k] > 0).any(1).astype(np.float64), m, no_relevant)


def mrr(m: RelMatrix, k: int | None = None, no_relevant: NoRelevant = "nan") -> np.ndarray:
    """Reciprocal rank of the first relevant document within the top k (0 if none)."""
    k = _cut(m, k)
    rel = m.gains[:, :k] > 0
    first = rel.argmax(1)
    return _finish(np.where(rel.any(1), 1.0 / (first + 1), 0.0), m, no_relevant)


def _discounts(k: int) -> np.ndarray:
    return 1.0 / np.log2(np.arange(2, k + 2, dtype=np.float64))  # rank i -> 1/log2(i+1)


def ndcg_at_k(m: RelMatrix, k: int, no_relevant: NoRelevant = "nan") -> np.ndarray:
    """nDCG@K with linear graded gains (trec_eval ndcg_cut_K)."""
    k = _cut(m, k)
    disc = _discounts(k)
    dcg = m.gains[:, :k] @ disc
    idcg = m.ideal[:, :k] @ disc
    return _finish(dcg / np.where(idcg > 0, idcg, 1.0), m, no_relevant)


def _prec_at_each_rank(rel: np.ndarray) -> np.ndarray:
    return np.cumsum(rel, 1) / np.arange(1, rel.shape[1] + 1)


def map_at_k(m: RelMatrix, k: int, no_relevant: NoRelevant = "nan") -> np.ndarray:
    """Average precision cut at K (trec_eval map_cut_K): sum of P@rank of relevant / num_rel."""
    k = _cut(m, k)
    rel = (m.gains[:, :k] > 0).astype(np.float64)
    ap = (_prec_at_each_rank(rel) * rel).sum(1) / np.maximum(m.n_rel, 1)
    return _finish(ap, m, no_relevant)


def context_precision_at_k(m: RelMatrix, k: int, no_relevant: NoRelevant = "nan") -> np.ndarray:
    """RAGAS Context Precision@K: sum P@k * rel_k / relevant-in-top-K (0 if none)."""
    k = _cut(m, k)
    rel = (m.gains[:, :k] > 0).astype(np.float64)
    n = rel.sum(1)
    cp = (_prec_at_each_rank(rel) * rel).sum(1) / np.maximum(n, 1)
    return _finish(cp, m, no_relevant)


def context_recall(m: RelMatrix, no_relevant: NoRelevant = "nan") -> np.ndarray:
    """RAGAS id-based Context Recall: relevant among all given / relevant in the qrels."""
    return recall_at_k(m, m.depth, no_relevant)


# --------------------------------------------------------------------------------------
# Per-item reference forms (plain Python; same conventions, NaN without relevant docs).
# --------------------------------------------------------------------------------------


def _rels(ranked: Sequence[str], qrels: Mapping[str, int], k: int) -> list[int]:
    return [1 if qrels.get(d, 0) > 0 else 0 for d in _dedupe(ranked)[:k]]


def _nrel(qrels: Mapping[str, int]) -> int:
    return sum(1 for g in qrels.values() if g > 0)


def item_precision(ranked: Sequence[str], qrels: Mapping[str, int], k: int) -> float:
    """P@K of one ranked list."""
    return sum(_rels(ranked, qrels, k)) / k if _nrel(qrels) else math.nan


def item_recall(ranked: Sequence[str], qrels: Mapping[str, int], k: int) -> float:
    """Recall@K of one ranked list."""
    n = _nrel(qrels)
    return sum(_rels(ranked, qrels, k)) / n if n else math.nan


def item_hit(ranked: Sequence[str], qrels: Mapping[str, int], k: int) -> float:
    """Hit@K of one ranked list."""
    return float(any(_rels(ranked, qrels, k))) if _nrel(qrels) else math.nan


def item_mrr(ranked: Sequence[str], qrels: Mapping[str, int], k: int | None = None) -> float:
    """Reciprocal rank of one ranked list."""
    if not _nrel(qrels):
        return math.nan
    for i, r in enumerate(_rels(ranked, qrels, k or len(ranked)), 1):
        if r:
            return 1.0 / i
    return 0.0


def item_ndcg(ranked: Sequence[str], qrels: Mapping[str, int], k: int) -> float:
    """nDCG@K (linear gain) of one ranked list."""
    if not _nrel(qrels):
        return math.nan
    dcg = sum(max(qrels.get(d, 0), 0) / math.log2(i + 1) for i, d in enumerate(_dedupe(ranked)[:k], 1))
    grades = sorted((g for g in qrels.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 1) for i, g in enumerate(grades, 1))
    return dcg / idcg


def item_map(ranked: Sequence[str], qrels: Mapping[str, int], k: int) -> float:
    """Average precision cut at K of one ranked list."""
    n = _nrel(qrels)
    if not n:
        return math.nan
    hits, total = 0, 0.0
    for i, r in enumerate(_rels(ranked, qrels, k), 1):
        if r:
            hits += 1
            total += hits / i
    return total / n


def item_context_precision(ranked: Sequence[str], qrels: Mapping[str, int], k: int) -> float:
    """RAGAS Context Precision@K of one ranked list."""
    if not _nrel(qrels):
        return math.nan
    rels = _rels(ranked, qrels, k)
    hits, total = 0, 0.0
    for i, r in enumerate(rels, 1):
        if r:
            hits += 1
            total += hits / i
    return total / hits if hits else 0.0


def item_context_recall(ranked: Sequence[str], qrels: Mapping[str, int]) -> float:
    """RAGAS id-based Context Recall of one given list."""
    return item_recall(ranked, qrels, max(len(ranked), 1))


# --------------------------------------------------------------------------------------
# Over evaluation records.
# --------------------------------------------------------------------------------------


def retrieval_summary(
    runs: Sequence[Sequence[str]], qrels: Sequence[Mapping[str, int]], ks: Sequence[int] = (1, 3, 5, 10)
) -> dict[str, float]:
    """Mean of every metric at every K over queries with a relevant document (n = count)."""
    if not runs:
        return {"n": 0}
    depth = max(max(ks), max((len(r) for r in runs), default=1), 1)
    m = relevance_matrix(runs, qrels, depth)
    out: dict[str, float] = {"n": int(np.sum(m.n_rel > 0))}
    if out["n"] == 0:
        return out
    for k in ks:
        for name, fn in (
            ("recall", recall_at_k),
            ("precision", precision_at_k),
            ("hit", hit_at_k),
            ("ndcg", ndcg_at_k),
            ("map", map_at_k),
            ("context_precision", context_precision_at_k),
        ):
            out[f"{name}@{k}"] = float(np.nanmean(fn(m, k)))
    out["mrr"] = float(np.nanmean(mrr(m)))
    out["context_recall"] = float(np.nanmean(context_recall(m)))
    return out


def items_summary(
    items, stage: Literal["retrieved", "final"] = "retrieved", ks: Sequence[int] = (1, 3, 5, 10)
) -> dict[str, float]:
    """Retrieval metrics of ItemResults at one stage, relevance = the item's `target_ids`.

    Items with no retrieval at all (closed-book: no retrieved and no final ids) are left out; in
    presented-context mode (no separate top-N stage) the `retrieved` stage is the final list.
    """
    items = [r for r in items if r.retrieved_ids or r.final_ids]
    runs = [(r.retrieved_ids or r.final_ids) if stage == "retrieved" else r.final_ids for r in items]
    qrels = [{t: 1 for t in r.target_ids} for r in items]
    return retrieval_summary(runs, qrels, ks)
