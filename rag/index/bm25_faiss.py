"""The two parts an index folder holds: BM25 (bm25s) over chunk tokens and dense vectors (FAISS)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from lorarag.core.errors import ConfigError
from lorarag.rag.config import BM25Config, DenseIndexConfig
from lorarag.rag.index.folder import IndexMismatch
from lorarag.rag.index.textsplit import tokenize

log = logging.getLogger(__name__)


def top_k(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices and values of the k best scores, ties broken by lower index (deterministic)."""
    n = scores.shape[0]
    k = min(k, n)
    if k <= 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
    if k < n:
        part = np.argpartition(-scores, k - 1)[:k]
        cand = np.flatnonzero(scores >= scores[part].min())  # all ties at the boundary
    else:
        cand = np.arange(n)
    order = cand[np.lexsort((cand, -scores[cand]))][:k]
    return order, scores[order]


class BM25Part:
    """A bm25s index plus the tokenizer it was built with."""

    def __init__(self, model, cfg: BM25Config) -> None:
        self.model = model
        self.cfg = cfg

    @classmethod
    def build(cls, texts: list[str], cfg: BM25Config) -> BM25Part:
        """Tokenise and index `texts` (row i = chunk i)."""
        import bm25s

        logging.getLogger("bm25s").setLevel(logging.WARNING)  # it logs every build at DEBUG
        model = bm25s.BM25(k1=cfg.k1, b=cfg.b)
        model.index(tokenize(texts, cfg.tokenizer), show_progress=False)
        return cls(model, cfg)

    def save(self, folder: Path) -> None:
        self.model.save(str(folder), show_progress=False)

    @classmethod
    def load(cls, folder: Path, cfg: BM25Config) -> BM25Part:
        """The saved index; IndexMismatch (one line) when its files are missing or corrupt."""
        import bm25s

        try:
            model = bm25s.BM25.load(str(folder), show_progress=False)
            ids = list(model.vocab_dict.values())
            if any(type(i) is not int for i in ids) or sorted(ids) != list(range(len(ids))):
                raise ValueError("vocabulary ids are not 0..n-1")
        except (OSError, ValueError, KeyError, TypeError, AttributeError, EOFError) as exc:
            raise IndexMismatch(
                f"{folder}: unreadable BM25 index ({type(exc).__name__}: {str(exc)[:80]}); "
                "rebuild with `lorarag index <config>`"
            ) from None
        return cls(model, cfg)

    def search(self, queries: list[str], depth: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per query: (chunk rows, scores) of the best `depth` chunks with a positive score."""
        out = []
        for toks in tokenize(queries, self.cfg.tokenizer):
            known = [t for t in toks if t in self.model.vocab_dict]
            if not known:
                out.append((np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)))
                continue
            idx, val = top_k(self.model.get_scores(known), depth)
            keep = val > 0  # no shared term: not a match
            out.append((idx[keep], val[keep]))
        return out


def _gpu_wanted(cfg: DenseIndexConfig):
    import faiss

    has_gpu = hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0
    if cfg.gpu == "always" and not has_gpu:
        raise ConfigError("index.dense.gpu=always but faiss-gpu or a GPU is missing")
    return has_gpu and cfg.gpu != "never" and cfg.kind != "hnsw"  # no GPU HNSW in FAISS


class DensePart:
    """A FAISS inner-product index over unit vectors (cosine)."""

    FILE = "dense.faiss"

    def __init__(self, index, cfg: DenseIndexConfig) -> None:
        self.cfg = cfg
        self.dimension = index.d
        self.cpu_index = index  # what is saved
        self.index = index  # what is searched: a GPU copy when available
        self._configure(index)
        if _gpu_wanted(cfg):
            import faiss

            self._res = faiss.StandardGpuResources()
            self.index = faiss.index_cpu_to_gpu(self._res, 0, index)

    def _configure(self, index) -> None:
        import faiss

        if self.cfg.kind == "hnsw":
            index.hnsw.efSearch = self.cfg.hnsw_ef_search
        elif self.cfg.kind == "ivf":
            faiss.extract_index_ivf(index).nprobe = self.cfg.ivf_nprobe

    @classmethod
    def build(cls, vectors: np.ndarray, cfg: DenseIndexConfig) -> DensePart:
        """Index float32 [n, d] unit vectors with the FAISS kind of `cfg`."""
        import faiss

        n, d = vectors.shape
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if cfg.kind == "flat":
            index = faiss.IndexFlatIP(d)
        elif cfg.kind == "hnsw":
            index = faiss.IndexHNSWFlat(d, cfg.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        else:
            nlist = max(1, min(cfg.ivf_nlist, n // 39 or 1))  # FAISS wants >= 39 points per list
            if nlist != cfg.ivf_nlist:
                log.warning("ivf_nlist %d -> %d for %d vectors", cfg.ivf_nlist, nlist, n)
            index = faiss.IndexIVFFlat(faiss.IndexFlatIP(d), d, nlist, faiss.METRIC_INNER_PRODUCT)
            index.train(vectors)
        index.add(vectors)
        return cls(index, cfg)

    @property
    def ntotal(self) -> int:
        return int(self.index.ntotal)

    def save(self, path: Path) -> None:
        import faiss

        faiss.write_index(self.cpu_index, str(path))

    def publish(self) -> None:
        """Nothing to do: the FAISS file moves with its index folder."""

    @classmethod
    def load(cls, path: Path, cfg: DenseIndexConfig) -> DensePart:
        """The saved FAISS index; IndexMismatch (one line) when it is missing or corrupt."""
        import faiss

        try:
            index = faiss.read_index(str(path))
        except RuntimeError as exc:  # FAISS reports every read problem as RuntimeError
            first = str(exc).strip().splitlines()[-1][:80] if str(exc).strip() else "unreadable"
            raise IndexMismatch(f"{path}: unreadable FAISS index ({first}); rebuild with `lorarag index <config>`") from None
        return cls(index, cfg)

    def search(self, vectors: np.ndarray, depth: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per query vector: (chunk rows, cosine scores), best first, ties by lower row."""
        depth = min(depth, self.index.ntotal)
        scores, ids = self.index.search(np.ascontiguousarray(vectors, dtype=np.float32), depth)
        out = []
        for s, i in zip(scores, ids):
            keep = i >= 0  # HNSW/IVF may return fewer than depth
            s, i = s[keep], i[keep].astype(np.int64)
            order = np.lexsort((i, -s))
            out.append((i[order], s[order]))
        return out
