"""`lorarag` subcommands of the train package (heavy imports stay inside the commands).

- `lorarag world`: write the demo world (Markdown corpus, facts, chunks).
- `lorarag sft CONFIG`: world + scenario splits + ms-swift messages JSONL (leak-checked).
- `lorarag train CONFIG [--dry-run] [--slurm FILE]`: swift sft (or the CPU peft loop), resumable.
- `lorarag export RUN`: swift export --merge_lora true.
- `lorarag probe RUN --config CONFIG`: closed-book and verdict accuracy of an adapter (or the base).
- `lorarag import-conflicts {conflictnq,conflictqa}`: shared data sets into scenario JSONL.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer


def _data_dir(cfg) -> Path:
    """Where the demo data of a train config lives: the folder above the SFT file's folder."""
    return Path(cfg.dataset).parent.parent


def _world_pairs(cfg, path: Path) -> Path:
    """Preference pairs of a world config's SFT rows (train/preference.py), leak-checked, written."""
    from lorarag.core.errors import UserError
    from lorarag.scenarios.world import build_world
    from lorarag.train.preference import build_pairs, world_facts, write_pairs
    from lorarag.train.sft import leak_check, read_sft

    if cfg.world is None:
        raise UserError("train.preference with `lorarag train` needs a world: section (a KB's pairs are built "
                        "by `lorarag run`)")
    world = build_world(cfg.world)
    pairs = build_pairs(read_sft(cfg.dataset), world_facts(world), cfg.preference)
    if not pairs:
        raise UserError(f"train.preference: no preference pair in {cfg.dataset}")
    leak_check([q.to_swift() for q in pairs], world)
    return write_pairs(pairs, path)


