"""The report's plots (matplotlib, Agg), each returned as PNG bytes, drawn to be read at a glance.

Colours: up to 8 systems take the Okabe-Ito palette (distinguishable with every common colour-vision
deficiency); more take matplotlib's tab20, its ten hues dark then light, so 20 systems still get 20
distinct colours. Every axis says what it counts and in which unit, and legends sit outside the
plotting area so they never cover a bar. Each function returns None when its data is absent (e.g. no
system has a verdict score), so the report can say why a plot is missing instead of drawing an empty one.
The report saves each plot under the name of what it shows (`PLOT_FILES`), never a number that
moves when another plot is skipped.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Callable, Mapping, Sequence

from lorarag.eval import conflict_metrics as cm
from lorarag.eval.answer_metrics import is_correct
from lorarag.eval.attribution import CLASSES, attribute
from lorarag.eval.records import ItemResult
from lorarag.scenarios.records import SCENARIO_TYPES, SOUND_CONTEXTS

# Okabe & Ito (2008), "Color Universal Design": blue, orange, bluish green, vermillion, sky blue,
# reddish purple, yellow, black; systems take them in this order.
OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#56B4E9", "#CC79A7", "#F0E442", "#000000")
CLASS_COLOURS = {
    "correct": "#009E73",
    "retrieval_miss": "#56B4E9",
    "rerank_drop": "#0072B2",
    "generation_failure": "#999999",
    "conflict_missed": "#D55E00",
    "memory_overrode": "#882255",
    "wrong_route": "#E69F00",
    "fallback_wrong": "#CC79A7",
    "abstained_correctly": "#F0E442",
    "abstained_wrongly": "#000000",
}
_DOUBT = re.compile(r"^gate doubt \(([^)]*)\)=(\S+)$")


# matplotlib's tab20, its ten dark hues first, then their light twins.
TAB20 = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
    "#aec7e8",
    "#ffbb78",
    "#98df8a",
    "#ff9896",
    "#c5b0d5",
    "#c49c94",
    "#f7b6d2",
    "#c7c7c7",
    "#dbdb8d",
    "#9edae5",
)
# Report title -> file name, by what the plot shows; the forest plot of the headline comes first.
PLOT_FILES = {
    "forest": "headline-forest.png",
    "accuracy": "accuracy-by-cell.png",
    "attribution": "attribution-by-system.png",
    "roc": "detector-roc.png",
    "reliability": "verdict-reliability.png",
    "gate": "gate-doubt.png",
}


def palette(n: int) -> tuple[str, ...]:
    """The colours of `n` systems: Okabe-Ito up to 8, tab20 up to 20 (distinct), repeating beyond."""
    return OKABE_ITO if n <= len(OKABE_ITO) else TAB20


def colour(i: int, n: int = 0) -> str:
    """The i-th of `n` systems' colour."""
    pal = palette(n)
    return pal[i % len(pal)]


def system_colours(names: Sequence[str]) -> dict[str, str]:
    """Each system's colour, the same in every plot of one report."""
    return {name: colour(i, len(names)) for i, name in enumerate(names)}


def gate_doubt(notes: Sequence[str]) -> tuple[str, float] | None:
    """(signal, doubt score) the gate read for one item, from its trace notes; None without one."""
    for n in notes:
        m = _DOUBT.match(n)
        if m:
            try:
                return m.group(1), float(m.group(2))
            except ValueError:
                return None
    return None


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"axes.spines.top": False, "axes.spines.right": False, "font.size": 9})
    return plt


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return buf.getvalue()


def _legend_right(ax, **kw) -> None:
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, frameon=False, fontsize=8, **kw)


def plot_accuracy(systems: Mapping[str, Sequence[ItemResult]]) -> bytes:
    """Grouped bars: accuracy per scenario x knowledge cell for every system, Wilson 95 % CI whiskers."""
    plt = _plt()
    tables = {name: [r for r in cm.conflict_table(items) if r["scenario"] != "all"] for name, items in systems.items()}
    cells = sorted(
        {(r["scenario"], r["knowledge"]) for rows in tables.values() for r in rows},
        key=lambda c: (SCENARIO_TYPES.index(c[0]), c[1]),
    )
    fig, ax = plt.subplots(figsize=(min(11.0, max(6.0, 0.3 * len(cells) * max(2, len(tables)))), 3.8))
    width = 0.8 / max(1, len(tables))
    for j, (name, rows) in enumerate(tables.items()):
        by = {(r["scenario"], r["knowledge"]): r for r in rows}
        xs, ys, err = [], [], [[], []]
        for i, c in enumerate(cells):
            if c in by:
                r = by[c]
                xs.append(i + (j - (len(tables) - 1) / 2) * width)
                ys.append(r["accuracy"])
                # max(0, .): at p = 0 or 1 the Wilson bound equals p up to rounding.
                err[0].append(max(0.0, r["accuracy"] - r["acc_lo"]))
                err[1].append(max(0.0, r["acc_hi"] - r["accuracy"]))
        ax.bar(
            xs,
            ys,
            width,
            yerr=err,
            capsize=2,
            label=name,
            color=colour(j, len(tables)),
            edgecolor="white",
            lw=0.5,
            error_kw={"elinewidth": 0.8, "ecolor": "#333333"},
        )
    for i in range(1, len(cells)):
        ax.axvline(i - 0.5, color="#dddddd", lw=0.6, zorder=0)
    ax.set_xticks(range(len(cells)), [f"{s.replace('_', ' ')}\n({k})" for s, k in cells], fontsize=8)
    ax.set_xlim(-0.5, len(cells) - 0.5)
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("scenario (knowledge split)")
    ax.set_ylabel("accuracy (share of items, 95% Wilson CI)")
    _legend_right(ax, title="system")
    return _png(fig)


