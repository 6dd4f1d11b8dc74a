"""Stage 4 of a run: the base model folder, the SFT mix, and the LoRA (trained, resumed or reused)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable

from lorarag.core.errors import ConfigError
from lorarag.scenarios.world import World
from lorarag.study.config import RunConfig
from lorarag.study.layout import Echo
from lorarag.testing.tiny import build_causal_lm
from lorarag.train import runs, swift
from lorarag.train.sft import build_rows, leak_check, summary, write_sft
from lorarag.train.smollm2 import ensure_smollm2


def _smollm2(folder: str) -> None:
    ensure_smollm2(folder)


def _tiny_qwen3(folder: str) -> None:
    if not (Path(folder) / "config.json").is_file():
        build_causal_lm(folder)


# `prepare_base:` kinds: how a fresh machine gets the base model folder (no hub downloads).
BASE_PREPARERS: dict[str, Callable[[str], None]] = {"smollm2_gguf": _smollm2, "tiny_qwen3": _tiny_qwen3}


def train_dir(cfg: RunConfig) -> Path:
    """The training run folder, found by run name (train/runs.py's layout)."""
    return runs.run_dir(cfg.train)


def check_same_recipe(cfg: RunConfig) -> None:
    """ConfigError when `train.run_name`'s run dir was trained (or started) with another config."""
    changed = runs.config_changes(cfg.train)
    if changed:
        raise ConfigError(f"train run '{cfg.train.run_name}' was trained with another config (differs in "
                          f"{', '.join(changed)}): retrain with `lorarag run --fresh` or name the run anew")


def find_adapter(cfg: RunConfig) -> Path | None:
    """The final adapter of a finished training run of `train.run_name`, or None; ConfigError
    when that run was trained with another recipe (its saved config differs from `cfg.train`)."""
    try:
        path = runs.find_adapter(cfg.train.run_name, cfg.train.runs_dir)
    except FileNotFoundError:
        return None
    if not (path / "adapter_model.safetensors").is_file():
        return None
    check_same_recipe(cfg)
    return path


def build_sft(cfg: RunConfig, world: World, echo: Echo) -> None:
    """The SFT mix from the world (train/sft.py), leak-checked, written to `train.dataset`."""
    rows, val = build_rows(world, cfg.train.sft)
    leak_check(rows, world, (*cfg.eval.test_phrasings, *cfg.dev_phrasings()))
    write_sft(rows, cfg.train.dataset)
    if cfg.train.val_dataset:
        write_sft(val, cfg.train.val_dataset)
    echo(f"          SFT: {len(rows)} rows {summary(rows)}")


def train_or_reuse(cfg: RunConfig, write_sft: Callable[[], None], fresh: bool, echo: Echo) -> Path:
    """The adapter folder: an earlier finished run of `train.run_name`, or a new training on the
    SFT rows `write_sft()` writes to `train.dataset` (study/sources.py).

    An adapter is reused only when it was trained from exactly these rows, base and recipe: the
    rows are written (and leak-checked) first so their sha256 can be compared with the one saved
    in adapter.json (`runs.provenance_changes`). Any difference is refused with a ConfigError
    naming the part that differs and pointing to `--fresh` (which retrains in that run dir) or a
    new run name: the old run dir may be another config's, so it is never replaced unasked. On a
    match the rows on disk are the ones the adapter trained on, so the leak check that ran on them
    holds for the adapter too.
    """
    if not fresh:  # the recipe first: no SFT is rebuilt for a run refused anyway
        check_same_recipe(cfg)
    write_sft()
    if not fresh:
        found = find_adapter(cfg)
        if found is not None:
            changed = runs.provenance_changes(cfg.train)
            if changed:
                raise ConfigError(f"train run '{cfg.train.run_name}' was trained from other data (differs in "
                                  f"{'; '.join(changed)}): rerun with `lorarag run --fresh` or name the run anew")
            echo(f"          reusing adapter {found} (same SFT rows, base and recipe; --fresh retrains)")
            return found
    out = train_dir(cfg)
    if fresh:
        shutil.rmtree(out, ignore_errors=True)
    return Path(swift.train(cfg.train))  # ms-swift (GPU) or the CPU peft loop, as `train.kind` says


def describe_training(cfg: RunConfig, fresh: bool) -> str:
    """What stage 4 will do, with the exact training command (for --dry-run)."""
    reuse = "" if fresh else f"reuse the adapter of run '{cfg.train.run_name}' if finished, else "
    return f"{reuse}build SFT ({cfg.train.dataset}) then: {swift.train(cfg.train, dry_run=True)}"
