"""A training run's folder: where it is, what it was trained from, and which adapter it left.

`runs/train/<run_name>/` (`run_dir`) holds the resolved `config.yaml` and `run.json` (git SHA,
versions, seeds, data hashes: core/runinfo.py), the checkpoints under
`output/checkpoint-N/` (`last_checkpoint`: the highest complete one), and `adapter.json`: the
pointer to the final adapter that later commands resolve with `find_adapter(run name or path)`,
with `trained_on`, the sha256 of the SFT rows and of the base model's files it was trained from
(`provenance_changes` compares them, `config_changes` the recipe). The launcher that fills the
folder is train/swift.py; this module only reads it, so a reader (probe, export, the study's
reuse check, `lorarag serve`) depends on the layout and not on how training is started.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lorarag.core.config import load_config
from lorarag.core.errors import ConfigError
from lorarag.core.hashing import file_sha256
from lorarag.core.paths import child
from lorarag.fallback.gate import ADAPTER_FILES
from lorarag.train.config import TrainConfig


def run_dir(cfg: TrainConfig) -> Path:
    """runs/train/<run_name>, refused unless it resolves inside runs_dir (core/paths.child)."""
    return child(cfg.runs_dir, cfg.run_name, "train.run_name")


# What says where or how a run is launched, not what it trains.
LAUNCH_FIELDS = frozenset({"runs_dir", "nproc_per_node", "nnodes", "slurm"})


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def config_changes(cfg: TrainConfig) -> list[str]:
    """The fields (dotted, e.g. `swift.attn_impl`) in which `cfg` differs from the config saved in
    its run dir when that run was trained; [] when none was saved. Fields added since take
    their defaults on the saved side, so an old run stays reusable by an unchanged recipe."""
    saved = run_dir(cfg) / "config.yaml"
    if not saved.is_file():
        return []
    old = _flat(load_config(saved, TrainConfig).model_dump(mode="json", exclude=set(LAUNCH_FIELDS)))
    new = _flat(cfg.model_dump(mode="json", exclude=set(LAUNCH_FIELDS)))
    return sorted(k for k in old.keys() | new.keys() if old.get(k, KeyError) != new.get(k, KeyError))


# What of a base model folder shapes the training: weights, configs, tokenizer (not READMEs).
BASE_SUFFIXES = (".json", ".safetensors", ".bin", ".model", ".gguf", ".txt", ".tiktoken")


def base_fingerprint(model: str) -> dict[str, str]:
    """{file name: sha256} of the base model folder's top-level files that shape training
    (`BASE_SUFFIXES`); a model given by name (no folder) is recorded by that name."""
    folder = Path(model)
    if not folder.is_dir():
        return {"(name)": model}
    return {f.name: file_sha256(f) for f in sorted(folder.iterdir()) if f.is_file() and f.suffix in BASE_SUFFIXES}


def training_record(cfg: TrainConfig) -> dict[str, Any]:
    """What an adapter was trained from besides its recipe (the run dir's config.yaml): the sha256
    of its SFT rows (`train`, and `val` when set) and `base_fingerprint` of the base model.
    Saved in adapter.json as `trained_on`; compared by `provenance_changes` before any reuse."""
    rows = {"train": file_sha256(cfg.dataset) if Path(cfg.dataset).is_file() else None}
    if cfg.val_dataset:
        rows["val"] = file_sha256(cfg.val_dataset) if Path(cfg.val_dataset).is_file() else None
    return {"rows": rows, "base": base_fingerprint(cfg.model)}


def _short(sha: str | None) -> str:
    return sha[:12] if sha else "none"


def provenance_changes(cfg: TrainConfig) -> list[str]:
    """How the finished run of `cfg.run_name` was trained from other data than `cfg` gives now:
    one phrase per differing part (`SFT rows (train: sha a vs b)`, `base model (files ...)`);
    [] when rows and base match exactly. An adapter.json without the record (an older lorarag)
    is never taken as a match."""
    saved = read_pointer(run_dir(cfg) / "adapter.json").get("trained_on")
    if not isinstance(saved, dict):
        return ["SFT rows and base model (adapter.json records neither)"]
    now = training_record(cfg)
    out: list[str] = []
    old_rows, new_rows = saved.get("rows") or {}, now["rows"]
    for key in sorted(set(old_rows) | set(new_rows)):
        if old_rows.get(key) != new_rows.get(key):
            out.append(f"SFT rows ({key}: sha {_short(old_rows.get(key))} vs {_short(new_rows.get(key))})")
    old_base, new_base = saved.get("base") or {}, now["base"]
    files = sorted(k for k in set(old_base) | set(new_base) if old_base.get(k) != new_base.get(k))
    if files:
        out.append(f"base model ({', '.join(files[:4])}{' ...' if len(files) > 4 else ''})")
    return out


def resume_changes(cfg: TrainConfig, data: list[str]) -> list[str]:
    """The SFT files whose sha256 differs from the one run.json saved when the checkpoints that a
    resume would continue were started; [] without checkpoints or without a readable run.json."""
    if last_checkpoint(run_dir(cfg) / "output") is None:
        return []
    try:
        saved = json.loads((run_dir(cfg) / "run.json").read_text(encoding="utf-8")).get("data_hashes") or {}
    except (OSError, ValueError, AttributeError):
        return []
    return [p for p in data if p in saved and saved[p] != (file_sha256(p) if Path(p).is_file() else None)]


def read_pointer(path: Path) -> dict[str, Any]:
    """adapter.json as a dict; ConfigError naming the file when it is garbled."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: garbled adapter pointer ({exc}): retrain with --fresh") from None
    if not isinstance(data, dict) or not isinstance(data.get("adapter"), str):
        raise ConfigError(f'{path}: not an adapter pointer (no "adapter" path): retrain with --fresh')
    return data


