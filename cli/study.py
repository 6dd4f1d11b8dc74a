"""`lorarag` subcommands of the study package: run, seeds, calibrate, self-knowledge (heavy imports stay
inside the commands)."""

from __future__ import annotations

from pathlib import Path

import typer

from lorarag.core.overrides import HELP as OVERRIDES_HELP

REREAD_HELP = "read a test split although it was first read under another recipe (the test ledger, study/ledger.py)"


def register(app: typer.Typer) -> None:
    """Add `run`, `seeds`, `calibrate` and `self-knowledge`."""

    @app.command("run")
    def run_cmd(
        config: Path = typer.Argument(..., help="configs/run/*.yaml"),
        fresh: bool = typer.Option(False, "--fresh", help="retrain the LoRA and redo the evaluation"),
        dry_run: bool = typer.Option(False, "--dry-run", help="print every step and command, run nothing"),
        reread_test: bool = typer.Option(False, "--reread-test", help=REREAD_HELP),
        sets: list[str] | None = typer.Option(None, "--set", metavar="KEY=VALUE", help=OVERRIDES_HELP),
    ) -> None:
        """End to end: demo world → index → train/reuse LoRA → calibrate → evaluate → report."""
        from lorarag.core import precision
        from lorarag.core.config import load_config
        from lorarag.core.overrides import parse_sets
        from lorarag.study.pipeline import run
        from lorarag.trained.config import RunConfig

        cfg = load_config(config, RunConfig, parse_sets(sets))
        typer.echo(precision.line(cfg.model_dump(mode="json")))  # `auto` resolved for this CPU, and why
        run(cfg, fresh=fresh, dry_run=dry_run, echo=typer.echo, reread_test=reread_test)

    @app.command("seeds")
    def seeds_cmd(
        config: Path = typer.Argument(..., help="configs/run/*.yaml"),
        seeds: str = typer.Option(..., "--seeds", help="training seeds, comma-separated: 42,43,44"),
        fresh: bool = typer.Option(False, "--fresh", help="retrain every seed's LoRA"),
        dry_run: bool = typer.Option(False, "--dry-run", help="print every run's steps, run nothing"),
        reread_test: bool = typer.Option(False, "--reread-test", help=REREAD_HELP),
    ) -> None:
        """The same run at several training seeds: every target per seed, mean ± sd, seeds meeting it."""
        from lorarag.core.config import load_config
        from lorarag.core.errors import UserError
        from lorarag.study.seeds import run_seeds
        from lorarag.trained.config import RunConfig

        try:
            values = [int(x) for x in seeds.split(",") if x.strip()]
        except ValueError:
            raise UserError(f"--seeds takes comma-separated integers, got {seeds!r}") from None
        if not values or len(set(values)) != len(values):
            raise UserError(f"--seeds needs distinct seeds, got {seeds!r}")
        run_seeds(
            load_config(config, RunConfig), values, fresh=fresh, dry_run=dry_run, echo=typer.echo, reread_test=reread_test
        )

    @app.command("calibrate")
    def calibrate_cmd(config: Path = typer.Argument(..., help="configs/run/*.yaml")) -> None:
        """Tune the self-knowledge gate on the dev split and save gate.json next to the adapter."""
        from lorarag.core.config import load_config
        from lorarag.study.pipeline import calibrate_only
        from lorarag.trained.config import RunConfig

        cal = calibrate_only(load_config(config, RunConfig), echo=typer.echo)
        typer.echo(
            f"threshold {cal.threshold:.4f} ({cal.rule}): keeps {cal.known_kept:.1%} of known facts, "
            f"rejects {cal.unseen_rejected:.1%} of never-learned ones; AUROC {cal.auroc:.3f}"
        )

    @app.command("self-knowledge")
    def self_knowledge_cmd(
        config: Path = typer.Argument(..., help="configs/run/*.yaml of a trained run"),
        split: str = typer.Option("dev", help="dev (choose on it) or test (report once)"),
        samples: int = typer.Option(8, help="sampled closed-book answers per question"),
        temperature: float = typer.Option(1.0, help="their sampling temperature"),
    ) -> None:
        """Compare the gate's doubt signals (closed-book NLL, a hidden-state probe, sample agreement
        exact and by token F1) as detectors of never-learned facts on the run's dev split,
        with cluster-bootstrap CIs."""
        from lorarag.core.config import load_config
        from lorarag.core.errors import UserError
        from lorarag.study.self_knowledge import compare_signals
        from lorarag.trained.config import RunConfig

        if split not in ("dev", "test"):
            raise UserError(f"--split is dev or test, got {split!r}")
        compare_signals(
            load_config(config, RunConfig),
            split=split,
            samples=samples,  # type: ignore[arg-type]
            temperature=temperature,
            echo=typer.echo,
        )
