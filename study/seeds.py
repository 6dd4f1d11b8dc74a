"""`lorarag seeds <config> --seeds 42,43,44`: one run config at several training seeds, and how much
its table moves between them.

One training seed is one draw of the LoRA's initialisation and batch order. A table that meets
every target at one seed need not at another (measured on the CPU demo: docs/research-log.md),
so a claim about a recipe needs several. Each seed is a full `lorarag run`: the
config's own `train.seed` keeps its run and training names (an existing run is reused); any other
seed `k` runs as `<name>-seed<k>` with training run `<run_name>-seed<k>`. The world, SFT rows
and index do not depend on the training seed and are shared. Systems that do not use the adapter
(base RAG, oracle, prompted detection, closed-book base) answer the same items identically at
every seed: their result folders are copied from the first seed's run, and `evaluate` keeps them
only if their stamp (what results depend on, fallback/pipeline.system_stamp) still matches.

With split seeds (`--split-seeds`), the split by fact is drawn again too: every training seed runs at
every split seed, a split seed `s` other than the config's own as `<name>-split<s>` (its own SFT rows,
index, adapters and test items), and each run is one draw to the pooled CIs, which then count the split
as well as the training seed. Adapter-free results are shared only between runs of one split.

The summary (`<runs_dir>/<name>-seeds/seeds.md` + `seeds.json`, beside the usual config.yaml and
run.json) lists every target of the headline (study/headline.kb_targets) per seed, with mean,
standard deviation (n-1), a 95 % t-interval of the mean over seeds, range and how many seeds meet
it, and each seed's gate threshold; then the pooled table (study/pooled_targets.py): every target and the
LoRA − base cell differences over all seeds, with a CI that resamples seeds and clusters; and
LoRA-RAG against every system read on its context (closed-book LoRA, memory_or_context, RAG-SFT, the
baselines with the adapter, base RAG, the oracle router) per cell, pooled the same way, with the best
deployable system named (study/pooled_baseline_table.py). Beside the per-seed table, each run's test-split
reads and context-only probes (study/seeds_heldout.py).
"""

from __future__ import annotations

import json
import math
import shutil
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

from lorarag.core.errors import ConfigError
from lorarag.core.runinfo import start_run
from lorarag.eval.records import ItemResult, load_results
from lorarag.eval.scoring import correct_fn, right_text
from lorarag.eval.stats import nan_to_none
from lorarag.fallback.gate import GATE_FILE, auroc_upper, gate_state, load_gate
from lorarag.study.baseline_tables import abstention_table, comparable
from lorarag.study.calibration import Echo
from lorarag.study.headline import kb_targets, target_values
from lorarag.study.pipeline import Paths, run
from lorarag.study.pooled_baseline_table import BaselineCell, baselines_markdown, pooled_baselines
from lorarag.study.pooled_targets import pooled_differences, pooled_markdown, pooled_rows
from lorarag.study.seeds_heldout import heldout_markdown
from lorarag.study.targets import BASE_TARGET, pair_names
from lorarag.trained.adapters import trained_adapter
from lorarag.trained.config import RunConfig


@dataclass(frozen=True)
class SeedRow:
    """One target across seeds."""

    target: str
    values: tuple[float, ...]  # per seed, in the order of `seeds`
    met: tuple[bool, ...]
    mean: float
    sd: float  # sample standard deviation (n-1); 0 for one seed; mean..hi NaN if any value is
    lo: float
    hi: float
    # 95 % t-interval of the mean over seeds (seeds as the sample), clipped to [0, 1] since every
    # target is a share or an AUROC; NaN for one seed
    ci_lo: float = math.nan
    ci_hi: float = math.nan

    @property
    def n_met(self) -> int:
        return sum(self.met)


def seed_config(cfg: RunConfig, seed: int) -> RunConfig:
    """The config of one seed: the config's own seed unchanged, another gets suffixed names."""
    if seed == cfg.train.seed:
        return cfg
    train = cfg.train.model_copy(update={"seed": seed, "run_name": f"{cfg.train.run_name}-seed{seed}"})
    return cfg.model_copy(update={"name": f"{cfg.name}-seed{seed}", "train": train})


