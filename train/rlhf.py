"""Preference training after SFT, its one entry point (`train_preference`): the exact `swift rlhf`
command (the `swift` kind, GPU) or the CPU loop of train/preference_loop.py (the `peft` kind), run
in `<run dir>/preference/`, and its record in adapter.json.

ms-swift continues the SFT LoRA with `--adapters <SFT checkpoint>`; for DPO `--ref_adapters` names
the same checkpoint, so the reference is the SFT model (ms-swift 4.x's documented recipe for DPO
after LoRA SFT); ORPO has no reference. The SFT run's ms-swift arguments are passed on (model type,
template, dtype, lengths, batch), with the preference section's learning rate, epochs, steps,
batch and beta in their place; training follows `train.seed` (which `lorarag seeds` varies; the
pairs, like the SFT rows, are shared by the seeds). When it finishes, adapter.json's `adapter`
points at the preference checkpoint (so every later stage evaluates it), `sft_adapter` at the SFT
one, and `preference` records the sha256 of the pairs and the recipe: `preference_changes`
compares them before reuse.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

from lorarag.core.hashing import file_sha256
from lorarag.train.config import TrainConfig
from lorarag.train.runs import last_checkpoint, read_pointer, run_dir
from lorarag.train.swift import SWIFT_DEFAULTS, TrainError, _flag_values, launch_env, render, run_child, train_env

# What the preference section sets in place of the SFT run's arguments of the same meaning.
_REPLACED = (
    "learning_rate",
    "num_train_epochs",
    "max_steps",
    "per_device_train_batch_size",
    "beta",
    "warmup_ratio",
    "lr_scheduler_type",
)


def preference_dir(cfg: TrainConfig) -> Path:
    """`<run dir>/preference`: its checkpoints and logging."""
    return run_dir(cfg) / "preference"


def sft_placeholder(cfg: TrainConfig) -> str:
    """The SFT adapter a dry run names before SFT has run."""
    return str(run_dir(cfg) / "output" / "checkpoint-<last>")


def rlhf_command(cfg: TrainConfig, pairs: str | Path, sft_adapter: str | Path) -> list[str]:
    """The exact `swift rlhf` command line for `cfg.preference` on `pairs`, from `sft_adapter`."""
    p = cfg.preference
    cmd = [
        "swift",
        "rlhf",
        "--rlhf_type",
        p.type,
        "--model",
        cfg.model,
        "--tuner_type",
        "lora",
        "--adapters",
        str(sft_adapter),
    ]
    if p.type == "dpo":
        cmd += ["--ref_adapters", str(sft_adapter)]
    cmd += ["--dataset", str(pairs), "--output_dir", str(preference_dir(cfg)), "--seed", str(cfg.seed)]
    ours = {
        "beta": p.beta,
        "learning_rate": p.learning_rate,
        "num_train_epochs": p.num_train_epochs,
        "per_device_train_batch_size": p.per_device_train_batch_size,
        **({"max_steps": p.max_steps} if p.max_steps > 0 else {}),
        **({"rpo_alpha": p.rpo_alpha} if p.type == "dpo" and p.rpo_alpha is not None else {}),
    }
    sft = {k: v for k, v in cfg.swift.items() if k not in _REPLACED}
    for k, v in {**SWIFT_DEFAULTS, **sft, **ours}.items():
        if v is not None:
            cmd += [f"--{k}", *_flag_values(v)]
    return cmd


def cpu_loop_command(cfg: TrainConfig, pairs: str | Path, sft_adapter: str | Path) -> list[str]:
    """The CPU loop's command (train/preference_loop.py) for the `peft` kind."""
    return [
        sys.executable,
        "-m",
        "lorarag.train.preference_loop",
        "--model",
        cfg.model,
        "--adapter",
        str(sft_adapter),
        "--pairs",
        str(pairs),
        "--output_dir",
        str(preference_dir(cfg)),
        "--seed",
        str(cfg.seed),
        "--preference",
        json.dumps(cfg.preference.model_dump(mode="json")),
        "--args",
        json.dumps(cfg.swift),
    ]


def preference_command(cfg: TrainConfig, pairs: str | Path, sft_adapter: str | Path) -> list[str]:
    """The preference command of the configured trainer kind."""
    return (cpu_loop_command if cfg.kind == "peft" else rlhf_command)(cfg, pairs, sft_adapter)


def describe_preference(cfg: TrainConfig, pairs: str | Path) -> str:
    """`then: <command>` for --dry-run ('' when preference training is off)."""
    if not cfg.preference.enabled:
        return ""
    pointer = run_dir(cfg) / "adapter.json"
    sft = read_pointer(pointer).get("sft_adapter") if pointer.is_file() else None
    cmd = preference_command(cfg, pairs, sft or sft_placeholder(cfg))
    return f"; then preference pairs ({pairs}) and: {render(cmd, train_env(cfg))}"


def preference_record(cfg: TrainConfig, pairs: str | Path) -> dict[str, Any]:
    """What a preference adapter was trained from: the pairs' sha256 and the recipe."""
    return {"pairs": file_sha256(pairs) if Path(pairs).is_file() else None, "recipe": cfg.preference.model_dump(mode="json")}


def preference_changes(cfg: TrainConfig, pairs: str | Path) -> list[str]:
    """How the saved preference record differs from `cfg` and `pairs` now ([] when it matches);
    a pointer without a record when preference is enabled, or with one when it is not, differs."""
    pointer = run_dir(cfg) / "adapter.json"
    saved = read_pointer(pointer).get("preference") if pointer.is_file() else None
    if not cfg.preference.enabled:
        return ["preference training (the adapter has it, the config does not)"] if saved else []
    if not isinstance(saved, dict):
        return ["preference training (the config has it, the adapter does not)"]
    now, out = preference_record(cfg, pairs), []
    if saved.get("pairs") != now["pairs"]:
        out.append(f"preference pairs (sha {str(saved.get('pairs'))[:12]} vs {str(now['pairs'])[:12]})")
    old = saved.get("recipe") or {}
    diff = sorted(k for k in set(old) | set(now["recipe"]) if old.get(k) != now["recipe"].get(k))
    if diff:
        out.append(f"preference recipe ({', '.join(diff)})")
    return out


def train_preference(cfg: TrainConfig, pairs: str | Path) -> Path:
    """Run preference training from the SFT adapter adapter.json names; point adapter.json at the
    result with its record; returns the final preference checkpoint."""
    pointer_file = run_dir(cfg) / "adapter.json"
    pointer = read_pointer(pointer_file)
    sft = pointer.get("sft_adapter") or pointer["adapter"]
    record = preference_record(cfg, pairs)
    cmd = preference_command(cfg, pairs, sft)
    env = train_env(cfg)
    out = preference_dir(cfg)
    shutil.rmtree(out, ignore_errors=True)  # a killed run's checkpoints: restart from the SFT adapter
    out.mkdir(parents=True)
    (out / "command.sh").write_text(render(cmd, env) + "\n", encoding="utf-8")
    returncode = run_child(cmd, launch_env(env))
    if returncode != 0:
        raise TrainError(f"{cfg.run_name}: preference training exited with status {returncode}")
    final = last_checkpoint(out)
    if final is None:
        raise TrainError(f"{cfg.run_name}: preference training finished without a checkpoint in {out}")
    pointer.update({"adapter": str(final), "sft_adapter": sft, "preference": record})
    tmp = pointer_file.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(pointer, indent=2), encoding="utf-8")
    tmp.replace(pointer_file)
    return final