def plot_attribution(
    systems: Mapping[str, Sequence[ItemResult]], correct: Callable[[ItemResult], bool] = is_correct
) -> bytes:
    """One horizontal stacked bar per system: the share of its items in each attribution class
    (`correct` decides the `correct` class, as in eval/attribution.py)."""
    plt = _plt()
    names = list(systems)
    fig, ax = plt.subplots(figsize=(7.5, 0.5 * len(names) + 1.4))
    left = [0.0] * len(names)
    shares = {c: [] for c in CLASSES}
    for name in names:
        items = systems[name]
        labels = [attribute(r, correct) for r in items]
        for c in CLASSES:
            shares[c].append(100.0 * labels.count(c) / max(1, len(items)))
    for c in CLASSES:
        ax.barh(
            range(len(names)),
            shares[c],
            0.7,
            left=left,
            label=c.replace("_", " "),
            color=CLASS_COLOURS[c],
            edgecolor="white",
            lw=0.5,
        )
        left = [a + b for a, b in zip(left, shares[c])]
    ax.set_yticks(range(len(names)), [f"{n} (n={len(systems[n])})" for n in names], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("share of the system's items (%)")
    _legend_right(ax, title="attribution class")
    return _png(fig)


def _scored(systems: Mapping[str, Sequence[ItemResult]]) -> dict[str, list[ItemResult]]:
    return {
        n: [r for r in items if r.flag_score is not None]
        for n, items in systems.items()
        if any(r.flag_score is not None for r in items)
    }


def plot_roc(systems: Mapping[str, Sequence[ItemResult]]) -> bytes | None:
    """Detector ROC (flawed vs consistent context) of every system with a verdict score."""
    names = list(systems)
    curves = {n: cm.roc_points(items) for n, items in _scored(systems).items()}
    curves = {n: c for n, c in curves.items() if c[0]}
    if not curves:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(4.2, 3.8))
    for name, (fpr, tpr) in curves.items():
        auc = cm.detector(systems[name]).auroc
        ax.plot(
            fpr,
            tpr,
            label=f"{name} (AUROC {auc:.2f})",
            color=colour(names.index(name), len(names)),
            lw=1.6,
            drawstyle="steps-post",
        )
    ax.plot([0, 1], [0, 1], ls="--", color="grey", lw=0.8, label="chance")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)
    ax.set_aspect("equal")
    ax.set_xlabel("false positive rate\n(share of consistent contexts flagged)")
    ax.set_ylabel("true positive rate\n(share of flawed contexts flagged)")
    _legend_right(ax, title="score: 1 − P(supported)")
    return _png(fig)


def reliability(items: Sequence[ItemResult], bins: int = 10) -> list[tuple[float, float, int]]:
    """(mean predicted P(flawed), observed share flawed, n) per non-empty equal-width bin of flag_score."""
    acc: list[list[float]] = [[] for _ in range(bins)]
    hit: list[list[bool]] = [[] for _ in range(bins)]
    for r in items:
        if r.flag_score is None or math.isnan(r.flag_score):
            continue
        b = min(bins - 1, int(r.flag_score * bins))
        acc[b].append(r.flag_score)
        hit[b].append(r.scenario not in SOUND_CONTEXTS)
    return [(sum(p) / len(p), sum(h) / len(h), len(p)) for p, h in zip(acc, hit) if p]


def expected_calibration_error(points: Sequence[tuple[float, float, int]]) -> float:
    """Sum over bins of |predicted - observed| weighted by the bin's share of items."""
    n = sum(k for _, _, k in points)
    return sum(k * abs(p - o) for p, o, k in points) / n if n else math.nan


