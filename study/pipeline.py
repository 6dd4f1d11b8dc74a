"""`lorarag run <config>`: the end-to-end study, one stage per module, in order.

    1 data       the KB (a user's corpus + labelled questions, or the demo world    study/kb.py
                 written as one), labels mapped to chunks, split by fact
    2 index      index the KB's chunks (the clean knowledge base)                  study/prepare.py
    3 scenarios  test scenarios (known + never-learned facts), dev, SFT rows       study/kb.py
    4 train      train the LoRA, or reuse the adapter of an earlier run            study/training.py
                 (and the RAG-SFT adapter when a system answers or reads with it)
    5 calibrate  tune the self-knowledge gate on the dev split; gate.json          study/calibration.py
    6 evaluate   every system on every scenario x knowledge cell (resumable)       study/evaluate.py
    7 report     comparison report (Markdown + HTML + metrics.json) + headline     study/evaluate.py

Everything lands under `<runs_dir>/<name>/` (training under `train.runs_dir/<run_name>/`).
Evaluation resumes item by item; results of an older adapter or gate are never mixed in (each
system's folder records what produced it). The demo world and a user's KB differ only in who
writes the three input files (study/kb.sources): every later stage is the same code.
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass, replace
from pathlib import Path

from lorarag.core import numerics, outputs
from lorarag.core.errors import UserError
from lorarag.core.lock import hold, release
from lorarag.core.paths import child
from lorarag.core.runinfo import check_run_files, start_run
from lorarag.fallback.gate import SIGNAL, GateCalibration, auroc_upper
from lorarag.rag.retrieve import Retriever
from lorarag.scenarios.records import Scenario
from lorarag.study.calibration import calibrate_gate, languages_without_dev_known
from lorarag.study.evaluate import evaluate, report
from lorarag.study.extra_sets import check_extra_sets, evaluate_extra_sets, present_sets
from lorarag.study.kb_source import KBSource
from lorarag.study.leaks import check_test_contexts
from lorarag.study.ledger import note_reads, run_ledger
from lorarag.study.preference import describe as describe_preference
from lorarag.study.preference import prefer_or_reuse, write_preference_pairs
from lorarag.study.prepare import index_chunks
from lorarag.study.reuse_check import refuse_before_writing
from lorarag.study.run_folder import STEPS, Echo, Paths, Progress
from lorarag.study.training import BASE_PREPARERS, describe_training, train_or_reuse, train_rag_sft
from lorarag.trained.adapters import needs_rag_sft, rag_sft_config, trained_adapter
from lorarag.trained.components import build_parts
from lorarag.trained.config import RunConfig


def plan(cfg: RunConfig, fresh: bool) -> list[tuple[str, str]]:
    """(step, what it does) for every step, with the exact training command (--dry-run)."""
    root = Path(cfg.runs_dir) / cfg.name
    r = cfg.rag.retrieval
    systems = ", ".join(f"{s.name} ({s.kind}, {s.context})" for s in cfg.systems)
    base = f"prepare base model ({cfg.prepare_base}) -> {cfg.train.model}; " if cfg.prepare_base else ""
    gate = (
        f"{SIGNAL} on dev, rule={cfg.fallback.gate.rule} -> <adapter>/gate.json"
        if cfg.fallback.gate.threshold is None
        else f"fixed threshold {cfg.fallback.gate.threshold}"
    )
    return [
        _plan_source(cfg, root),
        (
            "index",
            f"build_from_chunks(the KB's chunks) -> {cfg.rag.index.dir} ({r.mode}, top_n={r.top_n}, "
            f"top_k={r.top_k}{', reranker ' + cfg.rag.reranker.model if cfg.rag.reranker else ''})",
        ),
        ("scenarios", base + _plan_scenarios(cfg, root)[1]),
        ("train", describe_training(cfg, fresh) + describe_preference(cfg)),
        ("calibrate", gate),
        (
            "evaluate",
            f"run_eval for {systems} -> {root / 'eval'}"
            + "".join(
                f"; then on {x.kind} ({x.path}, {x.split}, <= {x.max_per_cell or cfg.eval.max_per_cell} per cell, "
                f"its own index) -> {root / 'extra' / x.kind}"
                for x in cfg.extra_sets
            ),
        ),
        ("report", f"eval.report.write_report (all systems; base vs LoRA) + headline -> {root / 'report'}"),
    ]


def _plan_source(cfg: RunConfig, root: Path) -> tuple[str, str]:
    d, ch, sp = cfg.data, cfg.rag.chunker, cfg.data.splits
    if d.world is not None:
        w = d.world
        what = (
            f"the demo world (seed={w.seed}, n_orgs={w.n_orgs}, {w.wordings} wordings a question) written as "
            f"corpus + questions + older versions -> {root / 'world'}"
        )
    else:
        what = (
            f"corpus {d.corpus.kind} {d.corpus.path} + questions {d.questions.kind} {d.questions.path}"
            f"{' (qrels ' + d.questions.split + ')' if d.questions.kind == 'beir' else ''}"
            f"{' + older versions ' + d.outdated if d.outdated else ''}"
        )
    return (
        "data",
        f"{what} ({ch.kind} chunks <= {ch.chunk_size} chars); labels -> chunk ids "
        f"{root / 'data/labels.jsonl'}; splits by fact (seed={sp.seed}, known={sp.known_fraction}, "
        f"context_only={sp.context_only_fraction}, dev={sp.dev_fraction}"
        f"{', per language' if sp.stratify_languages else ''}) -> {root / 'data/splits'}",
    )


def _plan_scenarios(cfg: RunConfig, root: Path) -> tuple[str, str]:
    cells = (
        f"test: {'/'.join(cfg.eval.scenarios)} x {'/'.join(cfg.eval.knowledge)}, <= "
        f"{cfg.eval.max_per_cell} per cell; dev: the facts of <= {cfg.calibration.max_items} known + "
        f"never-learned items"
    )
    return (
        "scenarios",
        f"{cells}, a known test item in a wording training leaves out -> {root / 'scenarios'}; "
        f"SFT rows of the taught facts, leak-checked -> {cfg.train.dataset}",
    )


def run(
    cfg: RunConfig, *, fresh: bool = False, dry_run: bool = False, echo: Echo = print, reread_test: bool = False
) -> str | None:
    """The whole run (see module docstring); returns the headline table (None on --dry-run). The test
    split's reads go in the test ledger (study/ledger.py); a read under a recipe other than its first
    is refused before any training unless `reread_test`."""
    pins = numerics.pinned_env(cfg.numerics)
    if dry_run:
        if pins:
            echo("numerics  " + " ".join(f"{k}={v}" for k, v in pins.items()) + " (set before torch loads)")
        for i, (step, what) in enumerate(plan(cfg, fresh), 1):
            echo(f"[{i}/{len(STEPS)}] {step:<9} {what}")
        return None
    numerics.apply(cfg.numerics)  # before anything loads torch; the training child inherits it
    extra_files = check_extra_sets(cfg)  # a missing data set fails now, not after the training
    paths = Paths(child(cfg.runs_dir, cfg.name, "name"))  # inside runs_dir, or refused before anything is written
    check_run_files(paths.root)  # a config.yaml or run.json of the user's there: refused before any write
    hold(paths.root, "run folder")  # one writer per run folder (core/lock.py), before --fresh removes anything
    if fresh:
        kept = outputs.clear_tree(paths.eval) + outputs.clear_tree(paths.report)  # only what lorarag wrote
        if kept:
            echo(f"--fresh: kept {len(kept)} file(s) lorarag did not write, e.g. {kept[0]}")
    else:  # stage 4's refusal of a finished adapter (other recipe, base or rows) comes before any write
        refuse_before_writing(cfg, paths.root, echo)
    p = Progress(echo, STEPS)
    p.step(KBSource.step, KBSource.what)
    src = KBSource(cfg, paths)
    start_run(
        paths.root,
        cfg,
        seeds={"run": cfg.seed, **src.seeds, "train": cfg.train.seed, "eval": cfg.eval.seed},
        data=[*extra_files, *src.files],
    )
    p.step("index", f"indexing {len(src.chunks)} chunks")
    retriever = index_chunks(cfg, src.chunks, src.n_documents, cfg.rag.index)
    p.step("scenarios", "building test and dev scenarios")
    if cfg.prepare_base is not None:  # before the scenarios: data.paraphrase's generator is the base model
        BASE_PREPARERS[cfg.prepare_base](cfg.train.model)
    test, dev_known, dev_unseen = src.scenarios(echo, retriever)
    echo(f"          {len(test)} test items; dev {len(dev_known)} known + {len(dev_unseen)} never-learned")
    ledger = run_ledger(
        cfg, src.kb.groups, [(x.kind, f) for x, f in zip(present_sets(cfg), extra_files) if x.split == "test"]
    )
    ledger.check(reread_test)  # before any training: a test split read under another recipe needs --reread-test
    if cfg.fallback.gate.enabled and cfg.fallback.gate.threshold is None:  # fitted on dev: which languages it never saw
        for lang, n in languages_without_dev_known(test, dev_known).items():
            echo(
                f"          warning: the gate's dev split holds no known fact in '{lang}' ({n} known test items "
                "are): its threshold is fitted without that language's doubt (data.splits.stratify_languages)"
            )
    write_preference_pairs(cfg, src, test, echo)  # train.preference: pairs from the SFT rows
    # the rows on disk against the test's contexts: a leak stops the run before any training
    check_test_contexts(cfg, paths, test, src.owners(), {c.chunk_id: c.text for c in src.chunks}, echo)
    p.step("train", f"LoRA run '{cfg.train.run_name}'")
    adapter = train_or_reuse(cfg, fresh, echo)
    rag_sft = train_rag_sft(cfg, fresh, echo)  # None unless a system answers or reads with it
    adapter = prefer_or_reuse(cfg, adapter, fresh, echo)  # the SFT adapter when preference is off
    p.step("calibrate", "gate threshold on the dev split")
    parts = build_parts(cfg, retriever, adapter, src.chunks, rag_sft)
    gate = calibrate_gate(cfg, parts, adapter, dev_known, dev_unseen, echo)
    if gate.calibration is not None:
        cal = gate.calibration
        echo(
            f"          threshold {cal.threshold:.4f}: keeps {cal.known_kept:.0%} of known, rejects "
            f"{cal.unseen_rejected:.0%} of never-learned (AUROC {cal.auroc:.3f}, 95 % upper bound {auroc_upper(cal):.3f})"
            + ("" if gate.threshold is not None else "; the gate stays OFF")
        )
    if gate.override is not None:
        echo(f"          override threshold {gate.override:.4f}: a memory this sure wins over sources that differ")
    parts = replace(parts, gate_threshold=gate.threshold, override_threshold=gate.override)
    p.step("evaluate", f"{len(cfg.systems)} systems x {len(test)} items")
    note_reads(paths.root, ledger.record(paths.root))  # this read, counted in the headline
    runs = evaluate(cfg, parts, test, paths, adapter)
    p.step("report", str(paths.report))
    table = report(cfg, paths, runs, echo, adapter)
    evaluate_extra_sets(cfg, parts, paths.root / "extra", adapter, echo)
    parts.generator.close()
    echo(f"done in {time.perf_counter() - p.t0:.0f}s")
    known = next((s for s in test if s.knowledge == "known" and s.scenario == "consistent"), test[0] if test else None)
    if known is not None:  # one question to try the trained system on, from the command line
        echo(f"try: lorarag ask {shlex.quote(known.question)} --run {shlex.quote(str(paths.root))}")
    release(paths.root)
    return table


@dataclass(frozen=True)
class StudiedRun:
    """A trained run read again for study (steps 1-3 and its adapter): `lorarag calibrate`, `self-knowledge`."""

    paths: Paths
    adapter: Path
    src: KBSource
    retriever: Retriever
    test: list[Scenario]
    dev_known: list[Scenario]
    dev_unseen: list[Scenario]


def studied_run(cfg: RunConfig, echo: Echo = print) -> StudiedRun:
    """The run's KB, index, scenarios and trained adapter; UserError when it has none yet."""
    numerics.apply(cfg.numerics)
    paths = Paths(Path(cfg.runs_dir) / cfg.name)
    adapter = trained_adapter(cfg)
    if adapter is None:
        raise UserError(f"no trained adapter for run '{cfg.train.run_name}': run `lorarag run` first")
    src = KBSource(cfg, paths)
    retriever = index_chunks(cfg, src.chunks, src.n_documents, cfg.rag.index)
    return StudiedRun(paths, adapter, src, retriever, *src.scenarios(echo, retriever))