def share_base_results(cfg: RunConfig, src_eval: Path, dst_eval: Path) -> list[str]:
    """Copy the result folders of adapter-free systems from one seed's run to another's (never
    over an existing folder); returns the names copied. `evaluate` re-checks each stamp."""
    copied = []
    for s in cfg.systems:
        src, dst = src_eval / s.name, dst_eval / s.name
        if s.uses_adapter or not (src / "stamp.json").is_file() or dst.exists():
            continue
        shutil.copytree(src, dst)
        copied.append(s.name)
    return copied


def seed_rows(per_seed: Sequence[Sequence[tuple[str, float, bool]]]) -> list[SeedRow]:
    """Aggregate `targets()` lists (one per seed, same targets in the same order) into rows."""
    if not per_seed:
        raise ValueError("no seeds to aggregate")
    names = [t[0] for t in per_seed[0]]
    if any([t[0] for t in s] != names for s in per_seed):
        raise ValueError("seeds report different targets")
    rows = []
    for i, name in enumerate(names):
        vals = tuple(float(s[i][1]) for s in per_seed)
        met = tuple(bool(s[i][2]) for s in per_seed)
        if any(math.isnan(v) for v in vals):  # undefined at some seed (e.g. a one-class AUROC)
            rows.append(SeedRow(name, vals, met, math.nan, math.nan, math.nan, math.nan))
            continue
        mean = statistics.fmean(vals)
        sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
        ci = (math.nan, math.nan)
        if len(vals) > 1:
            from scipy.stats import t

            half = float(t.ppf(0.975, len(vals) - 1)) * sd / math.sqrt(len(vals))
            ci = (max(0.0, mean - half), min(1.0, mean + half))
        rows.append(SeedRow(name, vals, met, mean, sd, min(vals), max(vals), *ci))
    return rows


