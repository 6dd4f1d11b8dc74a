"""`lorarag run <config>`: the end-to-end run, one stage per function, in order.

    1 world      generate the demo world (Markdown corpus + facts) from its seed
    2 index      index the world's chunks (the clean knowledge base)
    3 scenarios  test scenarios (held-out phrasing; known + unknown facts) and the dev split
    4 train      train the LoRA, or reuse the adapter of an earlier run of the same name
    5 calibrate  tune the self-knowledge gate on the dev split; gate.json next to the adapter
    6 evaluate   every system on every scenario x knowledge cell (resumable results.jsonl)
    7 report     comparison report (Markdown + HTML + metrics.json) and the headline table

Everything lands under `<runs_dir>/<name>/`. Evaluation resumes item by item; results of an
older adapter are never mixed in (the eval folder records which adapter and gate it used).
"""

from __future__ import annotations

import json
import logging
import random
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from fallback.config import RunConfig
from fallback.scenarios import Scenario, save_scenarios

log = logging.getLogger(__name__)

STEPS = ("world", "index", "scenarios", "train", "calibrate", "evaluate", "report")


@dataclass(frozen=True)
class Paths:
    """Where one run's artefacts live."""

    root: Path

    @property
    def world(self) -> Path:
        return self.root / "world"

    @property
    def scenarios(self) -> Path:
        return self.root / "scenarios"

    @property
    def eval(self) -> Path:
        return self.root / "eval"

    @property
    def report(cfg: RunConfig, paths: Paths, runs: dict[str, Path], echo: Callable[[str], None]) -> str:
    """The comparison report (eval.report, all systems + the base-vs-LoRA pair) and the headline."""
    from eval.records import load_results
    from eval.report import write_report
    from fallback.headline import headline_markdown, pair_names

    results = {name: load_results(p) for name, p in runs.items()}
    title = f"lorarag run {cfg.name}"
    write_report(results, paths.report, resamples=cfg.eval.bootstrap, seed=cfg.eval.seed, title=title)
    pair = pair_names(cfg, results)
    if pair is not None:
        write_report({n: results[n] for n in pair}, paths.report / "base-vs-lora",
                     resamples=cfg.eval.bootstrap, seed=cfg.eval.seed, title=f"{title}: {pair[1]} vs {pair[0]}")
    table = headline_markdown(cfg, results)
    (paths.report / "headline.md").write_text(table, encoding="utf-8")
    echo(table)
    echo(f"report: {paths.report / 'report.html'}" +
         (f" and {paths.report / 'base-vs-lora' / 'report.html'}" if pair else ""))
    return table


def plan(cfg: RunConfig, fresh: bool) -> list[tuple[str, str]]:
    """(step, what it does) for every step, with the exact training command (--dry-run)."""
    from train.api import describe_training

    root = Path(cfg.runs_dir) / cfg.name
    w = cfg.train.world
    per = cfg.eval.max_per_cell
    systems = ", ".join(f"{s.name} ({s.kind}, {s.context})" for s in cfg.systems)
    return [
        ("world", f"build_world(seed={w.seed}, n_orgs={w.n_orgs}) -> {root / 'world'}"),
        ("index", f"build_from_chunks(world chunks) -> {cfg.rag.index.dir} ({cfg.rag.retrieval.mode}, "
                  f"top_n={cfg.rag.retrieval.top_n}, top_k={cfg.rag.retrieval.top_k})"),
        ("scenarios", f"test: {'/'.join(cfg.eval.scenarios)} x {'/'.join(cfg.eval.knowledge)}, "
                      f"<= {per} per cell; dev: {cfg.calibration.max_items} known + "
                      f"{cfg.calibration.max_items} never-learned -> {root / 'scenarios'}"),
        ("train", describe_training(cfg.train, fresh=fresh)),
        ("calibrate", f"P(' unknown') on dev, rule={cfg.fallback.gate.rule} -> <adapter>/gate.json"
                      if cfg.fallback.gate.threshold is None else f"fixed threshold {cfg.fallback.gate.threshold}"),
        ("evaluate", f"run_eval for: {systems} -> {root / 'eval'}"),
        ("report", f"eval.report.write_report (all systems; base vs LoRA pair) + headline -> {root / 'report'}"),
    ]