def calibrate_only(cfg: RunConfig, *, echo: Echo = print) -> GateCalibration:
    """`lorarag calibrate`: steps 1-3, the trained adapter, and a fresh gate.json."""
    r = studied_run(cfg, echo)
    parts = build_parts(cfg, r.retriever, r.adapter, r.src.chunks)
    gate = calibrate_gate(cfg, parts, r.adapter, r.dev_known, r.dev_unseen, echo, force=True)
    parts.generator.close()
    assert gate.calibration is not None  # force=True always reads the dev split
    return gate.calibration


def prepare_rows(cfg: RunConfig, *, echo: Echo = print) -> dict[str, Path]:
    """`lorarag sft`: steps 1-3 without training. The KB (the world written as one, or the user's
    files), its index (distractors drawn by retrieval read it), the test and dev scenarios, and the
    SFT rows, leak-checked as they are written; the preference pairs too when `train.preference`
    is on; then the test contexts are looked up in the rows on disk as a run does before training.
    Returns what each written file holds -> its path."""
    numerics.apply(cfg.numerics)
    paths = Paths(Path(cfg.runs_dir) / cfg.name)
    src = KBSource(cfg, paths)
    retriever = index_chunks(cfg, src.chunks, src.n_documents, cfg.rag.index)
    if cfg.prepare_base is not None:  # before the scenarios: data.paraphrase's generator is the base model
        BASE_PREPARERS[cfg.prepare_base](cfg.train.model)
    test, _, _ = src.scenarios(echo, retriever)
    pairs = write_preference_pairs(cfg, src, test, echo)
    check_test_contexts(cfg, paths, test, src.owners(), {c.chunk_id: c.text for c in src.chunks}, echo)
    files = {
        "knowledge base": paths.world if cfg.data.world is not None else Path(src.files[0]),
        "splits": paths.root / "data" / "splits",
        "scenarios": paths.scenarios,
        "training rows": Path(cfg.train.dataset),
    }
    if cfg.train.val_dataset:
        files["validation rows"] = Path(cfg.train.val_dataset)
    if needs_rag_sft(cfg):
        files["RAG-SFT rows"] = Path(rag_sft_config(cfg).train.dataset)
    if pairs is not None:
        files["preference pairs"] = pairs
    return files
