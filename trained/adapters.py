"""A run's trained adapters, found and checked before anything loads.

`trained_adapter(cfg)` is the LoRA of `train.run_name` once its training finished (train/runs.py's
`find_adapter` reads the run's pointer); a run trained with another recipe is refused. When a system
answers or reads with RAG-SFT, the run has a second adapter, trained by the same recipe on the
LoRA's rows re-posed as grounded rows (`rag_sft_config` says where). `check_base` refuses an adapter
trained on another base model than the one now at its path: `load_run` (`ask --run`, `serve`),
`lorarag eval` and `--merge` call it before any model loads.
"""

from __future__ import annotations

import logging
from pathlib import Path

from lorarag.core.errors import ConfigError
from lorarag.train import runs
from lorarag.train.config import DEFAULTS, TrainConfig
from lorarag.trained.config import RunConfig

log = logging.getLogger(__name__)


def train_dir(cfg: RunConfig) -> Path:
    """The training run folder, found by run name (train/runs.py's layout)."""
    return runs.run_dir(cfg.train)


def check_same_recipe(cfg: RunConfig) -> None:
    """ConfigError when `train.run_name`'s run dir was trained (or started) with another config."""
    changed = runs.config_changes(cfg.train)
    if changed:
        raise ConfigError(
            f"train run '{cfg.train.run_name}' was trained with another config (differs in "
            f"{', '.join(changed)}): retrain with `lorarag run --fresh` or name the run anew"
        )


def trained_adapter(cfg: RunConfig) -> Path | None:
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


def find_rag_sft(cfg: RunConfig) -> Path | None:
    """The finished RAG-SFT adapter of the run, or None (ConfigError as `trained_adapter`)."""
    return trained_adapter(rag_sft_config(cfg))


def needs_rag_sft(cfg: RunConfig) -> bool:
    """Whether a listed system answers or reads with the RAG-SFT adapter (so the run trains it)."""
    return any(s.uses_rag_sft for s in cfg.systems)


def _beside(dataset: str) -> str:
    p = Path(dataset)
    return str(p.parent / "rag-sft" / p.name)


def rag_sft_config(cfg: RunConfig) -> RunConfig:
    """`cfg` with the RAG-SFT adapter's training section: the LoRA's recipe, seed and base, its
    own run name and rows (module docstring), and `swift.max_length` at least the generator's
    window (`rag.generator.max_model_len`). The LoRA's max_length is sized to its own prompt;
    the base RAG prompt is longer (its system prompt is 69 SmolLM2 tokens in English, 153 in
    Chinese), so the LoRA's 320 would drop every Chinese grounded row of the CPU demo (208 of
    1,392 rows: other facts, fewer steps). A row that fits the window can be asked at test time,
    so none is dropped (max_length only filters rows; both trainers delete longer ones)."""
    t = cfg.train
    swift_args = dict(t.swift)
    own = t.swift.get("max_length", DEFAULTS["max_length"] if t.kind == "peft" else None)
    if own is not None:  # None: ms-swift's own default, the model's length
        swift_args["max_length"] = max(int(own), cfg.rag.generator.max_model_len)
    train = t.model_copy(
        update={
            "run_name": f"{t.run_name}-rag-sft",
            "dataset": _beside(t.dataset),
            "val_dataset": _beside(t.val_dataset) if t.val_dataset else None,
            "swift": swift_args,
        }
    )
    return cfg.model_copy(update={"train": train})


def check_base(train: TrainConfig, adapter: Path, generator_model: str) -> None:
    """ConfigError (one line) when the adapter of run `train.run_name` was trained on another base
    model than the one it is about to be loaded onto (`generator_model` when it is a folder, else
    the base path adapter.json records): same path, other files. An adapter.json without the
    record (an older lorarag) cannot be checked: a warning."""
    pointer_file = runs.run_dir(train) / "adapter.json"
    if not pointer_file.is_file():
        return
    pointer = runs.read_pointer(pointer_file)
    record = pointer.get("trained_on")
    saved = record.get("base") if isinstance(record, dict) else None
    if not isinstance(saved, dict) or not saved:
        log.warning("%s: records no base model fingerprint (an older lorarag): the base cannot be checked", pointer_file)
        return
    base = generator_model if Path(generator_model).is_dir() else str(pointer.get("base_model") or train.model)
    now = runs.base_fingerprint(base)
    if ("(name)" in saved) != ("(name)" in now):  # a hub name on one side, files on the other: not comparable
        return
    files = sorted(k for k in set(saved) | set(now) if saved.get(k) != now.get(k))
    if files:
        raise ConfigError(
            f"{adapter}: trained on another base model than the one now at {base} "
            f"({', '.join(files[:4])}{' ...' if len(files) > 4 else ''} differ): "
            "put its base back, or retrain with `lorarag run --fresh`"
        )
