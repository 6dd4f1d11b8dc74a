"""`lorarag run <config>`: the end-to-end run, one stage per function, in order.

    1 world      generate the demo world (Markdown corpus + facts) from its seed
    2 index      index the world's chunks (the clean knowledge base)
    3 scenarios  test scenarios (held-out phrasing; known + unknown facts) and the dev split
    4 train      train the LoRA, or reuse the adapter of an earlier run of the same name
    5 calibrate  tune the self-knowledge gate on the dev split; gate.json next to the adapter
    6 evaluate   every system on every scenario x knowledge cell (resumable results.jsonl)
    7 report     comparison report (Markdown + HTML + metrics.json) and the headline table

Everything lands under `<runs_dir>/<name>/` (training under `train.runs_dir/<run_name>/`).
Evaluation resumes item by item; results of an older adapter or gate are never mixed in (the
eval folder records which adapter and threshold produced it).
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

from fallback.calibration import Echo, Parts, build_parts, calibrate_gate
from fallback.config import RunConfig
from fallback.scenarios import Scenario, save_scenarios
from rag.config import ConfigError

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
    def report(self) -> Path:
        return self.root / "report"


class Progress:
    """Step banners with elapsed wall time, so a long run is visible throughout."""

    def __init__(self, echo: Echo) -> None:
        self.echo = echo
        self.t0 = time.perf_counter()

    def step(self, name: str, what: str) -> None:
        """Print `[i/7] name what (t=…s)`."""
        i = STEPS.index(name) + 1
        self.echo(f"[{i}/{len(STEPS)}] {name:<9} {what}   (t={time.perf_counter() - self.t0:.0f}s)")


# --- 1-3: world, index, scenarios --------------------------------------------------------------

def make_world(cfg: RunConfig, paths: Paths) -> Any:
    """Generate the demo world and write its corpus (deterministic by `train.world.seed`)."""
    from train.world import build_world, write_world

    world = build_world(cfg.train.world)
    write_world(world, paths.world)
    return world


def make_index(cfg: RunConfig, world: Any) -> Any:
    """Index the world's chunks (ids `<doc>#<n>`, the ones scenarios name); open a retriever."""
    return index_chunks(cfg, world.chunks(), len(world.documents), cfg.rag.index)


def index_chunks(cfg: RunConfig, chunks: list[Any], n_documents: int, index_cfg: Any, embedder: Any = None) -> Any:
    """Index `chunks` under `index_cfg.dir` with the run's retrieval settings; open a retriever
    (`embedder`: an already loaded one to reuse, else one is built when the index is dense)."""
    from rag.index import build_from_chunks
    from rag.retrieve import load_retriever

    if index_cfg.dense is not None and embedder is None:
        from rag.embed import make_embedder

        embedder = make_embedder(cfg.rag.embedder)
    build_from_chunks(chunks, index_cfg, embedder=embedder, embedder_cfg=cfg.rag.embedder, n_documents=n_documents)
    return load_retriever(index_cfg, cfg.rag.retrieval, cfg.rag.embedder, embedder=embedder)


def sample_cells(items: list[Scenario], per_cell: int | None, seed: int) -> list[Scenario]:
    """A seeded sample of at most `per_cell` items per (scenario, knowledge) cell."""
    if per_cell is None:
        return items
    cells: dict[tuple[str, str], list[Scenario]] = {}
    for s in items:
        cells.setdefault((s.scenario, s.knowledge), []).append(s)
    out: list[Scenario] = []
    for key in sorted(cells):
        group = sorted(cells[key], key=lambda s: s.qid)
        random.Random(f"{seed}/{key[0]}/{key[1]}").shuffle(group)
        out.extend(sorted(group[:per_cell], key=lambda s: s.qid))
    return out


def make_scenarios(cfg: RunConfig, world: Any, paths: Paths) -> tuple[list[Scenario], list[Scenario], list[Scenario]]:
    """(test, dev known, dev never-learned) scenarios of the world, saved as JSONL."""
    from train.scenarios_gen import ask_in_phrasings, index_world, world_scenarios

    wi = index_world(world)
    undated = cfg.train.world.undated_outdated_fraction
    test = world_scenarios(world, wi, ["known", "unknown"], "test", seed=cfg.seed,
                           undated_fraction=undated, types=cfg.eval.scenarios)
    test = sample_cells([s for s in test if s.knowledge in cfg.eval.knowledge], cfg.eval.max_per_cell,
                        cfg.eval.seed)
    dev = []
    for groups, seed in ((["known"], cfg.seed + 1), (["unknown_dev"], cfg.seed + 2)):
        items = world_scenarios(world, wi, groups, "dev", seed=seed, undated_fraction=undated,
                                types=cfg.calibration.scenarios)
        items = sorted(items, key=lambda s: s.qid)
        random.Random(seed).shuffle(items)
        dev.append(ask_in_phrasings(items[: cfg.calibration.max_items], world, cfg.dev_phrasings()))
    save_scenarios(paths.scenarios / "test.jsonl", test)
    save_scenarios(paths.scenarios / "dev-known.jsonl", dev[0])
    save_scenarios(paths.scenarios / "dev-unseen.jsonl", dev[1])
    return test, dev[0], dev[1]