def check_adapter(folder: str | Path) -> None:
    """ConfigError naming the file when an adapter folder cannot be loaded: a garbled
    adapter_config.json, or adapter_model.safetensors truncated or without a valid header
    (safetensors: 8-byte little-endian header length, JSON header, then the tensor bytes)."""
    folder = Path(folder)
    cfg_file, weights = (folder / n for n in ADAPTER_FILES)
    for f in (cfg_file, weights):
        if not f.is_file():
            raise ConfigError(f"{f}: missing: retrain with --fresh")
    try:
        if not isinstance(json.loads(cfg_file.read_text(encoding="utf-8")), dict):
            raise ValueError("not a JSON object")
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{cfg_file}: garbled adapter config ({exc}): retrain with --fresh") from None
    size = weights.stat().st_size
    try:
        with weights.open("rb") as fh:
            n = int.from_bytes(fh.read(8), "little")
            if size < 8 or n <= 0 or 8 + n > size:
                raise ValueError(f"header of {n} bytes in a file of {size}")
            header = json.loads(fh.read(n))
        end = max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"), default=0)
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
        raise ConfigError(f"{weights}: not a readable safetensors file ({exc}): retrain with --fresh") from None
    if 8 + n + end > size:
        raise ConfigError(f"{weights}: truncated ({size} bytes, its header needs {8 + n + end}): retrain with --fresh")


# A checkpoint is complete once its trainer state is written: HF Trainer (ms-swift) writes
# trainer_state.json after the adapter, optimizer and RNG state; the peft loop renames
# trainer_state.pt into place last. A run killed mid-save leaves a folder with the adapter but no
# state, which `--resume_from_checkpoint` cannot load (measured: a flaky CI failure).
_CHECKPOINT_DONE = ("trainer_state.json", "trainer_state.pt")


def checkpoint_complete(folder: Path) -> bool:
    """True when `folder` holds an adapter (weights + config) and its trainer state."""
    return (
        (folder / "adapter_model.safetensors").is_file()
        and (folder / "adapter_config.json").is_file()
        and any((folder / name).is_file() for name in _CHECKPOINT_DONE)
    )


def last_checkpoint(output_dir: str | Path) -> Path | None:
    """The highest complete `checkpoint-N` folder (adapter + trainer state), or None."""
    out = Path(output_dir)
    cks = [p for p in out.glob("checkpoint-*") if p.name.split("-")[-1].isdigit() and checkpoint_complete(p)]
    return max(cks, key=lambda p: int(p.name.split("-")[-1])) if cks else None


def find_adapter(run_name_or_path: str | Path, runs_dir: str | Path = "runs/train") -> Path:
    """The adapter folder of a run (by name, run dir, or the adapter folder itself)."""
    p = Path(run_name_or_path)
    if (p / "adapter_config.json").is_file():
        return p
    for cand in (p / "adapter.json", Path(runs_dir) / str(run_name_or_path) / "adapter.json"):
        if cand.is_file():
            return Path(read_pointer(cand)["adapter"])
    raise FileNotFoundError(
        f"no adapter for {run_name_or_path!r}: not an adapter folder and no "
        f"{Path(runs_dir) / str(run_name_or_path) / 'adapter.json'} (train it first)"
    )


def adapter_info(run_name_or_path: str | Path, runs_dir: str | Path = "runs/train") -> dict[str, Any]:
    """The pointer of a run (base model, template, ...), {} when given a bare adapter folder."""
    for cand in (Path(run_name_or_path) / "adapter.json", Path(runs_dir) / str(run_name_or_path) / "adapter.json"):
        if cand.is_file():
            return read_pointer(cand)
    return {}


def final_adapter(run_name_or_path: str | Path, runs_dir: str | Path = "runs/train") -> Path | None:
    """Like `find_adapter`, but None when the run has not finished (no adapter yet)."""
    try:
        path = find_adapter(run_name_or_path, runs_dir)
    except FileNotFoundError:
        return None
    return path if (path / "adapter_model.safetensors").is_file() else None
