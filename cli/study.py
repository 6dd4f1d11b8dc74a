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
        split_seeds: str | None = typer.Option(
            None,
            "--split-seeds",
            help="also draw the split by fact again: every training seed at each of these split seeds (data.splits.seed)",
        ),
        sets: list[str] | None = typer.Option(None, "--set", metavar="KEY=VALUE", help=OVERRIDES_HELP),
    ) -> None:
        """The same run at several training seeds (and split seeds): every target per seed, pooled CIs."""
        from lorarag.core.config import deep_merge, load_config
        from lorarag.core.overrides import parse_sets
        from lorarag.study.seeds import run_seeds
        from lorarag.trained.config import RunConfig

        values = _seed_list(seeds, "--seeds")
        cfg = load_config(config, RunConfig, parse_sets(sets))
        splits = []
        for s in _seed_list(split_seeds, "--split-seeds") if split_seeds is not None else []:
            own = (
                {}
                if s == cfg.data.splits.seed
                else {"name": f"{cfg.name}-split{s}", "train": {"run_name": f"{cfg.train.run_name}-split{s}"}}
            )
            splits.append(
                load_config(config, RunConfig, deep_merge(parse_sets(sets), {**own, "data": {"splits": {"seed": s}}}))
            )
        run_seeds(cfg, values, splits=splits, fresh=fresh, dry_run=dry_run, echo=typer.echo, reread_test=reread_test)

    @app.command("calibrate")
    def calibrate_cmd(config: Path = typer.Argument(..., help="configs/run/*.yaml")) -> None:
        """Tune the self-knowledge gate on the dev split and save gate.json next to the adapter."""
        from lorarag.core.config import load_config
        from lorarag.fallback.gate import auroc_upper, gate_state
        from lorarag.study.pipeline import calibrate_only
        from lorarag.trained.config import RunConfig

        cfg = load_config(config, RunConfig)
        cal = calibrate_only(cfg, echo=typer.echo)
        typer.echo(
            f"threshold {cal.threshold:.4f} ({cal.rule}): keeps {cal.known_kept:.1%} of known facts, "
            f"rejects {cal.unseen_rejected:.1%} of never-learned ones; AUROC {cal.auroc:.3f} "
            f"(95 % upper bound {auroc_upper(cal):.3f}); gate {gate_state(cal, cfg.fallback.gate)}"
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


def _seed_list(text: str, flag: str) -> list[int]:
    """Distinct integers from `42,43,44`; UserError (one line) otherwise."""
    from lorarag.core.errors import UserError

    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"{flag} takes comma-separated integers, got {text!r}") from None
    if not values or len(set(values)) != len(values):
        raise UserError(f"{flag} needs distinct seeds, got {text!r}")
    return values