# --- 4: train ----------------------------------------------------------------------------------

def _smollm2(folder: str) -> None:
    from train.smollm2 import ensure_smollm2

    ensure_smollm2(folder)


def _tiny_qwen3(folder: str) -> None:
    if not (Path(folder) / "config.json").is_file():
        from rag.tiny import build_causal_lm

        build_causal_lm(folder)


# `prepare_base:` kinds: how a fresh machine gets the base model folder (no hub downloads).
BASE_PREPARERS: dict[str, Callable[[str], None]] = {"smollm2_gguf": _smollm2, "tiny_qwen3": _tiny_qwen3}


def train_dir(cfg: RunConfig) -> Path:
    """The training run folder, found by run name (train/swift.py's layout)."""
    from train.swift import run_dir

    return run_dir(cfg.train)


def check_same_recipe(cfg: RunConfig) -> None:
    """ConfigError when `train.run_name`'s run dir was trained (or started) with another config."""
    from train.swift import config_changes

    changed = config_changes(cfg.train)
    if changed:
        raise ConfigError(f"train run '{cfg.train.run_name}' was trained with another config (differs in "
                          f"{', '.join(changed)}): retrain with `lorarag run --fresh` or name the run anew")


def find_adapter(cfg: RunConfig) -> Path | None:
    """The final adapter of a finished training run of `train.run_name`, or None; ConfigError
    when that run was trained with another recipe (its saved config differs from `cfg.train`)."""
    from train.swift import find_adapter as find

    try:
        path = find(cfg.train.run_name, cfg.train.runs_dir)
    except FileNotFoundError:
        return None
    if not (path / "adapter_model.safetensors").is_file():
        return None
    check_same_recipe(cfg)
    return path


def build_sft(cfg: RunConfig, world: Any, echo: Echo) -> None:
    """The SFT mix from the world (train/sft.py), leak-checked, written to `train.dataset`."""
    from train.sft import build_rows, leak_check, summary, write_sft

    rows, val = build_rows(world, cfg.train.sft)
    leak_check(rows, world)
    write_sft(rows, cfg.train.dataset)
    if cfg.train.val_dataset:
        write_sft(val, cfg.train.val_dataset)
    echo(f"          SFT: {len(rows)} rows {summary(rows)}")


def train_or_reuse(cfg: RunConfig, world: Any, fresh: bool, echo: Echo) -> Path:
    """The adapter folder: an earlier finished run of `train.run_name`, or a new training."""
    if not fresh:
        found = find_adapter(cfg)
        if found is not None:
            echo(f"          reusing adapter {found} (use --fresh to retrain)")
            return found
    out = train_dir(cfg)
    if fresh:
        shutil.rmtree(out, ignore_errors=True)
    else:  # an unfinished run resumes from its checkpoints only under the same recipe
        check_same_recipe(cfg)
    build_sft(cfg, world, echo)
    from train.swift import train  # ms-swift (GPU) or the CPU peft loop, as `train.kind` says

    return Path(train(cfg.train))


# --- 6-7: evaluate, report ---------------------------------------------------------------------

