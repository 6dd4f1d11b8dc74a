"""`lorarag export <run>`: merge a run's LoRA into its base model with `swift export --merge_lora true`."""

from __future__ import annotations

import subprocess
from pathlib import Path

from lorarag.train.runs import adapter_info, find_adapter
from lorarag.train.swift import TrainError, launch_env, render


def export_command(run: str, output_dir: str | None = None, runs_dir: str = "runs/train") -> list[str]:
    """The exact `swift export` command that merges the run's final adapter."""
    adapter = find_adapter(run, runs_dir)
    info = adapter_info(run, runs_dir)
    out = output_dir or str(adapter.parent.parent / "merged")
    cmd = ["swift", "export", "--adapters", str(adapter), "--merge_lora", "true", "--output_dir", out]
    # A peft-kind adapter has no ms-swift args.json next to it: name the base model explicitly.
    if info.get("base_model") and not (adapter / "args.json").is_file():
        cmd += ["--model", info["base_model"]]
        for key in ("model_type", "template"):
            if info.get(key):
                cmd += [f"--{key}", info[key]]
    return cmd


def export(run: str, output_dir: str | None = None, runs_dir: str = "runs/train", dry_run: bool = False) -> str:
    """Run the merge; returns the merged model folder (or the command text with dry_run)."""
    import os

    cmd = export_command(run, output_dir, runs_dir)
    if dry_run:
        return render(cmd)
    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("MODELSCOPE_OFFLINE", "1")

    proc = subprocess.run(cmd, env=launch_env(env))
    out = cmd[cmd.index("--output_dir") + 1]
    if proc.returncode != 0 or not (Path(out) / "config.json").is_file():
        raise TrainError(f"swift export failed (status {proc.returncode}); command: {render(cmd)}")
    return out
