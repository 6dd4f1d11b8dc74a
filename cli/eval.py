"""`lorarag` subcommands of the eval package (heavy imports stay inside the commands).

- `lorarag eval CONFIG`: run a system over a scenario set (resumable), optional judge, report.
- `lorarag compare RUN_A RUN_B`: paired comparison (cluster bootstrap CIs and a cluster-level paired test;
  `--unit item`: item bootstrap and McNemar), fixed/broken items.
- `lorarag report RUN...`: metrics.json + report.md + report.html (+ RAGAS export).
"""

from __future__ import annotations

from pathlib import Path

import typer

from lorarag.core.overrides import HELP as OVERRIDES_HELP

REREAD_HELP = "read a test split although it was first read under another recipe (the test ledger, study/ledger.py)"


def _eval(
    config: Path = typer.Argument(..., help="configs/eval/*.yaml"),
    limit: int = typer.Option(None, help="only the first N scenarios (overrides the config)"),
    out: Path = typer.Option(None, help="run directory (overrides out_dir)"),
    fresh: bool = typer.Option(
        False, "--fresh", help="discard earlier results in the run directory and start over (needed when the config changed)"
    ),
    shard: str = typer.Option(
        None, "--shard", help="I/N: evaluate only shard I of N (by qid hash) into OUT_DIR/shards/I-of-N"
    ),
    merge: int = typer.Option(None, "--merge", help="N: check and merge the N shards into OUT_DIR"),
    slurm: Path = typer.Option(None, "--slurm", help="write an sbatch array script running --shards shard tasks, and exit"),
    shards: int = typer.Option(None, "--shards", help="with --slurm: how many shards"),
    force: bool = typer.Option(
        False,
        "--force",
        help="replace output files lorarag did not write (the --slurm script, the run's report files); never the config",
    ),
    reread_test: bool = typer.Option(False, "--reread-test", help=REREAD_HELP),
    sets: list[str] | None = typer.Option(None, "--set", metavar="KEY=VALUE", help=OVERRIDES_HELP),
) -> None:
    """Run a system over a scenario set; results.jsonl is written incrementally and resumes
    (only onto results made with the same config: the run directory keeps a stamp of it).
    Beyond one machine: `--shard I/N` on each, then `--merge N`; `--slurm FILE --shards N` writes the
    array job."""
    from lorarag.core.errors import UserError
    from lorarag.eval.shards import Shard, merge_shards, select, shard_dir, slurm_array

    if sum(x is not None for x in (shard, merge, slurm)) > 1:
        raise UserError("--shard, --merge and --slurm are separate steps: give one of them")
    if slurm is not None:
        if shards is None or str(slurm).startswith("-"):
            raise UserError("--slurm FILE needs a file name and --shards N")
        if sets:  # the array's tasks run `lorarag eval CONFIG --shard I/N` on the cluster
            raise UserError("--set does not reach the sbatch script of --slurm: write the key into the config")
        from lorarag.core import outputs
        from lorarag.core.config import load_config
        from lorarag.eval.config import EvalConfig

        ecfg = load_config(config, EvalConfig)  # a script for a missing or invalid config would fail on the cluster
        outputs.claim([slurm], force=force, inputs=_inputs(config, ecfg))
        script = slurm_array(config, shards, slurm, force=force)
        typer.echo(f"wrote {script}: sbatch it, then `lorarag eval {config} --merge {shards}`")
        return
    if shards is not None:
        raise UserError("--shards goes with --slurm (a shard run takes --shard I/N)")
    from lorarag.core import outputs
    from lorarag.core.config import load_config, validate_data
    from lorarag.core.lock import hold
    from lorarag.core.overrides import parse_sets
    from lorarag.core.runinfo import check_run_files
    from lorarag.eval.config import EvalConfig
    from lorarag.eval.records import closed_book_map, load_results
    from lorarag.eval.report import write_report
    from lorarag.eval.runner import RUN_FILES, STAMP_FILE, claim_run_dir, run_eval
    from lorarag.eval.stamps import expected_stamps
    from lorarag.scenarios.records import load_scenarios
    from lorarag.study.eval_system import build_eval_system, eval_made_by, eval_stamp, pin_numerics

    cfg = load_config(config, EvalConfig, parse_sets(sets))
    flags = {k: v for k, v in (("limit", limit), ("out_dir", str(out) if out else None)) if v is not None}
    if flags:  # options are validated like the YAML keys they override
        cfg = validate_data(
            {**cfg.model_dump(), **flags},
            EvalConfig,
            f"{config} with --{' --'.join(k.replace('out_dir', 'out') for k in flags)}",
        )
    pin_numerics(cfg)  # the run's kernels and threads, before anything loads torch
    everything = load_scenarios(cfg.scenarios)
    scenarios = everything[: cfg.limit] if cfg.limit else everything
    cb = closed_book_map(load_results(cfg.closed_book_run)) if cfg.closed_book_run else None
    stamp = eval_stamp(cfg, everything)
    made_by = eval_made_by(cfg)  # each row's index, prompt and model hashes (an adapter on another base: refused)
    run_dir = Path(cfg.out_dir)
    from lorarag.study.ledger import eval_ledger

    ledger = eval_ledger(cfg)  # a test-named scenario file: its reads, recorded once per whole evaluation
    if ledger is not None:
        ledger.check(reread_test)
    if merge is not None:
        hold(run_dir, "eval folder")  # one writer per folder (core/lock.py)
        merged = merge_shards(
            run_dir,
            merge,
            [x.qid for x in scenarios],
            stamp=stamp,  # this config's shards only
            made_by=expected_stamps(scenarios, made_by),
        )
        html = write_report([cfg.out_dir], run_dir / "report", resamples=cfg.bootstrap_resamples, seed=cfg.seed)
        typer.echo(f"merged {merge} shards: {len(merged)} items -> {run_dir / 'results.jsonl'}; report: {html}")
        for r in ledger.record(run_dir) if ledger is not None else []:
            typer.echo(r.text())
        return
    if shard is not None:
        part = Shard.parse(shard)
        scenarios = select(scenarios, part)
        run_dir = shard_dir(run_dir, part)
        cfg = cfg.model_copy(update={"out_dir": str(run_dir)})
    hold(run_dir, "eval folder")  # one writer per folder (a shard writer: its shard's), before --fresh
    if fresh and run_dir.is_dir():
        gone = _clear(run_dir, RUN_FILES)
        if gone:
            typer.echo(f"--fresh: removed {', '.join(gone)} from {run_dir}", err=True)
    check_run_files(run_dir)  # the resolved dump never replaces a config.yaml or run.json of the user's
    claim_run_dir(run_dir, stamp)  # before any model loads: a changed config is refused at once
    outputs.own([run_dir / n for n in ("results.jsonl", "resumes.jsonl", STAMP_FILE)])  # --fresh may remove them
    system = build_eval_system(cfg, scenarios)
    items = run_eval(
        system,
        scenarios,
        cfg.out_dir,
        batch_size=cfg.batch_size,
        closed_book=cb,
        config=cfg,
        data=[cfg.scenarios],
        stamp=stamp,
        made_by=made_by,
    )
    if cfg.judge.enabled:
        from lorarag.eval.judge import judge_items, judge_summary

        judged = judge_items(items, cfg.judge, run_dir / "judged.jsonl")
        typer.echo(f"judge: {judge_summary(judged)}")
    if shard is not None:  # the report is written once, by --merge
        typer.echo(f"shard {shard}: {len(items)} items -> {run_dir / 'results.jsonl'}")
        return
    html = write_report([cfg.out_dir], run_dir / "report", resamples=cfg.bootstrap_resamples, seed=cfg.seed, force=force)
    for r in ledger.record(run_dir) if ledger is not None else []:
        typer.echo(r.text())
    typer.echo(f"{len(items)} items -> {run_dir / 'results.jsonl'}; report: {html}")


