"""`lorarag bench NAME`: every benchmark, registered in one place (`BENCHMARKS`).

Each entry is a command function whose typer options are its flags and whose docstring is its
help; `register` adds them all to the `bench` group in the registry's order, so `lorarag bench
--help` lists exactly `BENCHMARKS`. Heavy imports (torch, vLLM, FAISS) stay inside the functions
so `lorarag --help` stays fast. Speed is reported as ratios against a baseline measured in the
same run (bench/*.py), never as absolute targets.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import typer


def bench_retrieval(
    data_root: Path = typer.Option(Path("../shared/data"), help="folder holding lecoqa/ and piaf-fr/"),
    datasets: str = typer.Option("lecoqa,piaf-fr", help="comma-separated BEIR folders"),
    split: str = typer.Option("test", help="qrels split"),
    out: Path = typer.Option(Path("runs/bench/retrieval.json"), help="results JSON"),
) -> None:
    """Recall@5/10, MRR@10, nDCG@10 of our BM25 beside a plain character-bigram BM25."""
    from lorarag.bench.retrieval import run

    run(data_root, [d.strip() for d in datasets.split(",") if d.strip()], split, out)


def bench_speed(
    n_chunks: int = typer.Option(100_000, help="generated chunks"),
    n_queries: int = typer.Option(1000, help="queries timed for BM25 and FAISS"),
    baseline_queries: int = typer.Option(3, help="queries timed for the re-fit-TF-IDF baseline"),
    dim: int = typer.Option(384, help="vector dimension for FAISS"),
    out: Path = typer.Option(Path("runs/bench/speed.json"), help="results JSON"),
) -> None:
    """Index build time and queries/s vs re-reading the corpus and re-fitting TF-IDF per query."""
    from lorarag.bench.speed import run

    run(n_chunks, n_queries, baseline_queries, dim, out)


def bench_eval(n: int = typer.Option(100_000, help="result items"), seed: int = typer.Option(0)) -> None:
    """Retrieval metrics over N items: vectorised numpy vs a per-item Python loop."""
    from lorarag.bench.eval import run

    r = run(n, seed)
    typer.echo(
        f"{r.n_items} items, 6 metrics x K=1,3,5,10 + MRR: vectorised {r.vector_s:.3f}s "
        f"(matrix build {r.build_s:.3f}s), per-item loop {r.loop_s:.3f}s"
    )
    typer.echo(
        f"speedup x{r.speedup:.1f} (x{r.loop_s / max(r.vector_s - r.build_s, 1e-9):.0f} on the metric computation alone)"
    )


def bench_rag(
    models: Path | None = typer.Option(
        None, help="folder with lm/ embedder/ reranker/ (default: tiny Qwen3 models built in a temp dir)"
    ),
    candidates: int = typer.Option(64, help="(a) candidates to rerank for one query"),
    chunks: int = typer.Option(256, help="(b) chunks to embed"),
    questions: int = typer.Option(32, help="(c) questions to answer"),
    max_new_tokens: int = typer.Option(16, help="(c) tokens per answer"),
    out: Path = typer.Option(Path("runs/bench/rag.json"), help="results JSON"),
) -> None:
    """On local vLLM servers: one request per item vs one batched call, for rerank/embed/answer."""
    from lorarag.bench.rag import run_bench

    res = run_bench(
        models, candidates=candidates, chunks=chunks, questions=questions, max_new_tokens=max_new_tokens, out=out
    )
    for name, r in res["results"].items():
        typer.echo(
            f"{name:<8} n={r['n']:<4} one-by-one {r['one_by_one_s']:.3f}s  "
            f"batched {r['batched_s']:.3f}s  ratio {r['ratio']:.1f}x "
            f"{'(>= 5x)' if r['ratio'] >= 5 else '(below the 5x target)'}"
        )
    a = res["results"]["answer"]
    typer.echo(
        f"same work: answer tokens {a['tokens_one_by_one']} vs {a['tokens_batched']}, "
        f"{a['same_answers']}/{a['n']} identical answers; rerank max |diff| "
        f"{res['results']['rerank']['max_score_diff']:.2g}; embed max |diff| "
        f"{res['results']['embed']['max_vector_diff']:.2g}"
    )
    typer.echo(f"results -> {out}")


def bench_cpu(
    model: Path = typer.Option(None, help="model folder (default: the demo's SmolLM2)"),
    steps: int = typer.Option(6, help="timed training steps per variant"),
    batch: int = typer.Option(8, help="rows per training step"),
    n_gen: int = typer.Option(64, help="prompts generated per dtype"),
    new_tokens: int = typer.Option(24, help="new tokens per prompt"),
    out: Path = typer.Option(Path("runs/bench/cpu.json"), help="results JSON"),
) -> None:
    """LoRA step and generation speed of the CPU-demo settings beside the slow baselines."""
    from lorarag.bench.cpu import run

    run(model, steps, batch, n_gen, new_tokens, out)


def bench_numerics(
    out: Path = typer.Option(Path("runs/bench/numerics.json"), help="results JSON"),
    record: bool = typer.Option(False, "--record", help="add this machine's fingerprint to the committed ones"),
) -> None:
    """Fingerprint a pinned tiny training run and compare it with other machines' (first differing stage)."""
    import tempfile

    from lorarag.bench.numerics import run as run_numerics

    with tempfile.TemporaryDirectory(prefix="lorarag-numerics-") as work:
        run_numerics(Path(work), out, record, typer.echo)


