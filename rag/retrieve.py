"""Retrieval over a loaded index: BM25, dense (FAISS), or hybrid by reciprocal-rank fusion.

Batch API: `Retriever.retrieve(queries, k) -> list[list[Retrieved]]`, one ranked list per
query, ranks 1-based. Ties are broken by the chunk's row in chunks.jsonl (corpus order), so
the same index and query give the same ranking on every run.

Hybrid: each list contributes 1 / (rrf_k + rank) for every chunk in its top `FUSION_DEPTH`
(Cormack et al., 2009); the fused score is the sum.
"""

from __future__ import annotations

import logging

import numpy as np

from lorarag.rag.config import EmbedderConfig, IndexConfig, RetrievalConfig
from lorarag.rag.embed import make_embedder
from lorarag.rag.index.store import Index, IndexMismatch, open_index
from lorarag.rag.records import Retrieved

log = logging.getLogger(__name__)

FUSION_DEPTH = 100  # candidates per list fused by RRF

Ranked = tuple[np.ndarray, np.ndarray]  # (chunk rows, scores), best first


def rrf_fuse(lists: list[Ranked], rrf_k: int, k: int) -> Ranked:
    """Reciprocal-rank fusion of ranked lists; ties broken by lower chunk row."""
    fused: dict[int, float] = {}
    for rows, _ in lists:
        for rank, row in enumerate(rows.tolist(), 1):
            fused[row] = fused.get(row, 0.0) + 1.0 / (rrf_k + rank)
    items = sorted(fused.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
    return (np.array([r for r, _ in items], dtype=np.int64), np.array([s for _, s in items], dtype=np.float64))


class Retriever:
    """Ranks the chunks of one index for a batch of queries."""

    def __init__(self, index: Index, mode: str = "bm25", embedder=None, rrf_k: int = 60) -> None:
        if mode in ("bm25", "hybrid") and index.bm25 is None:
            raise IndexMismatch(f"retrieval mode {mode} needs a BM25 index")
        if mode in ("dense", "hybrid") and (index.dense is None or embedder is None):
            raise IndexMismatch(f"retrieval mode {mode} needs a dense index and an embedder")
        if mode not in ("bm25", "dense", "hybrid"):
            raise ValueError(f"unknown retrieval mode {mode!r}")
        self.index = index
        self.mode = mode
        self.embedder = embedder
        self.rrf_k = rrf_k

    @property
    def chunks(self):
        """The indexed chunks, in row order."""
        return self.index.chunks

    def _dense(self, queries: list[str], depth: int) -> list[Ranked]:
        vecs = self.embedder.embed_queries(queries)
        if vecs.shape[1] != self.index.dense.dimension:
            raise IndexMismatch(
                f"embedder gives {vecs.shape[1]}-d vectors, the index holds "
                f"{self.index.dense.dimension}-d ones; rebuild with `lorarag index`"
            )
        return self.index.dense.search(vecs, depth)

    def rank(self, queries: list[str], k: int) -> list[Ranked]:
        """Per query: (chunk rows, scores) of the top k, for callers that work with rows."""
        if self.mode == "bm25":
            return self.index.bm25.search(queries, k)
        if self.mode == "dense":
            return self._dense(queries, k)
        depth = max(k, FUSION_DEPTH)
        sparse = self.index.bm25.search(queries, depth)
        dense = self._dense(queries, depth)
        return [rrf_fuse([s, d], self.rrf_k, k) for s, d in zip(sparse, dense)]

    def retrieve(self, queries: list[str], k: int) -> list[list[Retrieved]]:
        """The top-k chunks for each query, as Retrieved records (rank 1 = best)."""
        if k <= 0:
            raise ValueError(f"k must be positive, got {k}")
        if not queries:
            return []
        out = []
        for rows, scores in self.rank(list(queries), k):
            out.append(
                [
                    Retrieved(chunk=self.index.chunks[r], score=float(s), rank=i, stage=self.mode)
                    for i, (r, s) in enumerate(zip(rows.tolist(), scores.tolist()), 1)
                ]
            )
        return out


def load_retriever(
    index_cfg: IndexConfig, retrieval_cfg: RetrievalConfig, embedder_cfg: EmbedderConfig | None = None, *, embedder=None
) -> Retriever:
    """Open the index of `index_cfg` and build the retriever `retrieval_cfg.mode` asks for."""
    dense_needed = retrieval_cfg.mode in ("dense", "hybrid")
    if dense_needed and (index_cfg.dense is None or (embedder_cfg is None and embedder is None)):
        raise IndexMismatch(
            f"retrieval mode {retrieval_cfg.mode} needs a dense index (index.dense) and an "
            f"`embedder`; {index_cfg.dir} is configured without "
            + ("index.dense" if index_cfg.dense is None else "an embedder")
        )
    if not dense_needed:  # a BM25 search never loads the FAISS part or an embedding model
        index_cfg = index_cfg.model_copy(update={"dense": None})
    index = open_index(index_cfg, embedder_cfg if dense_needed else None)
    if dense_needed and embedder is None:
        embedder = make_embedder(embedder_cfg)
    return Retriever(index, retrieval_cfg.mode, embedder=embedder, rrf_k=index_cfg.rrf_k)
