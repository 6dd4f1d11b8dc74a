"""Stage 6b of `lorarag run`: every system on the real conflict sets of `extra_sets:`.

Each set (ConflictNQ, ConflictQA; scenarios/importers.py reads them) is evaluated as the demo world
is, by the same systems and runner, with the same generator, adapter and gate:
- its true passages are indexed on their own (`<run>/extra/<kind>/index`, the run's retrieval
  settings: BM25, dense or hybrid, then the reranker), so a `retrieved` system retrieves and then
  sees the fabricated passage in place of the true one in a factual-error scenario;
- `presented` systems see the scenario's passages; the oracle sees the true passage alone.
Results, scenarios and the report go to `<run>/extra/<kind>/`, resumable as the world's are.
Every item is `unknown` knowledge: the LoRA never saw these facts, so the set measures how it
treats sources about facts it cannot know (over-fallback, detector AUROC near 0.5).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from lorarag.core import outputs
from lorarag.core.errors import UserError
from lorarag.eval.records import load_results
from lorarag.eval.report import write_report
from lorarag.scenarios.importers import load_set, set_file
from lorarag.scenarios.records import save_scenarios
from lorarag.study.evaluate import evaluate
from lorarag.study.prepare import index_chunks, sample_cells
from lorarag.study.run_folder import Echo, Paths
from lorarag.study.targets import set_table
from lorarag.trained.components import Parts
from lorarag.trained.config import ExtraSet, RunConfig
from lorarag.trained.contexts import ScenarioContexts


def present_sets(cfg: RunConfig) -> list[ExtraSet]:
    """The extra sets whose data file exists; a missing required one is a one-line UserError."""
    out = []
    for x in cfg.extra_sets:
        f = set_file(x.kind, x.path, x.split)
        if f.is_file():
            out.append(x)
        elif x.required:
            raise UserError(f"extra_sets: {x.kind}: {f} not found (the shared data sets are in ../shared/data)")
    return out


def check_extra_sets(cfg: RunConfig) -> list[Path]:
    """The data files of the present extra sets (hashed into run.json); fails on a missing required one."""

    return [set_file(x.kind, x.path, x.split) for x in present_sets(cfg)]


def evaluate_extra_sets(cfg: RunConfig, parts: Parts, root: Path, adapter: Path | None, echo: Echo) -> None:
    """Evaluate every system on each extra set; write its report and echo its accuracy table."""

    present = present_sets(cfg)
    world_retriever = parts.contexts.retriever if present else None
    for x in cfg.extra_sets:
        if x not in present:
            echo(f"          {x.kind}: skipped, {x.path} not found (extra set not required)")
            continue
        paths = Paths(root / x.kind)
        items, chunks = load_set(x.kind, x.path, x.split)
        items = sample_cells(items, x.max_per_cell or cfg.eval.max_per_cell, cfg.eval.seed)
        save_scenarios(paths.scenarios / "test.jsonl", items)
        echo(f"          {x.kind}: {len(items)} items; indexing its {len(chunks)} true passages")
        index_cfg = cfg.rag.index.model_copy(update={"dir": str(paths.root / "index")})
        # the world retriever's embedder, already loaded (None for BM25)
        retriever = index_chunks(
            cfg, chunks, len({c.doc_id for c in chunks}), index_cfg, embedder=getattr(world_retriever, "embedder", None)
        )
        contexts = ScenarioContexts(retriever, parts.contexts.reranker, cfg.rag.retrieval, {c.chunk_id: c for c in chunks})
        runs = evaluate(cfg, replace(parts, contexts=contexts), items, paths, adapter)
        results = {name: load_results(p) for name, p in runs.items()}
        write_report(
            results,
            paths.report,
            resamples=cfg.eval.bootstrap,
            seed=cfg.eval.seed,
            title=f"lorarag run {cfg.name}: {x.kind}",
        )
        table = set_table(x.kind, results)
        (paths.report / "headline.md").write_text(table, encoding="utf-8")
        outputs.record([paths.report / "headline.md"])  # lorarag's: --fresh clears it
        echo(table)
        echo(f"report: {paths.report / 'report.html'}")