def system_stamp(cfg: RunConfig, sc: Any, test: list[Scenario], adapter: Path | None,
                 gate: float | None, lenient: float | None = None) -> dict:
    """What a system's results depend on: a results folder with another stamp is redone."""
    import hashlib

    system = sc.model_dump()
    if system.get("memory") == "reply":  # the behaviour before the field existed: same stamp
        system.pop("memory")
    gen = cfg.rag.generator.model_dump()
    for key in ("max_batch_tokens", "attn_impl", "prefix_cache"):  # absent when unset: stamps from before them stay valid
        if gen.get(key) in (None, False):
            gen.pop(key, None)
    stamp = {"system": system, "generator": gen,
             "retrieval": cfg.rag.retrieval.model_dump(),
             "items": hashlib.sha256("\n".join(s.qid for s in test).encode()).hexdigest()[:16]}
    if sc.uses_adapter:
        stamp["adapter"] = str(adapter.resolve()) if adapter is not None else None
    if sc.kind == "lora_rag":
        stamp["gate"] = gate
        if lenient is not None:  # absent otherwise: stamps from before the field stay valid
            stamp["gate_lenient"] = lenient
    if sc.kind in ("lora_rag", "prompted_detection"):
        fb = cfg.fallback.model_dump()
        if sc.kind == "prompted_detection":  # it runs without a gate: no gate setting changes its answers
            fb.pop("gate")
        elif fb["gate"]["lenient"] is None:  # absent when unused: stamps from before the field stay valid
            fb["gate"].pop("lenient")
        stamp["fallback"] = fb
    return stamp


def evaluate(cfg: RunConfig, parts: Parts, test: list[Scenario], paths: Paths, adapter: Path | None,
             systems: list[Any] | None = None) -> dict[str, Path]:
    """Closed-book systems first (their answers feed the bias metrics), then the rest.

    Each system's folder keeps a stamp of what its results depend on (model, adapter, gate,
    items); a changed stamp means that system is evaluated afresh, the others resume.
    """
    from eval.records import closed_book_map
    from eval.runner import run_eval
    from fallback.systems import build_system

    closed: dict[str | None, dict[str, str]] = {}
    out: dict[str, Path] = {}
    lora = cfg.fallback.detector.adapter
    for sc in sorted(systems or cfg.systems, key=lambda s: s.kind != "closed_book"):
        folder = paths.eval / sc.name
        stamp = system_stamp(cfg, sc, test, adapter, parts.gate_threshold, parts.lenient_threshold)
        marker = folder / "stamp.json"
        if folder.exists() and (not marker.exists() or json.loads(marker.read_text(encoding="utf-8")) != stamp):
            log.info("%s: model, adapter, gate or items changed: evaluating it afresh", sc.name)
            shutil.rmtree(folder)
        folder.mkdir(parents=True, exist_ok=True)
        marker.write_text(json.dumps(stamp, indent=1), encoding="utf-8")
        model = sc.adapter if sc.kind == "closed_book" else (lora if sc.kind == "lora_rag" else None)
        results = run_eval(build_system(sc, parts), test, folder, closed_book=closed.get(model), config=cfg,
                           batch_size=32)
        if sc.kind == "closed_book":
            closed[sc.adapter] = closed_book_map(results)
        out[sc.name] = folder
    return out


def report(cfg: RunConfig, paths: Paths, runs: dict[str, Path], echo: Echo) -> str:
    """The comparison report (eval.report: all systems, and the base-vs-LoRA pair) + headline."""
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
    echo(f"report: {paths.report / 'report.html'}"
         + (f" and {paths.report / 'base-vs-lora' / 'report.html'}" if pair else ""))
    return table


# --- the run -----------------------------------------------------------------------------------

def _describe_training(cfg: RunConfig, fresh: bool) -> str:
    from train.swift import train

    reuse = "" if fresh else f"reuse the adapter of run '{cfg.train.run_name}' if finished, else "
    return f"{reuse}build SFT ({cfg.train.dataset}) then: {train(cfg.train, dry_run=True)}"


def plan(cfg: RunConfig, fresh: bool) -> list[tuple[str, str]]:
    """(step, what it does) for every step, with the exact training command (--dry-run)."""
    root = Path(cfg.runs_dir) / cfg.name
    w, r = cfg.train.world, cfg.rag.retrieval
    systems = ", ".join(f"{s.name} ({s.kind}, {s.context})" for s in cfg.systems)
    base = f"prepare base model ({cfg.prepare_base}) -> {cfg.train.model}; " if cfg.prepare_base else ""
    gate = (f"{cfg.fallback.gate.signal} on dev, rule={cfg.fallback.gate.rule} -> <adapter>/gate.json"
            if cfg.fallback.gate.threshold is None else f"fixed threshold {cfg.fallback.gate.threshold}")
    return [
        ("world", f"build_world(seed={w.seed}, n_orgs={w.n_orgs}, known_fraction={w.known_fraction}, "
                  f"context_only_fraction={w.context_only_fraction}"
                  f"{', stratify_languages=True' if w.stratify_languages else ''}) -> {root / 'world'}"),
        ("index", f"build_from_chunks(world chunks) -> {cfg.rag.index.dir} ({r.mode}, top_n={r.top_n}, "
                  f"top_k={r.top_k}{', reranker ' + cfg.rag.reranker.model if cfg.rag.reranker else ''})"),
        ("scenarios", f"test: {'/'.join(cfg.eval.scenarios)} x {'/'.join(cfg.eval.knowledge)}, <= "
                      f"{cfg.eval.max_per_cell} per cell; dev: the facts of <= {cfg.calibration.max_items} "
                      f"known + never-learned items, each in phrasings {list(cfg.dev_phrasings())} -> "
                      f"{root / 'scenarios'}"),
        ("train", base + _describe_training(cfg, fresh)),
        ("calibrate", gate),
        ("evaluate", f"run_eval for {systems} -> {root / 'eval'}" + "".join(
            f"; then on {x.kind} ({x.path}, {x.split}, <= {x.max_per_cell or cfg.eval.max_per_cell} per cell, "
            f"its own index) -> {root / 'extra' / x.kind}" for x in cfg.extra_sets)),
        ("report", f"eval.report.write_report (all systems; base vs LoRA) + headline -> {root / 'report'}"),
    ]


