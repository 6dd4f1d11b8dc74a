"""`lorarag train <config>`: run `swift sft --tuner_type lora` (or the CPU `peft` loop) in a run dir.

The run dir `runs/train/<run_name>/` keeps the resolved config and run.json (git SHA, versions,
seeds, data hashes: lorarag/core/runinfo.py), ms-swift's own `output/args.json`, the checkpoints
under `output/checkpoint-N/`, and `adapter.json`: the pointer to the final adapter that later
commands resolve with `find_adapter(run name or path)`, with `trained_on`: the sha256 of the SFT
rows and of the base model's files it was trained from (`provenance_changes` compares them). A
killed run resumes from its last checkpoint (`--resume_from_checkpoint`). Multi-GPU / multi-node
goes through ms-swift's torchrun launch (NPROC_PER_NODE, NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT in the environment) and
DeepSpeed (`swift: {deepspeed: zero2}`); `slurm_script` writes an sbatch file for a cluster.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from lorarag.core.config import load_config
from lorarag.core.errors import ConfigError
from lorarag.core.runinfo import start_run
from lorarag.fallback.gate import ADAPTER_FILES, file_sha256
from lorarag.train.config import TrainConfig, check_swift_args

# ms-swift 4.x flags that make a local, offline run work (see the measured-stack notes).
SWIFT_DEFAULTS: dict[str, Any] = {
    "add_version": False,  # checkpoints straight under output_dir
    "check_model": False,  # no hub look-up for a local folder
    "dataloader_num_workers": 0,
    "dataset_num_proc": 1,
    "report_to": "none",
}
LAUNCH_ENV = ("NPROC_PER_NODE", "NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES")


class TrainError(ConfigError):
    """Training could not start or did not produce an adapter."""


def load_train_config(path: str | Path) -> TrainConfig:
    """Read and validate a train YAML."""
    return load_config(path, TrainConfig)


def run_dir(cfg: TrainConfig) -> Path:
    """runs/train/<run_name>."""
    return Path(cfg.runs_dir) / cfg.run_name


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
    old = _flat(load_train_config(saved).model_dump(mode="json", exclude=set(LAUNCH_FIELDS)))
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
        raise ConfigError(f"{path}: not an adapter pointer (no \"adapter\" path): retrain with --fresh")
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
        raise ConfigError(f"{weights}: truncated ({size} bytes, its header needs {8 + n + end}): "
                          f"retrain with --fresh")


def _flag_values(value: Any) -> list[str]:
    if isinstance(value, bool):
        return ["true" if value else "false"]
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    if isinstance(value, dict):
        return [json.dumps(value)]
    return [str(value)]


# A checkpoint is complete once its trainer state is written: HF Trainer (ms-swift) writes
# trainer_state.json after the adapter, optimizer and RNG state; the peft loop renames
# trainer_state.pt into place last. A run killed mid-save leaves a folder with the adapter but no
# state, which `--resume_from_checkpoint` cannot load (measured: a flaky CI failure).
_CHECKPOINT_DONE = ("trainer_state.json", "trainer_state.pt")


def checkpoint_complete(folder: Path) -> bool:
    """True when `folder` holds an adapter (weights + config) and its trainer state."""
    return ((folder / "adapter_model.safetensors").is_file() and (folder / "adapter_config.json").is_file()
            and any((folder / name).is_file() for name in _CHECKPOINT_DONE))


def last_checkpoint(output_dir: str | Path) -> Path | None:
    """The highest complete `checkpoint-N` folder (adapter + trainer state), or None."""
    out = Path(output_dir)
    cks = [p for p in out.glob("checkpoint-*") if p.name.split("-")[-1].isdigit() and checkpoint_complete(p)]
    return max(cks, key=lambda p: int(p.name.split("-")[-1])) if cks else None


def swift_command(cfg: TrainConfig, resume_from: Path | None = None) -> list[str]:
    """The exact `swift sft` command line for this config."""
    out = run_dir(cfg) / "output"
    cmd = ["swift", "sft", "--model", cfg.model, "--tuner_type", "lora", "--dataset", cfg.dataset]
    if cfg.val_dataset:
        cmd += ["--val_dataset", cfg.val_dataset]
    cmd += ["--output_dir", str(out), "--seed", str(cfg.seed)]
    for k, v in {**SWIFT_DEFAULTS, **cfg.swift}.items():
        if v is None:
            continue
        cmd += [f"--{k}", *_flag_values(v)]
    if resume_from is not None:
        cmd += ["--resume_from_checkpoint", str(resume_from)]
    return cmd


def peft_command(cfg: TrainConfig) -> list[str]:
    """The command of the CPU `peft` trainer kind (resumes by itself from its last checkpoint)."""
    out = run_dir(cfg) / "output"
    return [sys.executable, "-m", "lorarag.train.peft_trainer", "--model", cfg.model, "--dataset", cfg.dataset,
            "--output_dir", str(out), "--seed", str(cfg.seed), "--args", json.dumps(cfg.swift),
            *(["--share_prefix"] if cfg.share_prefix else [])]


def train_env(cfg: TrainConfig) -> dict[str, str]:
    """Environment for the launch: ms-swift reads NPROC_PER_NODE/NNODES to start torchrun."""
    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("MODELSCOPE_OFFLINE", "1")
    if cfg.nproc_per_node:
        env.setdefault("NPROC_PER_NODE", str(cfg.nproc_per_node))
    if cfg.nnodes:
        env.setdefault("NNODES", str(cfg.nnodes))
    return env


def launch_env(env: dict[str, str]) -> dict[str, str]:
    """`env` with this interpreter's bin folder first on PATH, so `swift` (and the torchrun it
    starts) resolve to the same virtual environment even when it was not activated (make test)."""
    bindir = str(Path(sys.executable).parent)
    return {**env, "PATH": os.pathsep.join([bindir, env.get("PATH", "")])}


def command_for(cfg: TrainConfig) -> list[str]:
    """The training command of the configured kind, resuming when a checkpoint exists."""
    if cfg.kind == "peft":
        return peft_command(cfg)
    check_swift_args(cfg.swift, f"{cfg.run_name}: swift")
    return swift_command(cfg, last_checkpoint(run_dir(cfg) / "output"))


def render(cmd: list[str], env: dict[str, str] | None = None) -> str:
    """A shell-ready rendering of the command, with the launch variables that are set."""
    pre = [f"{k}={shlex.quote(env[k])}" for k in LAUNCH_ENV if env and k in env]
    return " ".join(pre + [shlex.quote(c) for c in cmd])


def _die_with_parent() -> None:
    """In the child, before exec: ask Linux to send SIGTERM when the parent dies (even by SIGKILL)."""
    import ctypes
    import signal

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the parent's own handler below still stops it
        pass


def run_child(cmd: list[str], env: dict[str, str]) -> int:
    """Run the training command and wait; an interrupted or killed `lorarag` never leaves it
    training on in the background (it would hold the CPUs and write checkpoints unseen)."""
    proc = subprocess.Popen(cmd, env=env, preexec_fn=_die_with_parent if sys.platform == "linux" else None)
    try:
        return proc.wait()
    except BaseException:  # Ctrl-C, SIGTERM turned into an exception: stop the child, then re-raise
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        raise


def train(cfg: TrainConfig, *, dry_run: bool = False, config_path: str | None = None) -> Path | str:
    """Run training; returns the final adapter folder (or, with dry_run, the command text)."""
    cmd = command_for(cfg)
    env = train_env(cfg)
    if dry_run:
        return render(cmd, env)
    for p in (cfg.model, cfg.dataset):
        if not Path(p).exists():
            raise TrainError(f"{cfg.run_name}: {p} does not exist")
    changed = config_changes(cfg)  # start_run below rewrites the saved config: compare first
    if changed:  # its checkpoints would be resumed under another recipe
        raise TrainError(f"{cfg.run_name}: {run_dir(cfg)} was trained with another config (differs in "
                         f"{', '.join(changed)}); remove it or name the run anew")

    data = [cfg.dataset] + ([cfg.val_dataset] if cfg.val_dataset else [])
    resumed = resume_changes(cfg, data)  # start_run below rewrites run.json: compare first
    if resumed:
        raise TrainError(f"{cfg.run_name}: the checkpoints in {run_dir(cfg) / 'output'} were trained on other "
                         f"SFT rows ({', '.join(resumed)} changed); rerun with --fresh or name the run anew")
    record = training_record(cfg)  # the rows and base as this training reads them
    rd = start_run(run_dir(cfg), cfg, seeds={"seed": cfg.seed}, data=data, command=cmd)
    (rd / "command.sh").write_text(render(cmd, env) + "\n", encoding="utf-8")
    returncode = run_child(cmd, launch_env(env))
    if returncode != 0:
        raise TrainError(f"{cfg.run_name}: training exited with status {returncode} "
                         f"(rerun the same command to resume from the last checkpoint)")
    final = last_checkpoint(rd / "output")
    if final is None:
        raise TrainError(f"{cfg.run_name}: training finished without a checkpoint in {rd / 'output'}")
    pointer = {"adapter": str(final), "base_model": cfg.model, "kind": cfg.kind,
               "model_type": cfg.swift.get("model_type"), "template": cfg.swift.get("template"),
               "system": cfg.swift.get("system"), "config": config_path, "trained_on": record}
    (rd / "adapter.json").write_text(json.dumps(pointer, indent=2), encoding="utf-8")
    return final


def find_adapter(run_name_or_path: str | Path, runs_dir: str | Path = "runs/train") -> Path:
    """The adapter folder of a run (by name, run dir, or the adapter folder itself)."""
    p = Path(run_name_or_path)
    if (p / "adapter_config.json").is_file():
        return p
    for cand in (p / "adapter.json", Path(runs_dir) / str(run_name_or_path) / "adapter.json"):
        if cand.is_file():
            return Path(read_pointer(cand)["adapter"])
    raise FileNotFoundError(f"no adapter for {run_name_or_path!r}: not an adapter folder and no "
                            f"{Path(runs_dir) / str(run_name_or_path) / 'adapter.json'} (train it first)")


def adapter_info(run_name_or_path: str | Path, runs_dir: str | Path = "runs/train") -> dict[str, Any]:
    """The pointer of a run (base model, template, ...), {} when given a bare adapter folder."""
    for cand in (Path(run_name_or_path) / "adapter.json", Path(runs_dir) / str(run_name_or_path) / "adapter.json"):
        if cand.is_file():
            return read_pointer(cand)
    return {}


def slurm_script(cfg: TrainConfig, config_path: str) -> str:
    """An sbatch script: one task per node, torchrun via ms-swift's env, rendezvous on node 0."""
    opts = {"job-name": cfg.run_name, "nodes": str(cfg.nnodes or 1), "ntasks-per-node": "1",
            "output": f"{run_dir(cfg)}/slurm-%j.out", **cfg.slurm}
    lines = ["#!/bin/bash"] + [f"#SBATCH --{k}={v}" for k, v in opts.items()]
    lines += [
        "set -euo pipefail",
        "export MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n1)",
        "export MASTER_PORT=${MASTER_PORT:-29500}",
        f"export NNODES={cfg.nnodes or 1}",
        f"export NPROC_PER_NODE={cfg.nproc_per_node or 1}",
        # NODE_RANK must be set per node, so each task exports it before starting lorarag.
        f"srun bash -c 'NODE_RANK=$SLURM_NODEID lorarag train {shlex.quote(config_path)}'",
    ]
    return "\n".join(lines) + "\n"


def final_adapter(run_name_or_path: str | Path, runs_dir: str | Path = "runs/train") -> Path | None:
    """Like `find_adapter`, but None when the run has not finished (no adapter yet)."""
    try:
        path = find_adapter(run_name_or_path, runs_dir)
    except FileNotFoundError:
        return None
    return path if (path / "adapter_model.safetensors").is_file() else None
