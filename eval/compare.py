"""Paired comparison of two runs (A = baseline, B = candidate) over the same scenario items.

Items are paired by qid. For each metric and each (scenario, knowledge) cell: both values, the
difference B - A with a seeded paired-bootstrap 95 % CI (conditional rates resample numerator
and denominator together, see `stats.paired_bootstrap`), and for accuracy a paired test's p.

Items are not independent: the facts of one organisation (the demo world) or one document (a KB)
share a name, a language and a passage, so a model that misreads one misreads them all. By
default (`unit="cluster"`) the bootstrap draws whole clusters (the results' `cluster` field, else
the fact) and the test is the sign-flip permutation test over cluster-summed differences
(`stats.cluster_permutation_test`, exact up to 16 clusters); given several seeds' runs
(`compare_seeds`), a cluster is one organisation or document at one seed, so the CI and the test
count seeds too. `unit="item"` treats every item as independent: the item bootstrap and the exact
McNemar test, as a check against the cluster-level numbers.
Also the items B fixed (A wrong, B right) and broke (A right, B wrong). The headline table of a
base-vs-LoRA pair is eval/compare_headline.py.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from lorarag.core import outputs
from lorarag.eval import conflict_metrics as cm
from lorarag.eval.answer_metrics import exact_match, is_correct, token_f1
from lorarag.eval.records import WRONG_VALUE_SCENARIOS, EvalError, ItemResult, check_unique, output_dir
from lorarag.eval.stats import cluster_permutation_test, mcnemar_exact, nan_to_none, paired_bootstrap

log = logging.getLogger(__name__)

Frac = Callable[[ItemResult], tuple[float, float]]  # item -> (numerator, denominator in {0, 1})


def _always(f: Callable[[ItemResult], float]) -> Frac:
    return lambda r: (float(f(r)), 1.0)


def _where(cond: Callable[[ItemResult], bool], hit: Callable[[ItemResult], bool]) -> Frac:
    return lambda r: (float(hit(r)), 1.0) if cond(r) else (0.0, 0.0)


# Each metric as per-item (numerator, denominator): the rate is sum(num) / sum(den).
METRICS: dict[str, Frac] = {
    "accuracy": _always(is_correct),
    "exact_match": _where(
        lambda r: bool(r.gold_answers), lambda r: exact_match(r.answer, r.gold_answers, r.language) == 1.0
    ),
    "f1": lambda r: (token_f1(r.answer, r.gold_answers, r.language), 1.0) if r.gold_answers else (0.0, 0.0),
    "context_bias": _where(
        lambda r: r.scenario in WRONG_VALUE_SCENARIOS and cm.closed_book_correct(r) is True, cm.is_misled
    ),
    "prior_bias": _where(lambda r: r.scenario == "consistent" and cm.closed_book_correct(r) is False, cm.keeps_prior),
    "fallback_success": _where(
        lambda r: r.scenario in WRONG_VALUE_SCENARIOS and r.route is not None,
        lambda r: r.route == "fallback" and is_correct(r),
    ),
    "over_fallback": _where(lambda r: r.scenario == "consistent" and r.route is not None, cm.left_context),
}


UNITS = ("cluster", "item")  # what a bootstrap draw and a paired test's exchangeable unit is
TESTS = {"cluster": "permutation p (clusters)", "item": "McNemar p (items)"}


@dataclass(frozen=True)
class DiffRow:
    """One metric in one cell: A, B, B - A with its CI, and for accuracy the paired test's p
    (`p_mcnemar`: McNemar's over items with unit "item", the cluster permutation test's with
    "cluster"); `clusters`: how many units the CI and the test resample."""

    metric: str
    scenario: str
    knowledge: str
    n: int
    a: float
    b: float
    diff: float
    lo: float
    hi: float
    p_mcnemar: float | None = None
    den_a: int = 0  # items in A's denominator (= n for plain rates; fewer for conditional ones)
    den_b: int = 0
    clusters: int = 0


@dataclass(frozen=True)
class Comparison:
    """The paired comparison of run A and run B."""

    name_a: str
    name_b: str
    rows: tuple[DiffRow, ...]
    fixed: tuple[dict, ...]  # items A got wrong and B right
    broken: tuple[dict, ...]  # items A got right and B wrong
    unit: str = "cluster"  # what the CIs and tests resample (UNITS)
    seeds: int = 1  # how many seeds' runs are pooled


def pair(
    a: Sequence[ItemResult], b: Sequence[ItemResult], *, warn: bool = True
) -> tuple[list[ItemResult], list[ItemResult]]:
    """Items of both runs with the same qid, in A's order; EvalError when nothing pairs, RecordError
    when a run repeats a qid (it would be counted twice on one side and once on the other)."""
    check_unique(a, "run A")
    check_unique(b, "run B")
    bmap = {r.qid: r for r in b}
    pa = [r for r in a if r.qid in bmap]
    if not pa:
        raise EvalError("the two runs share no qid: nothing to compare")
    bad = next(
        (
            r.qid
            for r in pa
            if (r.scenario, r.knowledge, r.question) != (bmap[r.qid].scenario, bmap[r.qid].knowledge, bmap[r.qid].question)
        ),
        None,
    )
    if bad is not None:
        raise EvalError(f"qid {bad} is a different item in the two runs (other scenario set?)")
    if warn and len(pa) < max(len(a), len(b)):
        log.warning("comparing %d shared items (A has %d, B has %d)", len(pa), len(a), len(b))
    return pa, [bmap[r.qid] for r in pa]


def _fracs(items: Sequence[ItemResult], f: Frac) -> tuple[np.ndarray, np.ndarray]:
    nd = np.array([f(r) for r in items], dtype=np.float64).reshape(-1, 2)
    return nd[:, 0], nd[:, 1]


def compare_items(
    a: Sequence[ItemResult], b: Sequence[ItemResult], *, resamples: int = 2000, seed: int = 0, unit: str = "cluster"
) -> Comparison:
    """Compare two runs item by item (see the module docstring)."""
    return compare_seeds([a], [b], resamples=resamples, seed=seed, unit=unit)


def compare_seeds(
    a_runs: Sequence[Sequence[ItemResult]],
    b_runs: Sequence[Sequence[ItemResult]],
    *,
    resamples: int = 2000,
    seed: int = 0,
    unit: str = "cluster",
) -> Comparison:
    """Compare A with B over one or several seeds (the i-th run of A with the i-th of B): every seed's
    paired items pooled, a cluster being (seed, organisation or document) with unit "cluster", an
    item being (seed, qid) with unit "item" (see the module docstring)."""
    if resamples < 1000:
        raise EvalError(f"use at least 1000 bootstrap resamples, not {resamples}")
    if unit not in UNITS:
        raise EvalError(f"unit is one of {', '.join(UNITS)}, not {unit!r}")
    if not a_runs or len(a_runs) != len(b_runs):
        raise EvalError(f"one run of B per run of A needed: {len(a_runs)} and {len(b_runs)} given")
    pa, pb, labels = [], [], []
    for i, (a, b) in enumerate(zip(a_runs, b_runs)):
        x, y = pair(a, b)
        pa += x
        pb += y
        labels += [f"{i}/{r.unit if unit == 'cluster' else r.qid}" for r in x]
    units = np.array(labels)
    idx_cells = [
        (s, k, [i for i, r in enumerate(pa) if (s == "all" or r.scenario == s) and (k == "all" or r.knowledge == k)])
        for s, k, _ in cm.groups(pa)
    ]
    rows: list[DiffRow] = []
    for name, f in METRICS.items():
        na, da = _fracs(pa, f)
        nb, db = _fracs(pb, f)
        for s, k, idx in idx_cells:
            ix = np.array(idx, dtype=np.int64)
            if da[ix].sum() == 0 and db[ix].sum() == 0:
                continue
            d = paired_bootstrap(
                na[ix], nb[ix], den_a=da[ix], den_b=db[ix], resamples=resamples, seed=seed, clusters=units[ix]
            )
            p = None
            if name == "accuracy":
                p = (
                    mcnemar_exact(na[ix] > 0, nb[ix] > 0)[2]
                    if unit == "item"
                    else cluster_permutation_test(na[ix], nb[ix], units[ix], seed=seed)[1]
                )
            rows.append(
                DiffRow(
                    name,
                    s,
                    k,
                    len(ix),
                    d.a,
                    d.b,
                    d.diff,
                    d.lo,
                    d.hi,
                    p,
                    int(da[ix].sum()),
                    int(db[ix].sum()),
                    len(set(units[ix])),
                )
            )
    ca = [is_correct(r) for r in pa]
    cb = [is_correct(r) for r in pb]

    def brief(ra: ItemResult, rb: ItemResult) -> dict:
        return {
            "qid": ra.qid,
            "scenario": ra.scenario,
            "knowledge": ra.knowledge,
            "question": ra.question,
            "gold": list(ra.gold_answers),
            "answer_a": ra.answer,
            "answer_b": rb.answer,
            "route_b": rb.route,
        }

    fixed = tuple(brief(x, y) for x, y, u, v in zip(pa, pb, ca, cb) if v and not u)
    broken = tuple(brief(x, y) for x, y, u, v in zip(pa, pb, ca, cb) if u and not v)
    return Comparison(pa[0].system, pb[0].system, tuple(rows), fixed, broken, unit, len(a_runs))


def fmt_value(x: float | None, digits: int = 3) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def comparison_markdown(c: Comparison) -> str:
    """The comparison as Markdown: metric table, then fixed and broken items."""
    what = (
        "whole clusters (organisation or document" + (", at each seed" if c.seeds > 1 else "") + ")"
        if c.unit == "cluster"
        else "items, each as if independent"
    )
    out = [
        f"# {c.name_b} vs {c.name_a}\n",
        "n: items in the cell (clusters resampled); a rate's own denominator is in parentheses when smaller. "
        f"The 95 % CI and the test resample {what}" + (f", over {c.seeds} seeds" if c.seeds > 1 else "") + ".\n",
        f"| metric | scenario | knowledge | n | {c.name_a} | {c.name_b} | diff | 95% CI | {TESTS[c.unit]} |",
        "|---|---|---|---|---|---|---|---|---|",
    ]

    def val(x: float, den: int, n: int) -> str:
        return fmt_value(x) + (f" ({den})" if den != n else "")

    for r in c.rows:
        out.append(
            f"| {r.metric} | {r.scenario} | {r.knowledge} | {r.n} ({r.clusters}) | {val(r.a, r.den_a, r.n)} | "
            f"{val(r.b, r.den_b, r.n)} | {fmt_value(r.diff)} | [{fmt_value(r.lo)}, {fmt_value(r.hi)}] | "
            f"{fmt_value(r.p_mcnemar, 4)} |"
        )
    for title, items in (("Fixed by", c.fixed), ("Broken by", c.broken)):
        out.append(f"\n## {title} {c.name_b} ({len(items)})\n")
        out += [
            f"- `{x['qid']}` ({x['scenario']}/{x['knowledge']}): {x['question']} — gold "
            f"{x['gold']}; {c.name_a}: {x['answer_a']!r}; {c.name_b}: {x['answer_b']!r}"
            for x in items
        ]
    return "\n".join(out) + "\n"


def write_comparison(c: Comparison, out_dir: str | Path, *, force: bool = False, inputs: Sequence[str | Path] = ()) -> Path:
    """Write `compare.md` and `compare.json` into out_dir; returns the Markdown path. Existing ones
    are replaced only when this code wrote them (core/outputs.py) or with `force`; `inputs` (the
    compared results) never."""
    out = output_dir(out_dir)
    files = [out / "compare.json", out / "compare.md"]
    outputs.claim(files, force=force, inputs=inputs)
    data = {
        "a": c.name_a,
        "b": c.name_b,
        "unit": c.unit,
        "test": TESTS[c.unit],
        "seeds": c.seeds,
        "rows": [asdict(r) for r in c.rows],
        "fixed": list(c.fixed),
        "broken": list(c.broken),
    }
    text = json.dumps(nan_to_none(data), indent=1, ensure_ascii=False, allow_nan=False)
    (out / "compare.json").write_text(text, encoding="utf-8")
    path = out / "compare.md"
    path.write_text(comparison_markdown(c), encoding="utf-8")
    outputs.record(files)
    return path
