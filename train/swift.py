"""`lorarag train <config>`: run `swift sft --tuner_type lora` (or the CPU `peft` loop) in a run dir.

The run dir's layout and the look-ups in it (`run_dir`, `last_checkpoint`, `find_adapter`, the
recipe and provenance checks) are train/runs.py's; this module launches the training into it,
with ms-swift's own `output/args.json` beside the checkpoints, and writes `adapter.json` at the
end. A killed run resumes from its last checkpoint (`--resume_from_checkpoint`). Multi-GPU /
multi-node goes through ms-swift's torchrun launch (NPROC_PER_NODE, NNODES, NODE_RANK, MASTER_ADDR,
MASTER_PORT in the environment) and DeepSpeed (`swift: {deepspeed: zero2}`); `slurm_script` writes
an sbatch file for a cluster.
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
from lorarag.core.lock import hold, release
from lorarag.core.runinfo import start_run
from lorarag.train.config import TrainConfig, check_swift_args
from lorarag.train.runs import config_changes, last_checkpoint, resume_changes, run_dir, training_record

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


def _flag_values(value: Any) -> list[str]:
    if isinstance(value, bool):
        return ["true" if value else "false"]
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    if isinstance(value, dict):
        return [json.dumps(value)]
    return [str(value)]


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
    return [
        sys.executable,
        "-m",
        "lorarag.train.peft_trainer",
        "--model",
        cfg.model,
        "--dataset",
        cfg.dataset,
        "--output_dir",
        str(out),
        "--seed",
        str(cfg.seed),
        "--args",
        json.dumps(cfg.swift),
        *(["--val_dataset", cfg.val_dataset] if cfg.val_dataset else []),
        *(["--share_prefix"] if cfg.share_prefix else []),
    ]


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
    starts) resolve to the same virtual environment even when it was not activated (make test), and
    PYTHONHASHSEED 0 unless `env` sets one: peft writes adapter_config.json's target_modules from a set,
    so under a random hash seed the same training writes another file, and the adapter's content id
    (the gate's and the result stamps' `adapter_sha256`) would differ between identical trainings."""
    bindir = str(Path(sys.executable).parent)
    return {"PYTHONHASHSEED": "0", **env, "PATH": os.pathsep.join([bindir, env.get("PATH", "")])}


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
    """In the child, before exec: ask Linux to send SIGTERM when the parent dies (even by SIGKILL),
    and ignore Ctrl-C: the terminal sends it to the whole group, the parent stops the child itself
    (`run_child`), and a child interrupted while it imports torch would print a traceback."""
    import ctypes
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # kept across exec; Python leaves an ignored SIGINT ignored
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
    hold(run_dir(cfg), "training run folder")  # one trainer per run folder (core/lock.py)
    changed = config_changes(cfg)  # start_run below rewrites the saved config: compare first
    if changed:  # its checkpoints would be resumed under another recipe
        raise TrainError(
            f"{cfg.run_name}: {run_dir(cfg)} was trained with another config (differs in "
            f"{', '.join(changed)}); remove it or name the run anew"
        )

    data = [cfg.dataset] + ([cfg.val_dataset] if cfg.val_dataset else [])
    resumed = resume_changes(cfg, data)  # start_run below rewrites run.json: compare first
    if resumed:
        raise TrainError(
            f"{cfg.run_name}: the checkpoints in {run_dir(cfg) / 'output'} were trained on other "
            f"SFT rows ({', '.join(resumed)} changed); rerun with --fresh or name the run anew"
        )
    record = training_record(cfg)  # the rows and base as this training reads them
    rd = start_run(run_dir(cfg), cfg, seeds={"seed": cfg.seed}, data=data, command=cmd)
    (rd / "command.sh").write_text(render(cmd, env) + "\n", encoding="utf-8")
    returncode = run_child(cmd, launch_env(env))
    if returncode != 0:
        raise TrainError(
            f"{cfg.run_name}: training exited with status {returncode} "
            f"(rerun the same command to resume from the last checkpoint)"
        )
    final = last_checkpoint(rd / "output")
    if final is None:
        raise TrainError(f"{cfg.run_name}: training finished without a checkpoint in {rd / 'output'}")
    pointer = {
        "adapter": str(final),
        "base_model": cfg.model,
        "kind": cfg.kind,
        "model_type": cfg.swift.get("model_type"),
        "template": cfg.swift.get("template"),
        "system": cfg.swift.get("system"),
        "config": config_path,
        "trained_on": record,
    }
    (rd / "adapter.json").write_text(json.dumps(pointer, indent=2), encoding="utf-8")
    release(run_dir(cfg))
    return final


def slurm_script(cfg: TrainConfig, config_path: str) -> str:
    """An sbatch script: one task per node, torchrun via ms-swift's env, rendezvous on node 0."""
    opts = {
        "job-name": cfg.run_name,
        "nodes": str(cfg.nnodes or 1),
        "ntasks-per-node": "1",
        "output": f"{run_dir(cfg)}/slurm-%j.out",
        **cfg.slurm,
    }
    lines = ["#!/bin/bash"] + [f"#SBATCH --{k}={v}" for k, v in opts.items()]
    lines += [
        "set -euo pipefail",
        'export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)',
        "export MASTER_PORT=${MASTER_PORT:-29500}",
        f"export NNODES={cfg.nnodes or 1}",
        f"export NPROC_PER_NODE={cfg.nproc_per_node or 1}",
        # NODE_RANK must be set per node, so each task exports it before starting lorarag.
        f"srun bash -c 'NODE_RANK=$SLURM_NODEID lorarag train {shlex.quote(config_path)}'",
    ]
    return "\n".join(lines) + "\n"
