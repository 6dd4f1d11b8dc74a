"""`lorarag bench speed`: index build time and queries/s for BM25 and FAISS on >= 100k chunks,
beside the original write-up's per-question cost on the same corpus.

The original approach re-read the whole corpus from disk and re-fitted a TF-IDF vectoriser on
every question, then ranked by cosine. We time a few questions of that (sklearn
TfidfVectorizer + linear_kernel over the same chunk files) and compare its seconds/question
with our persistent BM25 index (rag.index + rag.retrieve, the product path). The ratio is the
speed-up per question.

Corpus: seeded synthetic chunks of 40-80 Zipf-distributed pseudo-words, written as Markdown
files (one paragraph per chunk), so both systems read identical text. FAISS is timed on seeded
clustered unit vectors (d=384): it measures the index, not an embedding model.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import numpy as np

from lorarag.rag.config import BM25Config, DenseIndexConfig, IndexConfig, RetrievalConfig
from lorarag.rag.index.bm25_faiss import DensePart
from lorarag.rag.index.store import build_from_chunks
from lorarag.rag.records import Chunk
from lorarag.rag.retrieve import load_retriever

SEED = 0
CHUNKS_PER_FILE = 1000


def make_corpus(n_chunks: int, seed: int = SEED) -> list[str]:
    """n_chunks texts of 40-80 words drawn from a 30k-word Zipf vocabulary."""
    rng = np.random.default_rng(seed)
    syll = np.array(["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "pa", "qu", "de", "fi", "go", "ha", "ju"])
    vocab = np.array(["".join(rng.choice(syll, size=rng.integers(2, 5))) + str(i % 7) for i in range(30_000)])
    probs = 1.0 / np.arange(1, len(vocab) + 1) ** 1.07
    probs /= probs.sum()
    lengths = rng.integers(40, 81, size=n_chunks)
    words = rng.choice(len(vocab), size=int(lengths.sum()), p=probs)
    out, pos = [], 0
    for n in lengths:
        out.append(" ".join(vocab[words[pos : pos + n]]))
        pos += n
    return out


def make_queries(texts: list[str], n: int, seed: int = SEED + 1) -> list[str]:
    """Questions made of 5 consecutive words of random chunks."""
    rng = np.random.default_rng(seed)
    out = []
    for i in rng.integers(0, len(texts), size=n):
        w = texts[i].split()
        j = rng.integers(0, len(w) - 5)
        out.append(" ".join(w[j : j + 5]))
    return out


def write_files(texts: list[str], folder: Path) -> list[Path]:
    """The corpus as Markdown files of CHUNKS_PER_FILE paragraphs each."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for f, i in enumerate(range(0, len(texts), CHUNKS_PER_FILE)):
        p = folder / f"doc{f:04d}.md"
        p.write_text("\n\n".join(texts[i : i + CHUNKS_PER_FILE]) + "\n", encoding="utf-8")
        paths.append(p)
    return paths


def original_per_question(files: list[Path], question: str, k: int = 5) -> list[int]:
    """The original write-up's loop body: read everything, fit TF-IDF, rank by cosine."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.metrics.pairwise import linear_kernel

    chunks = [p for f in files for p in f.read_text(encoding="utf-8").split("\n\n") if p.strip()]
    vec = TfidfVectorizer()
    matrix = vec.fit_transform(chunks)
    sims = linear_kernel(vec.transform([question]), matrix)[0]
    return np.argsort(-sims, kind="stable")[:k].tolist()


def clustered_vectors(n: int, d: int, n_clusters: int = 256, seed: int = SEED) -> np.ndarray:
    """Unit vectors around random centres (HNSW/IVF behave as on real embeddings)."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((n_clusters, d)).astype(np.float32)
    x = centres[rng.integers(0, n_clusters, size=n)] + 0.5 * rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def run(n_chunks: int, n_queries: int, baseline_queries: int, dim: int, out: Path) -> dict:
    """Time both systems, print the table and the ratio, write JSON."""

    texts = make_corpus(n_chunks)
    queries = make_queries(texts, n_queries)
    res: dict = {"n_chunks": n_chunks, "n_queries": n_queries, "dim": dim}
    with tempfile.TemporaryDirectory(prefix="lorarag-speed-") as tmp:
        files = write_files(texts, Path(tmp) / "corpus")
        chunks = [
            Chunk(chunk_id=f"c{i}", doc_id="gen", source="gen", text=t, start=0, end=len(t)) for i, t in enumerate(texts)
        ]
        icfg = IndexConfig(dir=f"{tmp}/idx", bm25=BM25Config(tokenizer="auto"))
        _, res["bm25_build_s"] = _timed(lambda: build_from_chunks(chunks, icfg))
        retriever, res["bm25_load_s"] = _timed(lambda: load_retriever(icfg, RetrievalConfig()))
        hits, secs = _timed(lambda: retriever.retrieve(queries, 10))
        res["bm25_queries_per_s"] = n_queries / secs
        found = sum(any(q in h.chunk.text for h in hs[:10]) for q, hs in zip(queries, hits))
        res["bm25_found_in_top10"] = found / n_queries  # sanity: the query's own chunk is found

        per_q = []
        for q in queries[:baseline_queries]:
            _, s = _timed(lambda q=q: original_per_question(files, q))
            per_q.append(s)
        res["original_s_per_query"] = float(np.mean(per_q))
        res["ours_s_per_query"] = secs / n_queries
        res["speedup_per_query"] = res["original_s_per_query"] / res["ours_s_per_query"]

    vecs = clustered_vectors(n_chunks, dim)
    qvecs = clustered_vectors(n_queries, dim, seed=SEED + 2)
    for kind in ("flat", "hnsw"):
        part, res[f"faiss_{kind}_build_s"] = _timed(lambda kind=kind: DensePart.build(vecs, DenseIndexConfig(kind=kind)))
        _, s = _timed(lambda part=part: part.search(qvecs, 10))
        res[f"faiss_{kind}_queries_per_s"] = n_queries / s
    _print(res)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1), encoding="utf-8")
    print(f"results: {out}")
    return res


def _print(r: dict) -> None:
    n = f"{r['n_chunks']:,} chunks"
    print(f"{'system':44} {'build s':>9} {'queries/s':>11} {'s/query':>10}")
    print(
        f"{'BM25 index (bm25s, ' + n + ')':44} {r['bm25_build_s']:9.2f} "
        f"{r['bm25_queries_per_s']:11.1f} {r['ours_s_per_query']:10.5f}"
    )
    for kind in ("flat", "hnsw"):
        label = f"FAISS {kind} ({n}, d={r['dim']})"
        print(
            f"{label:44} {r[f'faiss_{kind}_build_s']:9.2f} "
            f"{r[f'faiss_{kind}_queries_per_s']:11.1f} {1 / r[f'faiss_{kind}_queries_per_s']:10.5f}"
        )
    print(
        f"{'original: re-read + re-fit TF-IDF per query':44} {'':>9} "
        f"{1 / r['original_s_per_query']:11.3f} {r['original_s_per_query']:10.3f}"
    )
    print(
        f"speed-up per query, BM25 index vs original: {r['speedup_per_query']:,.0f}x "
        f"(BM25 found the query's source chunk in the top 10 for "
        f"{100 * r['bm25_found_in_top10']:.1f}% of queries)"
    )
