"""`lorarag` commands for answering (heavy imports stay inside the commands).

    lorarag ask "QUESTION" --config CONFIG [--json] [--adapter NAME]   answer with sources
    lorarag check-backends CONFIG [--min-rate R]                      greedy agreement across backends
    lorarag bench rag                                                 one-by-one vs batched on local servers
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer


def ask_cmd(
    question: str = typer.Argument(..., help="the question"),
    config: Path = typer.Option(..., "--config", "-c", help="RAG config YAML with a generator"),
    as_json: bool = typer.Option(False, "--json", help="print the Answer record as JSON"),
    adapter: Optional[str] = typer.Option(None, help="LoRA adapter name (default: base model)"),
    trace: Path = typer.Option(Path("runs/traces/ask.jsonl"), help="JSONL file the trace is appended to"),
) -> None:
    """Retrieve, rerank and answer QUESTION; print the answer and its sources."""
    from lorarag.core.config import load_config
    from lorarag.core.errors import UserError
    from lorarag.rag.config import RAGConfig
    from lorarag.rag.records import to_dict
    from lorarag.rag.system import build_rag_system

    if not question.strip():
        raise UserError("empty question")
    cfg = load_config(config, RAGConfig)
    if not (Path(cfg.index.dir) / "manifest.json").exists():
        raise UserError(f"no index at {cfg.index.dir}: run `lorarag index {config}` first")
    system = build_rag_system(cfg, trace_path=trace)
    try:
        answer = system.answer([question], adapter=adapter)[0]
    finally:
        system.close()
    if as_json:
        typer.echo(json.dumps(to_dict(answer), ensure_ascii=False, indent=1))
        return
    typer.echo(answer.text)
    if answer.abstained:
        typer.echo("(abstained: no source answers this question)")
    ctx = answer.trace.reranked or answer.trace.retrieved[: cfg.retrieval.top_k]
    typer.echo("\nSources:")
    for i, r in enumerate(ctx, 1):
        mark = "*" if f"S{i}" in answer.cited else " "
        head = " > ".join(r.chunk.heading_path)
        typer.echo(f" {mark}[S{i}] {r.score:.3f}  {r.chunk.source}{'  ' + head if head else ''}  "
                   f"({r.chunk.chunk_id})")
    if answer.bad_citations:
        typer.echo(f"warning: cites sources that were not given: {', '.join(answer.bad_citations)}")
    typer.echo(f"trace appended to {trace}")


def check_backends_cmd(
    config: Path = typer.Argument(..., help="backends-check YAML (configs/check/*.yaml)"),
    min_rate: Optional[float] = typer.Option(None, help="exit 1 if any agreement rate is below"),
) -> None:
    """Run the same questions greedily through each backend; report the agreement rates."""
    from lorarag.core.config import load_config
    from lorarag.rag.backends_check import BackendsCheckConfig, check_backends

    cfg = load_config(config, BackendsCheckConfig)
    rows, differs = check_backends(cfg)
    ref = next(iter(cfg.generators))
    typer.echo(f"reference: {ref} ({cfg.generators[ref].kind})")
    for r in rows:
        typer.echo(f"{r.backend:<16} adapter={r.adapter or 'base':<10} agreement "
                   f"{r.agree}/{r.total} = {r.rate:.3f}")
        for q, a, b in r.examples:
            typer.echo(f"    differs on {q!r}: {a[:60]!r} vs {b[:60]!r}")
    if cfg.adapters:
        typer.echo(f"adapter output differs from base on {differs:.0%} of questions (reference)")
    overall = min(r.rate for r in rows)
    typer.echo(f"overall agreement (worst backend/adapter): {overall:.3f}")
    if min_rate is not None and overall < min_rate:
        raise typer.Exit(1)


def bench_rag_cmd(
    models: Optional[Path] = typer.Option(None, help="folder with lm/ embedder/ reranker/ "
                                          "(default: tiny Qwen3 models built in a temp dir)"),
    candidates: int = typer.Option(64, help="(a) candidates to rerank for one query"),
    chunks: int = typer.Option(256, help="(b) chunks to embed"),
    questions: int = typer.Option(32, help="(c) questions to answer"),
    max_new_tokens: int = typer.Option(16, help="(c) tokens per answer"),
    out: Path = typer.Option(Path("runs/bench/rag.json"), help="results JSON"),
) -> None:
    """On local vLLM servers: one request per item vs one batched call, for rerank/embed/answer."""
    from lorarag.bench.rag import run_bench

    res = run_bench(models, candidates=candidates, chunks=chunks, questions=questions,
                    max_new_tokens=max_new_tokens, out=out)
    for name, r in res["results"].items():
        typer.echo(f"{name:<8} n={r['n']:<4} one-by-one {r['one_by_one_s']:.3f}s  "
                   f"batched {r['batched_s']:.3f}s  ratio {r['ratio']:.1f}x "
                   f"{'(>= 5x)' if r['ratio'] >= 5 else '(below the 5x target)'}")
    a = res["results"]["answer"]
    typer.echo(f"same work: answer tokens {a['tokens_one_by_one']} vs {a['tokens_batched']}, "
               f"{a['same_answers']}/{a['n']} identical answers; rerank max |diff| "
               f"{res['results']['rerank']['max_score_diff']:.2g}; embed max |diff| "
               f"{res['results']['embed']['max_vector_diff']:.2g}")
    typer.echo(f"results -> {out}")


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    """Add `ask`, `check-backends` and `bench rag`."""
    app.command("ask")(ask_cmd)
    app.command("check-backends")(check_backends_cmd)
    bench_app.command("rag")(bench_rag_cmd)