def register(app: typer.Typer) -> None:
    """Add this package's commands (listed above) to the main app."""

    @app.command("world")
    def world_cmd(out: Path = typer.Option(Path("data/generated/demo"), help="output folder"),
                  seed: int = typer.Option(0), n_orgs: int = typer.Option(40, "--n-orgs"),
                  force: bool = typer.Option(False, "--force", help="replace files lorarag did not write")) -> None:
        """Write the seeded demo world: corpus/*.md, facts.jsonl, chunks.jsonl."""
        from lorarag.core import outputs
        from lorarag.scenarios.config import WorldConfig
        from lorarag.scenarios.world import build_world, write_world

        world = build_world(WorldConfig(seed=seed, n_orgs=n_orgs))
        files = [out / "facts.jsonl", out / "chunks.jsonl", *(out / "corpus" / d.doc_id for d in world.documents)]
        outputs.claim(files, force=force)
        corpus = write_world(world, out)
        outputs.record(files)
        typer.echo(f"{len(world.facts)} facts, {len(world.documents)} documents -> {corpus}")

    @app.command("sft")
    def sft_cmd(config: Path = typer.Argument(..., help="configs/train/*.yaml with world: and sft:")) -> None:
        """Build world, scenario splits and SFT JSONL for a train config (leak-checked)."""
        from lorarag.core.errors import UserError
        from lorarag.train.config import SFTConfig
        from lorarag.train.sft import build_demo_data, read_sft
        from lorarag.train.swift import load_train_config

        cfg = load_train_config(config)
        if cfg.world is None:
            raise UserError(f"{config}: no world: section, nothing to build")
        paths = build_demo_data(cfg.world, cfg.sft or SFTConfig(), _data_dir(cfg), cfg.dataset, cfg.val_dataset)
        for k, p in paths.items():
            typer.echo(f"{k:18s} {p}")
        typer.echo(f"{len(read_sft(cfg.dataset))} training rows (leak check passed)")

    @app.command("train")
    def train_cmd(config: Path = typer.Argument(..., help="configs/train/*.yaml"),
                  dry_run: bool = typer.Option(False, "--dry-run", help="print the exact command, run nothing"),
                  slurm: Path = typer.Option(None, "--slurm", help="write an sbatch script here and exit"),
                  force: bool = typer.Option(False, "--force", help="with --slurm: replace an existing file "
                                             "lorarag did not write (never the config)")) -> None:
        """Train a LoRA (ms-swift, or the CPU peft loop); resumes from the last checkpoint."""
        from lorarag.core.errors import UserError
        from lorarag.train.config import SFTConfig
        from lorarag.train.sft import build_demo_data
        from lorarag.train.swift import load_train_config, slurm_script, train

        if slurm is not None and (str(slurm).startswith("-") or slurm.is_dir()):
            # `--slurm --dry-run` would otherwise write an sbatch file named "--dry-run"
            raise UserError(f"--slurm needs the path of the sbatch script to write, got {str(slurm)!r}")
        cfg = load_train_config(config)
        if slurm is not None:
            from lorarag.core import outputs

            outputs.write_text(slurm, slurm_script(cfg, str(config)), force=force, inputs=[config])
            typer.echo(f"wrote {slurm} (submit with: sbatch {slurm})")
            return
        if not dry_run and cfg.world is not None and not Path(cfg.dataset).is_file():
            build_demo_data(cfg.world, cfg.sft or SFTConfig(), _data_dir(cfg), cfg.dataset, cfg.val_dataset)
        if not dry_run and Path(cfg.model).name == "smollm2-135m-instruct":
            from lorarag.train.smollm2 import ensure_smollm2

            ensure_smollm2(cfg.model)
        result = train(cfg, dry_run=dry_run, config_path=str(config))
        typer.echo(result if dry_run else f"adapter: {result}")
        if cfg.preference.enabled:  # then preference training from the SFT adapter (train/rlhf.py)
            from lorarag.train.preference import pairs_path
            from lorarag.train.rlhf import preference_command, sft_placeholder, train_preference
            from lorarag.train.swift import render, train_env

            pairs = pairs_path(cfg.dataset)
            if dry_run:
                typer.echo(render(preference_command(cfg, pairs, sft_placeholder(cfg)), train_env(cfg)))
                return
            typer.echo(f"adapter: {train_preference(cfg, _world_pairs(cfg, pairs))}")

    @app.command("export")
    def export_cmd(run: str = typer.Argument(..., help="run name, run dir or adapter folder"),
                   out: str = typer.Option(None, help="merged model folder (default: <run>/output/merged)"),
                   runs_dir: str = typer.Option("runs/train"),
                   dry_run: bool = typer.Option(False, "--dry-run")) -> None:
        """Merge the LoRA into the base model (swift export --merge_lora true)."""
        from lorarag.train.export import export

        typer.echo(export(run, out, runs_dir, dry_run))

    @app.command("probe")
    def probe_cmd(config: Path = typer.Argument(..., help="the train config of the run"),
                  base: bool = typer.Option(False, "--base", help="probe the base model, no adapter"),
                  limit: int = typer.Option(0, help="at most N conflict scenarios (0: all)"),
                  out: Path = typer.Option(None, help="write the rows as JSONL here"),
                  conflicts: bool = typer.Option(True, help="also the conflict-aware scenarios"),
                  force: bool = typer.Option(False, "--force", help="with --out: replace a file lorarag did not "
                                             "write (never the config)")) -> None:
        """Closed-book accuracy (held-out phrasing) and conflict-aware accuracy on the test split."""
        from lorarag.core import outputs
        from lorarag.train.probe import probe_run
        from lorarag.train.swift import load_train_config

        cfg = load_train_config(config)
        if out is not None:  # refused before the model loads, not after minutes of probing
            outputs.claim([out], force=force, inputs=[config, cfg.dataset])
        summary = probe_run(cfg, base=base, limit=limit, out=out, conflicts=conflicts)
        if out is not None:
            outputs.record([out])
        typer.echo(json.dumps(summary, indent=2))

    @app.command("import-conflicts")
    def import_cmd(name: str = typer.Argument(..., help="conflictnq or conflictqa"),
                   out: Path = typer.Option(..., help="scenario JSONL to write"),
                   data: Path = typer.Option(Path("../shared/data"), help="the shared data folder"),
                   split: str = typer.Option("test", help="conflictnq split: test or val"),
                   force: bool = typer.Option(False, "--force", help="replace output files lorarag did not write")
                   ) -> None:
        """Convert a shared conflict data set into scenario records (+ its KB chunks next to it)."""
        from lorarag.scenarios.importers import import_set

        n = import_set(name, data, out, split=split, force=force)
        typer.echo(f"{n} scenarios -> {out}")
