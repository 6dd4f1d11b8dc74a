"""`lorarag` subcommands of the rag package (heavy imports stay inside the commands).

lorarag index CONFIG [--strict]             ingest, chunk, write the index; print the ingest report
lorarag search "QUESTION" --config CONFIG   ranked chunks + last-retrieval.json trace
"""

from __future__ import annotations

import json
from pathlib import Path

import typer


def _load(config: Path):
    from lorarag.core.config import load_config
    from lorarag.rag.config import RAGConfig

    return load_config(config, RAGConfig)


def _print_report(report, err: bool) -> None:
    for p in report.problems:
        typer.echo(f"left out  {p.source}: {p.reason}", err=err)
    typer.echo(report.summary(), err=err)


def _build(cfg, strict: bool = False, err: bool = False):
    """Ingest, print the report, build the index; return the manifest."""
    from lorarag.rag.index.store import build_index, check_target
    from lorarag.rag.ingest.parse import ingest

    corpus = cfg.corpus.model_copy(update={"strict": True}) if strict else cfg.corpus
    check_target(corpus, cfg.index)  # refused before the corpus is read
    report = ingest(corpus)
    _print_report(report, err)
    return build_index(corpus, cfg.chunker, cfg.index, cfg.embedder, report=report)


def index_cmd(
    config: Path = typer.Argument(..., help="RAG config YAML (configs/rag/*.yaml)"),
    strict: bool = typer.Option(False, "--strict", help="fail on any bad file"),
) -> None:
    """Ingest the corpus, chunk it and write the BM25/FAISS index with its manifest."""
    cfg = _load(config)
    m = _build(cfg, strict)
    parts = [p for p, on in (("bm25", m.bm25_tokenizer), ("dense", m.dimension)) if on]
    typer.echo(
        f"indexed {m.n_chunks} chunks from {m.n_documents} document(s) "
        f"[{'+'.join(parts)}] in {m.build_seconds:.2f}s -> {cfg.index.dir}"
    )


def search_cmd(
    question: str = typer.Argument(..., help="the question to search for"),
    config: Path = typer.Option(..., "--config", "-c", help="RAG config YAML"),
    k: int | None = typer.Option(None, "--k", "-k", help="results (default: retrieval.top_k)"),
    mode: str | None = typer.Option(None, help="bm25 | dense | hybrid (default: config)"),
    as_json: bool = typer.Option(False, "--json", help="print the trace as JSON"),
    trace: Path | None = typer.Option(None, help="trace path (default: INDEX_DIR/last-retrieval.json)"),
    force: bool = typer.Option(False, "--force", help="let --trace replace a file lorarag did not write (never the config)"),
) -> None:
    """Print the chunks ranked for QUESTION and write the retrieval trace JSON."""
    from lorarag.core import outputs
    from lorarag.core.config import config_files, validate_data
    from lorarag.core.errors import UserError
    from lorarag.rag.config import RAGConfig
    from lorarag.rag.index.store import check_fresh
    from lorarag.rag.records import to_dict
    from lorarag.rag.retrieve import load_retriever

    cfg = _load(config)
    if not question.strip():
        raise UserError("empty question")
    path = trace or Path(cfg.index.dir) / "last-retrieval.json"
    # the default lives in lorarag's index folder; a named --trace is claimed like any output
    outputs.claim([path], force=force or trace is None, inputs=config_files(config))
    flags = {key: v for key, v in (("mode", mode), ("top_k", k)) if v is not None}
    if flags:  # the options are validated as the config keys they override (`-k 0` is an error)
        data = cfg.model_dump()
        data["retrieval"] = {**data["retrieval"], **flags}
        names = " ".join(f"--{'k' if key == 'top_k' else key} {v}" for key, v in flags.items())
        cfg = validate_data(data, RAGConfig, f"{config} with {names}")
    retrieval = cfg.retrieval
    k = retrieval.top_k
    if not (Path(cfg.index.dir) / "manifest.json").exists():
        typer.echo(f"no index at {cfg.index.dir}: building it (same as `lorarag index {config}`)", err=True)
        _build(cfg, err=True)  # keep stdout for the results
    manifest = check_fresh(cfg.corpus, cfg.chunker, cfg.index)
    hits = load_retriever(cfg.index, retrieval, cfg.embedder).retrieve([question], k)[0]
    sources = list(dict.fromkeys(h.chunk.source for h in hits))
    record = {
        "question": question,
        "mode": retrieval.mode,
        "k": k,
        "index": cfg.index.dir,
        "corpus_hash": manifest.corpus_hash,
        "results": [to_dict(h) for h in hits],
        "scores": [h.score for h in hits],
        "sources": sources,
    }
    text = json.dumps(record, ensure_ascii=False, indent=1)
    if trace is None:  # the index folder's own file (rag/index_dir.OUR_FILES): no manifest there
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    else:
        outputs.write_text(path, text, force=True)  # claimed above
    if as_json:
        typer.echo(json.dumps(record, ensure_ascii=False, indent=1))
        return
    if not hits:
        typer.echo("no chunk shares a term with the question")
    for h in hits:
        c = h.chunk
        where = c.source + (f" p.{c.page}" if c.page else "") + f" [{c.start}:{c.end}]"
        typer.echo(f"#{h.rank}  score {h.score:.4f}  {where}  id {c.chunk_id}")
        if c.heading_path:
            typer.echo("    " + " > ".join(c.heading_path))
        typer.echo("    " + c.text[:300].replace("\n", " ") + ("…" if len(c.text) > 300 else ""))
    typer.echo(f"trace: {path}", err=True)


def register(app: typer.Typer) -> None:
    """Add `index` and `search`."""
    app.command("index")(index_cmd)
    app.command("search")(search_cmd)
