"""`lorarag bench scale`: the engines beyond one process, as ratios measured in one run.

(a) Dense index: Milvus Lite (FLAT and HNSW) against FAISS (flat and HNSW) on N unit vectors of
    dimension D drawn around 1,000 cluster centres (uniform random vectors make every ANN index look
    bad: their nearest neighbours are barely nearer than the rest). Per engine: build seconds,
    batched queries/s (1,000 queries, top 10), and recall@10 against exact search (FAISS flat).
(b) Sharded evaluation: the same scenario set through `eval.runner.run_eval` in one process, and in
    N shard processes started at once (eval/shards.py partition, then the checked merge); items/s
    of each and whether the merged rows equal the one-process rows item for item (latency aside).
    The system is the base RAG prompt on a tiny Qwen3 over the BM25 index of the demo world (written
    as a knowledge base, bench/demo_kb.py): what is measured is the sharding, not the model.
Results go to `--out` as JSON and are printed with the ratios.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from lorarag.rag.config import DenseIndexConfig
from lorarag.rag.index.bm25_faiss import DensePart
from lorarag.rag.index.milvus import MilvusPart
from lorarag.rag.records import Chunk

Echo = Callable[[str], None]


def clustered(n: int, d: int, seed: int, centres: int = 1000) -> np.ndarray:
    """`n` unit vectors in `d` dimensions, each a cluster centre plus noise (float32)."""
    rng = np.random.default_rng(seed)
    c = rng.standard_normal((centres, d)).astype(np.float32)
    x = c[rng.integers(0, centres, n)] + 0.35 * rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _recall(truth: list, got: list, k: int = 10) -> float:
    return float(np.mean([len(set(t[0][:k].tolist()) & set(g[0][:k].tolist())) / k for t, g in zip(truth, got)]))


def bench_index(n: int, d: int, work: Path, echo: Echo) -> dict:
    """(a) for one size."""
    vecs, queries = clustered(n, d, seed=0), clustered(1000, d, seed=1)
    chunks = [Chunk(f"c{i}", f"d{i // 10}", f"doc{i // 10}.md", "", 0, 0) for i in range(n)]
    out: dict = {"n": n, "dim": d}
    truth = None
    engines = [
        ("faiss_flat", DenseIndexConfig(kind="flat")),
        ("faiss_hnsw", DenseIndexConfig(kind="hnsw")),
        ("milvus_flat", DenseIndexConfig(kind="milvus", milvus_index="FLAT", milvus_uri=str(work / f"m{n}.db"))),
        (
            "milvus_hnsw",
            DenseIndexConfig(
                kind="milvus", milvus_index="HNSW", milvus_uri=str(work / f"m{n}.db"), milvus_collection="hnsw"
            ),
        ),
    ]
    for name, cfg in engines:
        t0 = time.perf_counter()
        part = (
            MilvusPart.build(vecs, cfg, chunks=chunks, index_dir=work / f"i{n}")
            if cfg.kind == "milvus"
            else DensePart.build(vecs, cfg)
        )
        if cfg.kind == "milvus":
            part.publish()
        build = time.perf_counter() - t0
        t0 = time.perf_counter()
        hits = part.search(queries, 10)
        qps = len(queries) / (time.perf_counter() - t0)
        truth = hits if truth is None else truth
        out[name] = {"build_s": build, "queries_per_s": qps, "recall@10": _recall(truth, hits)}
        echo(
            f"  {n:>9,} x {d}: {name:<12} build {build:7.1f} s   {qps:9.0f} queries/s   "
            f"recall@10 {out[name]['recall@10']:.3f}"
        )
    return out


_SHARD_CODE = """
import sys
from lorarag.bench.scale import shard_worker
shard_worker(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
"""


def _eval_setup(work: Path, *, write: bool = False):
    """The scenario set and a base-RAG system on a tiny Qwen3 (built once under `work`): ci-tiny's
    world written as a knowledge base, split by fact as a run splits it, and the test scenarios of
    its known and never-learned facts (every scenario type). `write`: write the world's files (the
    first call, before the shard processes, which read them)."""
    from lorarag.bench.demo_kb import load_world_kb
    from lorarag.core.config import load_config
    from lorarag.core.paths import packaged_config
    from lorarag.eval.systems import build_system
    from lorarag.scenarios.from_corpus import corpus_scenarios
    from lorarag.scenarios.kb_splits import split_by_fact
    from lorarag.study.prepare import index_chunks
    from lorarag.testing.tiny import build_causal_lm
    from lorarag.trained.components import build_parts
    from lorarag.trained.config import RunConfig, SystemConfig

    cfg = load_config(packaged_config("run/ci-tiny.yaml"), RunConfig)
    model = work / "tiny-qwen3"
    if not (model / "config.json").is_file():
        build_causal_lm(model)
    cfg = cfg.model_copy(
        update={
            "rag": cfg.rag.model_copy(
                update={
                    "generator": cfg.rag.generator.model_copy(update={"model": str(model)}),
                    "index": cfg.rag.index.model_copy(update={"dir": str(work / "index")}),
                }
            )
        }
    )
    assert cfg.data.world is not None  # ci-tiny is a world config
    kb = load_world_kb(cfg.data.world, cfg.rag.chunker, work / "world", write=write)
    groups = split_by_fact(kb.items, cfg.data.splits)
    items = [
        s
        for group, knowledge in (("known", "known"), ("unseen", "unknown"))
        for s in corpus_scenarios(
            groups[group], list(kb.corpus.chunks), name="kb", knowledge=knowledge, seed=0, outdated=kb.outdated
        )
    ]
    retriever = (
        index_chunks(cfg, list(kb.corpus.chunks), len(kb.corpus.documents), cfg.rag.index)
        if not (work / "index" / "manifest.json").is_file()
        else None
    )
    if retriever is None:
        from lorarag.rag.retrieve import load_retriever

        retriever = load_retriever(cfg.rag.index, cfg.rag.retrieval)
    parts = build_parts(cfg, retriever, None, list(kb.corpus.chunks))
    system = build_system(SystemConfig(name="base_rag", kind="base_rag", context="retrieved", max_new_tokens=8), parts)
    return sorted(items, key=lambda s: s.qid), system


def shard_worker(work: str, index: int, count: int, out: str) -> None:
    """One shard process of (b): evaluate shard `index` of `count` into `out`."""
    import torch

    from lorarag.eval.runner import run_eval
    from lorarag.eval.shards import Shard, select

    torch.set_num_threads(1)
    items, system = _eval_setup(Path(work))
    run_eval(system, select(items, Shard(index, count)), out, batch_size=16)


def bench_shards(count: int, work: Path, echo: Echo) -> dict:
    """(b): one process against `count` shard processes, each with one thread."""
    from lorarag.eval.records import load_results
    from lorarag.eval.shards import Shard, merge_shards, shard_dir, write_stamp

    items, _ = _eval_setup(work, write=True)  # builds the world, tiny model and index once, before the timing
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    one = work / "one"
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", _SHARD_CODE, str(work), "0", "1", str(one)], check=True, env=env)
    t_one = time.perf_counter() - t0
    sharded = work / "sharded"
    t0 = time.perf_counter()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _SHARD_CODE, str(work), str(i), str(count), str(shard_dir(sharded, Shard(i, count)))],
            env=env,
        )
        for i in range(count)
    ]
    if any(p.wait() != 0 for p in procs):
        raise RuntimeError("a shard process failed")
    t_sharded = time.perf_counter() - t0
    for i in range(count):
        write_stamp(shard_dir(sharded, Shard(i, count)), {"bench": "scale"})
    merged = merge_shards(sharded, count, [s.qid for s in items])
    same = [replace(r, latency_s=0.0) for r in merged] == [replace(r, latency_s=0.0) for r in load_results(one)]
    out = {
        "items": len(items),
        "shards": count,
        "one_process_items_per_s": len(items) / t_one,
        "sharded_items_per_s": len(items) / t_sharded,
        "speedup": t_one / t_sharded,
        "identical_rows": same,
    }
    echo(
        f"  eval {len(items)} items: one process {out['one_process_items_per_s']:.1f} items/s, "
        f"{count} shards {out['sharded_items_per_s']:.1f} items/s ({out['speedup']:.2f}x); merged rows "
        f"{'identical' if same else 'DIFFER'}"
    )
    return out


def run(sizes: list[int], dim: int, shards: int, out: Path, echo: Echo = print) -> dict:
    """The benchmark (module docstring)."""
    res: dict = {"cpus": os.cpu_count(), "index": [], "shards": None}
    with tempfile.TemporaryDirectory(prefix="lorarag-scale-") as tmp:
        work = Path(tmp)
        echo(f"(a) dense index engines, clustered unit vectors, {dim}-d")
        for n in sizes:
            res["index"].append(bench_index(n, dim, work, echo))
        if shards > 1:
            echo(f"(b) sharded evaluation, {shards} shard processes vs one")
            res["shards"] = bench_shards(shards, work, echo)
    for r in res["index"]:
        f = r["faiss_flat"]
        echo(
            f"  {r['n']:,}: Milvus Lite FLAT / FAISS flat: build {r['milvus_flat']['build_s'] / f['build_s']:.1f}x "
            f"the time, queries/s {r['milvus_flat']['queries_per_s'] / f['queries_per_s']:.2f}x"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1), encoding="utf-8")
    echo(f"-> {out}")
    return res
