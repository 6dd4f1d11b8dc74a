"""`lorarag` commands for answering (heavy imports stay inside the commands).

lorarag ask "QUESTION" --config CONFIG [--json] [--adapter NAME]   base RAG: answer with sources
lorarag ask "QUESTION" --run RUN_DIR [--json]                     the run's trained LoRA-RAG system
lorarag check-backends CONFIG [--min-rate R]                      greedy agreement across backends
"""

from __future__ import annotations

import json
from pathlib import Path

import typer


def ask_cmd(
    question: str = typer.Argument(..., help="the question"),
    config: Path | None = typer.Option(None, "--config", "-c", help="RAG config YAML: base RAG"),
    run: Path | None = typer.Option(None, "--run", help="a `lorarag run` dir: its trained LoRA-RAG system"),
    as_json: bool = typer.Option(False, "--json", help="print the Answer record (with its Trace) as JSON"),
    adapter: str | None = typer.Option(None, help="--config only: LoRA adapter name (default: base model)"),
    trace: Path = typer.Option(Path("runs/traces/ask.jsonl"), help="--config only: JSONL file the trace is appended to"),
    force: bool = typer.Option(
        False, "--force", help="let --trace append to a file lorarag did not write (never the config)"
    ),
) -> None:
    """Answer QUESTION: base RAG from a RAG config, or the trained fallback system of a run dir."""
    from lorarag.core.errors import UserError
    from lorarag.rag.records import to_dict

    if not question.strip():
        raise UserError("empty question")
    if (config is None) == (run is None):
        raise UserError("give exactly one of --config (base RAG) or --run RUN_DIR (the trained LoRA-RAG)")
    if run is not None:
        if adapter is not None:
            raise UserError("--adapter is for --config; a run dir answers with its own adapter")
        from lorarag.trained.load import load_run

        system = load_run(run)
        top_k = None
    else:
        from lorarag.core.config import load_config
        from lorarag.rag.config import RAGConfig
        from lorarag.rag.system import build_rag_system

        cfg = load_config(config, RAGConfig)
        if not (Path(cfg.index.dir) / "manifest.json").exists():
            raise UserError(f"no index at {cfg.index.dir}: run `lorarag index {config}` first")
        from lorarag.core import outputs
        from lorarag.core.config import config_files

        # appended to: a file lorarag started (listed in its folder's manifest), or --force; never an input
        outputs.claim([trace], force=force or trace == Path("runs/traces/ask.jsonl"), inputs=config_files(config))
        outputs.own([trace])
        system = build_rag_system(cfg, trace_path=trace)
        top_k = cfg.retrieval.top_k
    try:
        answer = system.answer([question]) if run is not None else system.answer([question], adapter=adapter)
        answer = answer[0]
    finally:
        system.close()
    if as_json:
        typer.echo(json.dumps(to_dict(answer), ensure_ascii=False, indent=1))
        return
    typer.echo(answer.text)
    t = answer.trace
    if run is not None and t is not None:
        score = f" (p={t.verdict_score:.2f})" if t.verdict_score is not None else ""
        typer.echo(
            f"route: {t.route}   verdict: {t.verdict}{score}" + (f"   memory: {t.memory_answer}" if t.memory_answer else "")
        )
    if answer.abstained:
        typer.echo("(abstained)")
    ctx = t.reranked or t.retrieved[: top_k or len(t.retrieved)]
    typer.echo("\nSources:")
    for i, r in enumerate(ctx, 1):
        mark = "*" if f"S{i}" in answer.cited else " "
        head = " > ".join(r.chunk.heading_path)
        typer.echo(f" {mark}[S{i}] {r.score:.3f}  {r.chunk.source}{'  ' + head if head else ''}  ({r.chunk.chunk_id})")
    if answer.bad_citations:
        typer.echo(f"warning: cites sources that were not given: {', '.join(answer.bad_citations)}")
    if run is None:
        typer.echo(f"trace appended to {trace}")


def check_backends_cmd(
    config: Path = typer.Argument(..., help="backends-check YAML (configs/check/*.yaml)"),
    min_rate: float | None = typer.Option(None, help="exit 1 if any agreement rate is below"),
) -> None:
    """Run the same questions greedily through each backend; report the agreement rates."""
    from lorarag.core.config import load_config
    from lorarag.rag.generators.agreement import BackendsCheckConfig, check_backends

    cfg = load_config(config, BackendsCheckConfig)
    rows, differs = check_backends(cfg)
    ref = next(iter(cfg.generators))
    typer.echo(f"reference: {ref} ({cfg.generators[ref].kind})")
    for r in rows:
        typer.echo(f"{r.backend:<16} adapter={r.adapter or 'base':<10} agreement {r.agree}/{r.total} = {r.rate:.3f}")
        for q, a, b in r.examples:
            typer.echo(f"    differs on {q!r}: {a[:60]!r} vs {b[:60]!r}")
    if cfg.adapters:
        typer.echo(f"adapter output differs from base on {differs:.0%} of questions (reference)")
    overall = min(r.rate for r in rows)
    typer.echo(f"overall agreement (worst backend/adapter): {overall:.3f}")
    if min_rate is not None and overall < min_rate:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add `ask` and `check-backends`."""
    app.command("ask")(ask_cmd)
    app.command("check-backends")(check_backends_cmd)
