"""`lorarag` subcommands of the train package (heavy imports stay inside the commands).

- `lorarag world --out DIR`: write the demo world as a knowledge base (corpus.jsonl, questions.jsonl,
  older.jsonl: scenarios/world_kb.py), the three files a run's `data:` names.
- `lorarag sft CONFIG`: steps 1-3 of a run config (KB, index, scenarios, SFT rows, leak-checked),
  no training; `lorarag train` then trains a train config whose `dataset` names those rows.
- `lorarag train CONFIG [--dry-run] [--slurm FILE]`: swift sft (or the CPU peft loop), resumable.
- `lorarag export RUN`: swift export --merge_lora true.
- `lorarag import-conflicts {conflictnq,conflictqa}`: shared data sets into scenario JSONL.
"""

from __future__ import annotations

from pathlib import Path

import typer

from lorarag.core.overrides import HELP as OVERRIDES_HELP


def register(app: typer.Typer) -> None:
    """Add this package's commands (listed above) to the main app."""

    @app.command("world")
    def world_cmd(
        out: Path = typer.Option(Path("data/generated/demo"), help="output folder"),
        seed: int = typer.Option(0),
        n_orgs: int = typer.Option(40, "--n-orgs"),
        wordings: int = typer.Option(None, help="wordings each question is written in (2-10; default: WorldConfig's)"),
        force: bool = typer.Option(False, "--force", help="replace files lorarag did not write"),
    ) -> None:
        """Write the seeded demo world as a knowledge base: corpus.jsonl, questions.jsonl, older.jsonl."""
        from lorarag.core import outputs
        from lorarag.core.config import validate_data
        from lorarag.scenarios.config import WorldConfig
        from lorarag.scenarios.world_kb import CORPUS, OLDER, QUESTIONS, write_world_kb

        given = {"seed": seed, "n_orgs": n_orgs, **({"wordings": wordings} if wordings is not None else {})}
        cfg = validate_data(given, WorldConfig, "lorarag world")
        outputs.claim([out / CORPUS, out / QUESTIONS, out / OLDER], force=force)
        files = write_world_kb(cfg, out)
        outputs.record(files.paths)
        lines = [sum(1 for _ in p.open(encoding="utf-8")) for p in files.paths]
        typer.echo(
            f"{lines[0]} documents -> {files.paths[0]}\n{lines[1]} questions ({cfg.wordings} wordings each) -> "
            f"{files.paths[1]}\n{lines[2]} older versions -> {files.paths[2]}"
        )

    @app.command("sft")
    def sft_cmd(config: Path = typer.Argument(..., help="configs/run/*.yaml (a run config)")) -> None:
        """Steps 1-3 of a run, no training: KB, index, scenarios and the SFT rows (leak-checked)."""
        from lorarag.core.config import load_config
        from lorarag.study.pipeline import prepare_rows
        from lorarag.train.sft import read_sft
        from lorarag.trained.config import RunConfig

        cfg = load_config(config, RunConfig)
        files = prepare_rows(cfg, echo=typer.echo)
        for what, path in files.items():
            typer.echo(f"{what:18s} {path}")
        typer.echo(f"{len(read_sft(cfg.train.dataset))} training rows (leak check passed)")

    @app.command("train")
    def train_cmd(
        config: Path = typer.Argument(..., help="configs/train/*.yaml"),
        dry_run: bool = typer.Option(False, "--dry-run", help="print the exact command, run nothing"),
        slurm: Path = typer.Option(None, "--slurm", help="write an sbatch script here and exit"),
        force: bool = typer.Option(
            False, "--force", help="with --slurm: replace an existing file lorarag did not write (never the config)"
        ),
        sets: list[str] | None = typer.Option(None, "--set", metavar="KEY=VALUE", help=OVERRIDES_HELP),
    ) -> None:
        """Train a LoRA (ms-swift, or the CPU peft loop); resumes from the last checkpoint."""
        from lorarag.core.config import load_config
        from lorarag.core.errors import UserError
        from lorarag.core.overrides import parse_sets
        from lorarag.train.config import TrainConfig
        from lorarag.train.preference import pairs_path
        from lorarag.train.swift import slurm_script, train

        if slurm is not None and (str(slurm).startswith("-") or slurm.is_dir()):
            # `--slurm --dry-run` would otherwise write an sbatch file named "--dry-run"
            raise UserError(f"--slurm needs the path of the sbatch script to write, got {str(slurm)!r}")
        if sets and slurm is not None:  # the sbatch script runs `lorarag train CONFIG` on the cluster
            raise UserError("--set does not reach the sbatch script of --slurm: write the key into the config")
        cfg = load_config(config, TrainConfig, parse_sets(sets))
        if slurm is not None:
            from lorarag.core import outputs
            from lorarag.core.config import config_files

            reads = [*config_files(config), cfg.dataset, *([cfg.val_dataset] if cfg.val_dataset else [])]
            outputs.write_text(slurm, slurm_script(cfg, str(config)), force=force, inputs=reads)
            typer.echo(f"wrote {slurm} (submit with: sbatch {slurm})")
            return
        pairs = pairs_path(cfg.dataset)
        if not dry_run:  # both inputs are checked before hours of SFT, not after
            if not Path(cfg.dataset).is_file():
                raise UserError(
                    f"{config}: dataset {cfg.dataset} does not exist; build the rows with "
                    "`lorarag sft <run config>` (or `lorarag run`) whose train.dataset is this path"
                )
            if cfg.preference.enabled and not pairs.is_file():
                raise UserError(
                    f"{config}: train.preference needs the pairs {pairs}; `lorarag sft <run config>` "
                    "(or `lorarag run`) with train.preference enabled writes them beside the rows"
                )
        if not dry_run and Path(cfg.model).name == "smollm2-135m-instruct":
            from lorarag.train.smollm2 import ensure_smollm2

            ensure_smollm2(cfg.model)
        result = train(cfg, dry_run=dry_run, config_path=str(config))
        typer.echo(result if dry_run else f"adapter: {result}")
        if cfg.preference.enabled:  # then preference training from the SFT adapter (train/rlhf.py)
            from lorarag.train.rlhf import preference_command, sft_placeholder, train_preference
            from lorarag.train.swift import render, train_env

            if dry_run:
                typer.echo(render(preference_command(cfg, pairs, sft_placeholder(cfg)), train_env(cfg)))
                return
            typer.echo(f"adapter: {train_preference(cfg, pairs)}")

    @app.command("export")
    def export_cmd(
        run: str = typer.Argument(..., help="run name, run dir or adapter folder"),
        out: str = typer.Option(None, help="merged model folder (default: <run>/output/merged)"),
        runs_dir: str = typer.Option("runs/train"),
        dry_run: bool = typer.Option(False, "--dry-run"),
    ) -> None:
        """Merge the LoRA into the base model (swift export --merge_lora true)."""
        from lorarag.train.export import export

        typer.echo(export(run, out, runs_dir, dry_run))

    @app.command("import-conflicts")
    def import_cmd(
        name: str = typer.Argument(..., help="conflictnq or conflictqa"),
        out: Path = typer.Option(..., help="scenario JSONL to write"),
        data: Path = typer.Option(Path("../shared/data"), help="the shared data folder"),
        split: str = typer.Option("test", help="conflictnq split: test or val"),
        force: bool = typer.Option(False, "--force", help="replace output files lorarag did not write"),
    ) -> None:
        """Convert a shared conflict data set into scenario records (+ its KB chunks next to it)."""
        from lorarag.scenarios.importers import import_set

        n = import_set(name, data, out, split=split, force=force)
        typer.echo(f"{n} scenarios -> {out}")