def run(cfg: RunConfig, *, fresh: bool = False, dry_run: bool = False,
        echo: Callable[[str], None] = print) -> str | None:
    """The whole run (see module docstring); returns the headline table (None on --dry-run)."""
    if dry_run:
        for i, (step, what) in enumerate(plan(cfg, fresh), 1):
            echo(f"[{i}/{len(STEPS)}] {step:<9} {what}")
        return None
    from lorarag.runinfo import start_run

    paths = Paths(Path(cfg.runs_dir) / cfg.name)
    if fresh and paths.root.exists():
        shutil.rmtree(paths.eval, ignore_errors=True)
        shutil.rmtree(paths.report, ignore_errors=True)
    start_run(paths.root, cfg, seeds={"run": cfg.seed, "world": cfg.train.world.seed,
                                      "train": cfg.train.seed, "eval": cfg.eval.seed})
    p = Progress(echo)
    p.step("world", "generating the demo world")
    world = make_world(cfg, paths)
    p.step("index", f"indexing {len(world.chunks())} chunks")
    retriever = make_index(cfg, world)
    p.step("scenarios", "building test and dev scenarios")
    test, dev_known, dev_unseen = make_scenarios(cfg, world, paths)
    echo(f"          {len(test)} test items, dev {len(dev_known)} known + {len(dev_unseen)} never-learned")
    p.step("train", f"LoRA run '{cfg.train.run_name}'")
    if cfg.prepare_base is not None:
        BASE_PREPARERS[cfg.prepare_base](cfg.train.model)
    adapter = train_or_reuse(cfg, fresh, echo)
    p.step("calibrate", "gate threshold on the dev split")
    parts = build_parts(cfg, retriever, adapter, world)
    cal = calibrate_gate(cfg, parts, adapter, dev_known, dev_unseen, echo)
    if cal is not None:
        echo(f"          threshold {cal.threshold:.4f}: keeps {cal.known_kept:.0%} of known, rejects "
             f"{cal.unseen_rejected:.0%} of never-learned (AUROC {cal.auroc:.3f})")
    p.step("evaluate", f"{len(cfg.systems)} systems x {len(test)} items")
    stamp = {"adapter": str(adapter.resolve()), "gate": parts.gate_threshold,
             "n_test": len(test), "systems": [s.model_dump() for s in cfg.systems]}
    runs = evaluate(cfg, parts, test, paths, stamp)
    p.step("report", str(paths.report))
    table = report(cfg, paths, runs, echo)
    parts.generator.close()
    echo(f"done in {time.perf_counter() - p.t0:.0f}s")
    return table


def calibrate_only(cfg: RunConfig, *, echo: Callable[[str], None] = print) -> Any:
    """Steps 1-5 only (reusing the trained adapter); recalibrates and overwrites gate.json."""
    from fallback.gate import GATE_FILE
    from train.api import find_adapter

    paths = Paths(Path(cfg.runs_dir) / cfg.name)
    adapter = find_adapter(cfg.train)
    if adapter is None:
        from lorarag.cli import UserError

        raise UserError(f"no trained adapter for run '{cfg.train.run_name}': run `lorarag run` first")
    world = make_world(cfg, paths)
    retriever = make_index(cfg, world)
    _, dev_known, dev_unseen = make_scenarios(cfg, world, paths)
    (Path(adapter) / GATE_FILE).unlink(missing_ok=True)
    parts = build_parts(cfg, retriever, Path(adapter), world)
    cal = calibrate_gate(cfg.model_copy(update={"fallback": cfg.fallback.model_copy(
        update={"gate": cfg.fallback.gate.model_copy(update={"threshold": None})})}),
        parts, Path(adapter), dev_known, dev_unseen, echo)
    parts.generator.close()
    return cal