def seeds_markdown(seeds: Sequence[int | str], rows: Sequence[SeedRow], gates: Mapping[int | str, dict | None]) -> str:
    """Markdown: every target per seed, mean ± sd, range, seeds meeting it; the gate per seed."""
    head = " | ".join(f"seed {s}" for s in seeds)
    lines = [
        f"## Targets across {len(seeds)} training seeds",
        "",
        "A seed meets a target when the 95 % CI bound of its own reading clears the bar (the bound each "
        "run's targets table shows), not on its value alone; ✗ marks a seed that does not.",
        "",
        f"| target | {head} | mean ± sd | 95% CI of the mean (t) | range | met |",
        "|---|" + "---|" * (len(seeds) + 4),
    ]
    for r in rows:
        vals = " | ".join(f"{v:.2f}" + ("" if ok else " ✗") for v, ok in zip(r.values, r.met))
        ci = "–" if math.isnan(r.ci_lo) else f"[{r.ci_lo:.2f}, {r.ci_hi:.2f}]"
        spread = "– | – | –" if math.isnan(r.mean) else f"{r.mean:.2f} ± {r.sd:.2f} | {ci} | {r.lo:.2f}–{r.hi:.2f}"
        lines.append(f"| {r.target} | {vals} | {spread} | {r.n_met}/{len(seeds)} |")
    lines.append("")
    lora_rows = [r for r in rows if not r.target.startswith(BASE_TARGET)]
    for label, sel in (("All targets", rows), ("All LoRA-RAG and detector targets", lora_rows)):
        every = [all(r.met[i] for r in sel) for i in range(len(seeds))]
        lines.append(
            f"{label} met at once: {sum(every)} of {len(seeds)} seeds "
            f"({', '.join(str(s) for s, ok in zip(seeds, every) if ok) or 'none'})."
        )
    lines += [
        "",
        "| seed | gate | gate threshold | override threshold | dev known kept | dev never-learned rejected | dev AUROC |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in seeds:
        g = gates.get(s)
        over = g.get("override_threshold") if g else None
        lines.append(
            f"| {s} | "
            + (
                " | ".join(
                    [
                        g.get("in_use", "–"),
                        f"{g['threshold']:.4f}",
                        "–" if over is None else f"{over:.4f}",
                        f"{g['known_kept']:.2f}",
                        f"{g['unseen_rejected']:.2f}",
                        f"{g['auroc']:.3f}" + (f" (upper {g['auroc_upper']:.3f})" if "auroc_upper" in g else ""),
                    ]
                )
                if g
                else "– | – | – | – | – | –"
            )
            + " |"
        )
    return "\n".join(lines) + "\n"


def seeds_baselines(
    cfg: RunConfig,
    every: Sequence[Mapping[str, Sequence[ItemResult]]],
    correct: Callable[[ItemResult], bool],
    own_items: bool = False,
) -> list[BaselineCell]:
    """LoRA-RAG against every system read on its context mode (study/baseline_tables.comparable), pooled
    over the seeds' results; the oracle router where closed-book LoRA and base RAG both ran."""
    base, lora = pair_names(cfg, every[0])
    ctx = _context(cfg, lora)
    others = comparable(cfg, every[0], ctx, lora)
    cb = next((s.name for s in others if s.kind == "closed_book" and s.adapter is not None), None)
    return pooled_baselines(
        every,
        lora,
        [s.name for s in others],
        [s.name for s in others if s.kind != "oracle"],
        correct,
        router=(cb, base) if cb and base in every[0] else None,
        resamples=cfg.eval.bootstrap,
        seed=cfg.eval.seed,
        own_items=own_items,
    )


def seeds_declined(cfg: RunConfig, every: Sequence[Mapping[str, Sequence[ItemResult]]]) -> list[str]:
    """Each deployable system's declined answerable items per cell, summed over the seeds."""
    lora = pair_names(cfg, every[0])[1]
    return abstention_table(cfg, every, _context(cfg, lora), lora)


def _context(cfg: RunConfig, system: str) -> str:
    """The context mode `system` reads (`presented` or `retrieved`)."""
    return next(s.context for s in cfg.systems if s.name == system)


def run_cpu(root: Path) -> str:
    """The CPU kind a run was evaluated on, from its run.json (`numerics.cpu_flags`: avx2,
    avx512_bf16, amx...): a factor of the results, since kernels differ by kind; "unknown" without it."""
    try:
        flags = json.loads((root / "run.json").read_text(encoding="utf-8"))["numerics"]["cpu_flags"]
    except (OSError, ValueError, KeyError, TypeError):
        return "unknown"
    return "+".join(flags) if flags else "no vector flags"


def cpu_line(cpus: Mapping[int | str, str]) -> str:
    """One line under the per-seed table: the CPU kind of every run, or the kinds where they differ
    (the pooled CIs then mix them)."""
    kinds = sorted(set(cpus.values()))
    if len(kinds) == 1:
        return f"\nEvery run on one CPU kind: {kinds[0]}.\n"
    return (
        "\nCPU kinds differ between runs (their kernels round differently): "
        + ", ".join(f"{k} {v}" for k, v in cpus.items())
        + ".\n"
    )


def check_splits(splits: Sequence[RunConfig]) -> None:
    """ConfigError when two split seeds' runs would share a run folder, SFT rows or an index (a
    config whose paths do not follow `${name}`): one split's rows would replace the other's."""
    for what, key in (
        ("run name", lambda c: c.name),
        ("train.dataset", lambda c: c.train.dataset),
        ("rag.index.dir", lambda c: c.rag.index.dir),
        ("train.run_name", lambda c: c.train.run_name),
    ):
        values = [key(c) for c in splits]
        if len(set(values)) != len(values):
            raise ConfigError(
                f"--split-seeds: the split seeds' runs share {what} {values[0]!r}: write it with "
                "${name} in the config, so each split has its own"
            )


def run_seeds(
    cfg: RunConfig,
    seeds: Sequence[int],
    *,
    splits: Sequence[RunConfig] = (),
    fresh: bool = False,
    dry_run: bool = False,
    echo: Echo = print,
    reread_test: bool = False,
) -> str | None:
    """Run `cfg` once per seed (see module docstring) and write the summary; returns its Markdown.
    `splits`: the config at each split seed to run (module docstring), `cfg` itself when empty.
    `reread_test`: as `lorarag run --reread-test` (the seeds are one recipe to the test ledger)."""

    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct and non-empty, got {list(seeds)}")
    kinds = {sc.kind for sc in cfg.systems}
    if not {"base_rag", "lora_rag"} <= kinds:  # checked before any training, not after the first
        raise ConfigError(f"lorarag seeds compares base_rag with lora_rag; {cfg.name} has neither or only one")
    bases = list(splits) or [cfg]
    check_splits(bases)
    cfgs = [seed_config(b, s) for b in bases for s in seeds]
    labels: list = list(seeds) if not splits else [f"{s}/split {b.data.splits.seed}" for b in bases for s in seeds]
    target_fn = partial(kb_targets, cfg)
    if dry_run:
        for s, c in zip(labels, cfgs):
            echo(f"seed {s}: lorarag run as '{c.name}', training run '{c.train.run_name}'")
            run(c, fresh=fresh, dry_run=True, echo=echo)
        return None

    out = Path(cfg.runs_dir) / f"{cfg.name}-seeds"
    w = cfg.data.world
    source_seed = {"splits": cfg.data.splits.seed, **({"world": w.seed} if w is not None else {})}
    if splits:
        source_seed["splits"] = [b.data.splits.seed for b in bases]
    start_run(
        out,
        cfg,
        seeds={"run": cfg.seed, **source_seed, "eval": cfg.eval.seed, **{f"train.{i}": s for i, s in enumerate(seeds)}},
    )
    per_seed, pairs, gates, every, cpus = [], [], {}, [], {}
    for i, (s, c) in enumerate(zip(labels, cfgs), 1):
        echo(f"=== seed {s} ({i}/{len(cfgs)}): run '{c.name}' ===")
        paths = Paths(Path(c.runs_dir) / c.name)
        first = Paths(Path(c.runs_dir) / cfgs[(i - 1) // len(seeds) * len(seeds)].name)  # this split's first run
        if paths.root != first.root and not fresh:
            shared = share_base_results(c, first.eval, paths.eval)
            if shared:
                echo(f"          reusing the first seed's results of {', '.join(shared)} (no adapter)")
        run(c, fresh=fresh, echo=echo, reread_test=reread_test)
        results = {sc.name: load_results(paths.eval / sc.name) for sc in c.systems}
        pair = pair_names(c, results)
        pairs.append((results[pair[0]], results[pair[1]]))
        every.append(results)
        per_seed.append(target_fn(pairs[-1][0], pairs[-1][1]))
        adapter = trained_adapter(c)
        gate = adapter / GATE_FILE if adapter is not None else None
        gates[s] = None
        if gate is not None and gate.is_file():  # and as the run used it: gate.json holds the reading, not the decision
            cal = load_gate(adapter)
            gates[s] = asdict(cal) | {"in_use": gate_state(cal, c.fallback.gate), "auroc_upper": auroc_upper(cal)}
        cpus[s] = run_cpu(paths.root)
    rows = seed_rows(per_seed)
    echo(f"          pooling {len(cfgs)} runs: {cfg.eval.bootstrap} resamples of runs and facts")
    own = bool(splits)  # split seeds: each run its own items
    pooled = pooled_rows(pairs, partial(target_values, cfg), resamples=cfg.eval.bootstrap, seed=cfg.eval.seed, own_items=own)
    diffs = pooled_differences(
        pairs, resamples=cfg.eval.bootstrap, seed=cfg.eval.seed, correct=correct_fn(cfg.data.answer_metric), own_items=own
    )
    cells = seeds_baselines(cfg, every, correct_fn(cfg.data.answer_metric), own_items=own)
    right = right_text(cfg.data.answer_metric)
    md = (
        seeds_markdown(labels, rows, gates)
        + cpu_line(cpus)
        + "\n"
        + heldout_markdown(labels, [Path(c.runs_dir) / c.name for c in cfgs])
        + "\n"
        + pooled_markdown(labels, pooled, diffs, cfg.eval.bootstrap, right)
        + "\n"
        + baselines_markdown(labels, pair_names(cfg, every[0])[1], cells, cfg.eval.bootstrap, right)
        + "\n"
        + "\n".join(seeds_declined(cfg, every))
    )
    (out / "seeds.md").write_text(f"# lorarag seeds {cfg.name}\n\n" + md, encoding="utf-8")
    (out / "seeds.json").write_text(
        json.dumps(
            nan_to_none(
                {
                    "seeds": labels,
                    "runs": [c.name for c in cfgs],
                    "gates": {str(k): v for k, v in gates.items()},
                    "cpu": {str(k): v for k, v in cpus.items()},
                    "targets": [asdict(r) | {"n_met": r.n_met} for r in rows],
                    "pooled": {
                        "resamples": cfg.eval.bootstrap,
                        "targets": [asdict(r) for r in pooled],
                        "differences": [asdict(d) for d in diffs],
                        "baselines": [asdict(c) for c in cells],
                    },
                }
            ),
            indent=1,
            allow_nan=False,
        ),
        encoding="utf-8",
    )
    echo(md)
    echo(f"summary: {out / 'seeds.md'}")
    return md