def bench_gpu(ctx: typer.Context) -> None:
    """The GPU run config end to end on random weights of its real shapes: stage times, peak memory
    (options: `python -m lorarag.bench.gpu_check --help`)."""
    from lorarag.bench.gpu_check import main

    main(list(ctx.args))


def bench_serve(
    run: Path = typer.Option(
        None, "--run", help="a `lorarag run` dir (default: build a small one on SmolLM2 with an untrained adapter)"
    ),
    requests: int = typer.Option(64, min=8, help="questions per measurement"),
    out: Path = typer.Option(Path("runs/bench/serve.json"), help="results JSON"),
) -> None:
    """Throughput and p50/p95 latency at 1, 8 and 32 concurrent clients against one request at a time."""
    from lorarag.bench.serve import run as run_bench

    run_bench(run, requests, out, echo=typer.echo)


def bench_engine(
    questions: int = typer.Option(16, min=2, help="distinct questions, one at a time"),
    engines: str = typer.Option(
        "", help="comma-separated names from bench/engine.py ENGINES, the first the reference (default: all)"
    ),
    out: Path = typer.Option(Path("runs/bench/engine.json"), help="results JSON"),
) -> None:
    """The fast generator settings against transformers fp32: p50/p95 per answer and agreement."""
    from lorarag.bench.engine import run

    run(questions, out, [n for n in engines.split(",") if n], echo=typer.echo)


def bench_scale(
    sizes: str = typer.Option("100000,1000000", help="index sizes (vectors), comma-separated"),
    dim: int = typer.Option(128, min=8, help="vector dimension"),
    shards: int = typer.Option(2, min=1, help="shard processes for the eval part (1: skip it)"),
    out: Path = typer.Option(Path("runs/bench/scale.json"), help="results JSON"),
) -> None:
    """Milvus Lite vs FAISS (build, queries/s, recall@10) and sharded vs one-process evaluation."""
    from lorarag.bench.scale import run as run_scale
    from lorarag.core.errors import UserError

    try:
        values = [int(x) for x in sizes.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"--sizes takes comma-separated integers, got {sizes!r}") from None
    if not values or min(values) < 1000:
        raise UserError("--sizes: at least one size, each >= 1000")
    run_scale(values, dim, shards, out, echo=typer.echo)


def bench_preference(
    model: Path = typer.Option(None, help="model folder (default: a tiny Qwen3 built here)"),
    steps: int = typer.Option(20, min=3, help="training steps per run"),
    batch: int = typer.Option(4, min=1, help="pairs per step"),
    pairs: int = typer.Option(32, min=1, help="synthetic preference pairs"),
    seed: int = typer.Option(0),
    repeats: int = typer.Option(2, min=1, help="runs of each loop, in turn (the best is reported)"),
    out: Path = typer.Option(Path("runs/bench/preference.json"), help="results JSON"),
) -> None:
    """The CPU DPO loop against TRL's DPOTrainer on the same pairs: steps/s, ratio, log 2 at step 1."""
    from lorarag.bench.preference import run

    run(model, steps, batch, pairs, seed, repeats, out, echo=typer.echo)


# name -> command; the help `lorarag bench --help` shows is the function's docstring.
BENCHMARKS: dict[str, Callable[..., None]] = {
    "retrieval": bench_retrieval,
    "speed": bench_speed,
    "eval": bench_eval,
    "rag": bench_rag,
    "cpu": bench_cpu,
    "numerics": bench_numerics,
    "gpu": bench_gpu,
    "serve": bench_serve,
    "engine": bench_engine,
    "scale": bench_scale,
    "preference": bench_preference,
}
# Benchmarks that parse their own options (argparse in the bench module): typer passes them through.
OWN_OPTIONS = frozenset({"gpu"})


def register(app: typer.Typer) -> None:
    """Add the `bench` group with every entry of `BENCHMARKS`."""
    bench_app = typer.Typer(help="Benchmarks: speed ratios against slow baselines, retrieval quality.", no_args_is_help=True)
    for name, command in BENCHMARKS.items():
        settings = {"allow_extra_args": True, "ignore_unknown_options": True} if name in OWN_OPTIONS else None
        bench_app.command(name, context_settings=settings)(command)
    app.add_typer(bench_app, name="bench")