def plot_reliability(systems: Mapping[str, Sequence[ItemResult]]) -> bytes | None:
    """Reliability diagram of the verdict score read as P(context flawed) = 1 − P(supported), with the
    number of items per bin underneath."""
    scored = _scored(systems)
    if not scored:
        return None
    plt = _plt()
    names = list(systems)
    fig, (ax, hx) = plt.subplots(2, 1, figsize=(4.2, 4.8), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    ax.plot([0, 1], [0, 1], ls="--", color="grey", lw=0.8, label="perfectly calibrated")
    width = 0.1 / max(1, len(scored))
    for j, (name, items) in enumerate(scored.items()):
        pts = reliability(items)
        c = colour(names.index(name), len(names))
        ax.plot(
            [p for p, _, _ in pts],
            [o for _, o, _ in pts],
            marker="o",
            ms=4,
            color=c,
            lw=1.4,
            label=f"{name} (ECE {expected_calibration_error(pts):.2f})",
        )
        hx.bar([min(9, int(p * 10)) / 10 + (j + 0.5) * width for p, _, _ in pts], [k for _, _, k in pts], width, color=c)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)
    ax.set_ylabel("observed share of flawed contexts")
    _legend_right(ax, title="system")
    hx.set_xlabel("predicted P(context flawed) = 1 − P(supported), 10 bins")
    hx.set_ylabel("items")
    return _png(fig)


def plot_gate(systems: Mapping[str, Sequence[ItemResult]], threshold: float) -> bytes | None:
    """Histograms of the gate's doubt score for known vs never-learned facts, with the fitted
    threshold (above it the memory counts as unknown); None when no item carries a reading."""
    readings = {(n, r.knowledge): [] for n, items in systems.items() for r in items}
    signal = ""
    for n, items in systems.items():
        for r in items:
            g = gate_doubt(r.notes)
            if g is not None and math.isfinite(g[1]):
                signal = g[0]
                readings[(n, r.knowledge)].append(g[1])
    readings = {k: v for k, v in readings.items() if v}
    if not readings:
        return None
    plt = _plt()
    vals = [x for v in readings.values() for x in v] + [threshold]
    lo, hi = min(vals), max(vals)
    edges = [lo + (hi - lo) * i / 24 for i in range(25)] if hi > lo else [lo - 0.5, lo + 0.5]
    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    style = {"known": ("#0072B2", "known facts (trained)"), "unknown": ("#D55E00", "never-learned facts")}
    multi = len({n for n, _ in readings}) > 1
    for (n, k), v in sorted(readings.items(), key=lambda kv: kv[0][1]):
        c, label = style.get(k, ("#999999", k))
        ax.hist(
            v,
            bins=edges,
            color=c,
            alpha=0.55,
            label=f"{label}{f' — {n}' if multi else ''} (n={len(v)})",
            edgecolor="white",
            lw=0.4,
        )
    ax.axvline(threshold, color="black", ls="--", lw=1.2, label=f"fitted threshold {threshold:.3f}")
    ax.annotate(" memory counts as unknown →", (threshold, 1.0), xycoords=("data", "axes fraction"), va="top", fontsize=8)
    ax.set_xlabel(f"gate doubt: {signal or 'score'} (nats per token)")
    ax.set_ylabel("test items")
    _legend_right(ax, title="fact")
    return _png(fig)


def plot_forest(rows: Sequence[Mapping], base: str, lora: str, metric: str = "mean per-item score") -> bytes | None:
    """The headline as a picture: one row per cell (scenario, knowledge), the paired difference
    `lora` − `base` as a dot with its 95 % CI as a bar, a line at 0. A CI wholly above 0 is drawn
    green, wholly below vermillion, one across 0 grey; a cell of one cluster has a dot and says
    "no CI". `rows` carry label, n, clusters, diff, lo, hi (eval/tables.cell_differences); None
    without a row that has a difference."""
    rows = [r for r in rows if r["diff"] is not None and math.isfinite(r["diff"])]
    if not rows:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 0.42 * len(rows) + 1.3))
    for y, r in enumerate(rows):
        lo, hi, d = r["lo"], r["hi"], r["diff"]
        has_ci = lo is not None and hi is not None and math.isfinite(lo) and math.isfinite(hi)
        c = ("#009E73" if lo > 0 else "#D55E00" if hi < 0 else "#777777") if has_ci else "#777777"
        if has_ci:
            ax.plot([lo, hi], [y, y], color=c, lw=2.2, solid_capstyle="butt")
        ax.plot([d], [y], "o", color=c, ms=6)
        note = f"{d:+.2f} [{lo:+.2f}, {hi:+.2f}]" if has_ci else f"{d:+.2f} (one cluster: no CI)"
        ax.annotate(f"  {note}", (1.0, y), xycoords=("axes fraction", "data"), va="center", fontsize=8, color=c)
    ax.axvline(0, color="black", lw=0.9)
    ax.set_yticks(range(len(rows)), [f"{r['label']}  n={r['n']} ({r['clusters']} clusters)" for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(-1.05, 1.05)
    ax.set_xlabel(f"{lora} − {base}: {metric} on the same items (95% CI resampling clusters)")
    ax.grid(axis="x", color="#eeeeee", lw=0.6)
    return _png(fig)