def run(cfg: RunConfig, *, fresh: bool = False, dry_run: bool = False, echo: Echo = print) -> str | None:
    """The whole run (see module docstring); returns the headline table (None on --dry-run)."""
    if dry_run:
        for i, (step, what) in enumerate(plan(cfg, fresh), 1):
            echo(f"[{i}/{len(STEPS)}] {step:<9} {what}")
        return None
    from fallback.extra import check_extra_sets, evaluate_extra_sets
    from lorarag.runinfo import start_run

    extra_files = check_extra_sets(cfg)  # a missing data set fails now, not after the training
    paths = Paths(Path(cfg.runs_dir) / cfg.name)
    if fresh:
        shutil.rmtree(paths.eval, ignore_errors=True)
        shutil.rmtree(paths.report, ignore_errors=True)
    start_run(paths.root, cfg, seeds={"run": cfg.seed, "world": cfg.train.world.seed,
                                      "train": cfg.train.seed, "eval": cfg.eval.seed}, data=extra_files)
    p = Progress(echo)
    p.step("world", "generating the demo world")
    world = make_world(cfg, paths)
    p.step("index", f"indexing {len(world.chunks())} chunks")
    retriever = make_index(cfg, world)
    p.step("scenarios", "building test and dev scenarios")
    test, dev_known, dev_unseen = make_scenarios(cfg, world, paths)
    echo(f"          {len(test)} test items; dev {len(dev_known)} known + {len(dev_unseen)} never-learned")
    p.step("train", f"LoRA run '{cfg.train.run_name}'")
    if cfg.prepare_base is not None:
        BASE_PREPARERS[cfg.prepare_base](cfg.train.model)
    adapter = train_or_reuse(cfg, world, fresh, echo)
    p.step("calibrate", "gate threshold on the dev split")
    parts = build_parts(cfg, retriever, adapter, world)
    cal = calibrate_gate(cfg, parts, adapter, dev_known, dev_unseen, echo)
    if cal is not None:
        echo(f"          threshold {cal.threshold:.4f}: keeps {cal.known_kept:.0%} of known, rejects "
             f"{cal.unseen_rejected:.0%} of never-learned (AUROC {cal.auroc:.3f})")
    p.step("evaluate", f"{len(cfg.systems)} systems x {len(test)} items")
    runs = evaluate(cfg, parts, test, paths, adapter)
    p.step("report", str(paths.report))
    table = report(cfg, paths, runs, echo)
    evaluate_extra_sets(cfg, parts, paths.root / "extra", adapter, echo)
    parts.generator.close()
    echo(f"done in {time.perf_counter() - p.t0:.0f}s")
    return table


def calibrate_only(cfg: RunConfig, *, echo: Echo = print) -> Any:
    """`lorarag calibrate`: steps 1-3, the trained adapter, and a fresh gate.json."""
    paths = Paths(Path(cfg.runs_dir) / cfg.name)
    adapter = find_adapter(cfg)
    if adapter is None:
        from lorarag.cli import UserError

        raise UserError(f"no trained adapter for run '{cfg.train.run_name}': run `lorarag run` first")
    world = make_world(cfg, paths)
    retriever = make_index(cfg, world)
    _, dev_known, dev_unseen = make_scenarios(cfg, world, paths)
    parts = build_parts(cfg, retriever, adapter, world)
    cal = calibrate_gate(cfg, parts, adapter, dev_known, dev_unseen, echo, force=True)
    parts.generator.close()
    return cal