def _inputs(config: Path, cfg) -> list:
    """What `lorarag eval` reads: the config and its `base:` chain, the scenarios, the components."""
    from lorarag.core.config import config_files

    return [*config_files(config), cfg.scenarios, *([cfg.components] if cfg.components else [])]


def _clear(run_dir: Path, names: tuple[str, ...]) -> list[str]:
    """--fresh: remove the runner's files that the folder's manifest lists (core/outputs.py) and the
    results and resume log of a run made before the manifest listed them; a file of the user's stays."""
    from lorarag.core import outputs

    gone, kept = outputs.remove_owned(run_dir, names)
    for name in [n for n in kept if n in ("results.jsonl", "resumes.jsonl") and not (run_dir / n).is_symlink()]:
        (run_dir / name).unlink()  # results.jsonl / resumes.jsonl: what --fresh discards
        gone.append(name)
    left = [n for n in kept if n not in gone]
    if left:
        typer.echo(f"--fresh: kept {', '.join(left)} in {run_dir} (not written by lorarag)", err=True)
    return gone


def _compare(
    run_a: str = typer.Argument(
        ..., help="baseline run dir (or results.jsonl); several seeds' runs: comma-separated, in the order of RUN_B's"
    ),
    run_b: str = typer.Argument(..., help="candidate run dir (or results.jsonl); comma-separated as RUN_A"),
    out: Path = typer.Option(None, help="where compare.md/json go (default: RUN_B/compare)"),
    resamples: int = typer.Option(2000, help="bootstrap resamples (>= 1000)"),
    seed: int = typer.Option(0, help="bootstrap seed"),
    unit: str = typer.Option(
        "cluster",
        "--unit",
        help="what the CI and the test resample: cluster "
        "(organisation or document, and seed: the default) or item (McNemar)",
    ),
    force: bool = typer.Option(False, "--force", help="replace compare.md/json lorarag did not write"),
) -> None:
    """Compare two runs item by item: differences with 95% CIs and a paired test (resampling whole
    clusters by default), fixed/broken items."""
    from rich.console import Console
    from rich.table import Table

    from lorarag.eval.compare import TESTS, compare_seeds, write_comparison
    from lorarag.eval.records import load_results

    runs_a, runs_b = ([Path(x) for x in r.split(",") if x.strip()] for r in (run_a, run_b))
    c = compare_seeds(
        [load_results(p) for p in runs_a], [load_results(p) for p in runs_b], resamples=resamples, seed=seed, unit=unit
    )
    last = runs_b[-1]
    dest = out or (last if last.is_dir() else last.parent) / "compare"
    inputs = [p / "results.jsonl" if p.is_dir() else p for p in (*runs_a, *runs_b)]
    md = write_comparison(c, dest, force=force, inputs=inputs)
    t = Table(title=f"{c.name_b} vs {c.name_a}")
    for col in ("metric", "scenario", "knowledge", "n (clusters)", c.name_a, c.name_b, "diff [95% CI]", TESTS[unit]):
        t.add_column(col)

    def f(x):
        return "—" if x is None or x != x else f"{x:.3f}"

    for r in c.rows:
        if r.knowledge == "all" or r.metric == "accuracy":
            t.add_row(
                r.metric,
                r.scenario,
                r.knowledge,
                f"{r.n} ({r.clusters})",
                f(r.a),
                f(r.b),
                f"{f(r.diff)} [{f(r.lo)}, {f(r.hi)}]",
                f(r.p_mcnemar),
            )
    Console().print(t)
    typer.echo(f"fixed by {c.name_b}: {len(c.fixed)}; broken: {len(c.broken)}; details: {md}")


def _report(
    runs: list[Path] = typer.Argument(..., help="run dirs (or results.jsonl); the first is the baseline"),
    out: Path = typer.Option(..., help="report directory"),
    resamples: int = typer.Option(2000, help="bootstrap resamples (>= 1000)"),
    seed: int = typer.Option(0, help="bootstrap seed"),
    force: bool = typer.Option(False, "--force", help="replace report files lorarag did not write"),
) -> None:
    """Write metrics.json, report.md and a self-contained report.html for one or more runs."""
    from lorarag.eval.report import write_report

    html = write_report(runs, out, resamples=resamples, seed=seed, force=force)
    typer.echo(f"report: {html}")


def register(app: typer.Typer) -> None:
    """Add `eval`, `compare` and `report`."""
    app.command("eval")(_eval)
    app.command("compare")(_compare)
    app.command("report")(_report)
