"""Reports over one or more runs: metrics.json, report.md, a self-contained report.html, exports.

`write_report(runs, out_dir)` takes run directories (or {name: [ItemResult]}) and writes
- metrics.json: per system answer, retrieval, conflict, detector and attribution numbers (and the
  paired comparison when there are exactly two systems: the first is A, the baseline);
- report.md and report.html (plots embedded as base64 PNG: accuracy by scenario with 95 % CIs,
  attribution bars, detector ROC);
- attribution.jsonl (every item labelled) and ragas-<system>.jsonl (RAGAS dataset columns).
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import Mapping, Sequence

from lorarag.eval import conflict_metrics as cm
from lorarag.eval import retrieval_metrics as rm
from lorarag.eval.answer_metrics import answer_summary
from lorarag.eval.attribution import CLASSES, attribute, attribution_table
from lorarag.eval.compare import (
    compare_items,
    comparison_markdown,
    headline_markdown,
    headline_rows,
)
from lorarag.eval.judge import JUDGED_FILE, judge_summary, load_judged
from lorarag.eval.records import EvalError, ItemResult, check_unique, load_results, output_dir
from lorarag.eval.stats import nan_to_none
from lorarag.scenarios.records import SCENARIO_TYPES

Runs = Sequence[str | Path] | Mapping[str, Sequence[ItemResult]]


def _load(runs: Runs) -> tuple[dict[str, list[ItemResult]], dict[str, dict]]:
    """Results per system name, and the judge summary of runs that have a judged.jsonl."""

    judged: dict[str, dict] = {}
    if isinstance(runs, Mapping):
        out = {k: list(v) for k, v in runs.items()}
        for k, v in out.items():
            check_unique(v, f"results of {k}")
    else:
        out = {}
        for run in runs:
            items = load_results(run)
            name = items[0].system if items else Path(run).name
            if name in out:
                name = f"{name}@{Path(run).name}"
            out[name] = items
            jpath = Path(run) / JUDGED_FILE
            if Path(run).is_dir() and jpath.exists():
                judged[name] = judge_summary(load_judged(jpath))
    empty = [k for k, v in out.items() if not v]
    if not out or empty:
        raise EvalError(f"no results to report{': ' + ', '.join(empty) if empty else ''}")
    return out, judged


def system_metrics(items: Sequence[ItemResult]) -> dict:
    """Every metric of one system's results (JSON-ready)."""
    return {
        "answer": answer_summary(items),
        "retrieval": {"retrieved": rm.items_summary(items, "retrieved"),
                      "final": rm.items_summary(items, "final")},
        "conflict": cm.conflict_table(items),
        "by_language": cm.language_table(items),
        "detector": cm.detector_table(items),
        "attribution": attribution_table(items),
    }


def export_ragas(items: Sequence[ItemResult], path: str | Path) -> int:
    """Write RAGAS dataset rows (question, answer, contexts, ground_truth, ground_truths) as JSONL."""
    path = Path(path)
    with path.open("w", encoding="utf-8") as fh:
        for r in items:
            fh.write(json.dumps({"question": r.question, "answer": r.answer, "contexts": list(r.final_texts),
                                 "ground_truth": r.gold_answers[0] if r.gold_answers else "",
                                 "ground_truths": list(r.gold_answers)}, ensure_ascii=False) + "\n")
    return len(items)


# --------------------------------------------------------------------------------------
# Plots (matplotlib, Agg), returned as PNG bytes.
# --------------------------------------------------------------------------------------


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return buf.getvalue()


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_accuracy(systems: Mapping[str, Sequence[ItemResult]]) -> bytes:
    """Grouped bars: accuracy per scenario/knowledge cell and system, Wilson 95 % CI whiskers."""
    plt = _plt()
    tables = {name: [r for r in cm.conflict_table(items) if r["scenario"] != "all"]
              for name, items in systems.items()}
    cells = sorted({(r["scenario"], r["knowledge"]) for rows in tables.values() for r in rows},
                   key=lambda c: (SCENARIO_TYPES.index(c[0]), c[1]))
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(cells)), 3.6))
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
        ax.bar(xs, ys, width, yerr=err, capsize=3, label=name)
    ax.set_xticks(range(len(cells)), [f"{s}\n{k}" for s, k in cells], fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("accuracy (95% CI)")
    ax.legend(fontsize=8)
    return _png(fig)


def plot_attribution(systems: Mapping[str, Sequence[ItemResult]]) -> bytes:
    """Grouped horizontal bars: count of each attribution class per system."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    height = 0.8 / max(1, len(systems))
    for j, (name, items) in enumerate(systems.items()):
        counts = [sum(1 for r in items if attribute(r) == c) for c in CLASSES]
        ax.barh([i + j * height for i in range(len(CLASSES))], counts, height, label=name)
    ax.set_yticks([i + height * (len(systems) - 1) / 2 for i in range(len(CLASSES))], CLASSES, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("items")
    ax.legend(fontsize=8)
    return _png(fig)


def plot_roc(systems: Mapping[str, Sequence[ItemResult]]) -> bytes | None:
    """Detector ROC (flawed vs consistent) per system with a flag score; None if no system has one."""
    curves = {n: cm.roc_points(items) for n, items in systems.items()}
    curves = {n: c for n, c in curves.items() if c[0]}
    if not curves:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(4, 4))
    for name, (fpr, tpr) in curves.items():
        auc = cm.detector(systems[name]).auroc
        ax.plot(fpr, tpr, label=f"{name} (AUROC {auc:.3f})")
    ax.plot([0, 1], [0, 1], ls="--", color="grey", lw=0.8)
    ax.set_xlabel("false positive rate")
    ax.set_ylabel("true positive rate")
    ax.legend(fontsize=8, loc="lower right")
    return _png(fig)


# --------------------------------------------------------------------------------------
# Markdown and HTML.
# --------------------------------------------------------------------------------------


def _f(x) -> str:
    if x is None:
        return "—"
    if isinstance(x, float):
        return "—" if math.isnan(x) else f"{x:.3f}"
    return str(x)


def _md_table(rows: Sequence[dict], cols: Sequence[str]) -> str:
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(_f(r.get(c)) for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def _html_table(rows: Sequence[dict], cols: Sequence[str]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_f(r.get(c)))}</td>" for c in cols) + "</tr>"
                   for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


CONFLICT_COLS = ("scenario", "knowledge", "n", "accuracy", "acc_lo", "acc_hi", "context_bias", "prior_bias",
                 "fallback_success", "over_fallback", "abstain_rate")
LANGUAGE_COLS = ("language", "scenario", "knowledge", "n", "accuracy", "acc_lo", "acc_hi")
DETECTOR_COLS = ("knowledge", "positives", "n", "n_pos", "precision", "recall", "f1", "auroc", "n_invalid")
ATTR_COLS = ("scenario", "knowledge", "n", *CLASSES)


def _sections(metrics: dict) -> list[tuple[str, list[dict], Sequence[str]]]:
    out = []
    for name, m in metrics["systems"].items():
        ans = [{"metric": k, "value": v} for k, v in m["answer"].items()]
        stages = m["retrieval"]
        ret = [{"metric": k, **{st: stages[st].get(k) for st in stages}} for k in stages["final"]]
        ans += [{"metric": f"judge_{k}", "value": v} for k, v in m.get("judge", {}).items()]
        out += [(f"{name}: answers", ans, ("metric", "value")),
                (f"{name}: conflict and fallback", m["conflict"], CONFLICT_COLS)]
        if len({r["language"] for r in m["by_language"]}) > 1:
            out.append((f"{name}: accuracy by language", m["by_language"], LANGUAGE_COLS))
        if any(r["n"] for r in m["detector"]):
            out.append((f"{name}: detector", m["detector"], DETECTOR_COLS))
        if len(ret) > 1:  # more than the count: some item had a relevant chunk to find
            out.append((f"{name}: retrieval (retrieved = top-N before rerank, final = given to the model)",
                        ret, ("metric", *stages)))
        out.append((f"{name}: error attribution", m["attribution"], ATTR_COLS))
    return out


def write_report(runs: Runs, out_dir: str | Path, *, resamples: int = 2000, seed: int = 0,
                 title: str = "lorarag evaluation report") -> Path:
    """Write metrics.json, report.md, report.html and exports for `runs`; returns the HTML path."""
    systems, judged = _load(runs)
    out = output_dir(out_dir)
    metrics: dict = {"systems": {n: system_metrics(items) for n, items in systems.items()}}
    for n, summary in judged.items():  # LLM-judged faithfulness / relevance, when a judge phase ran
        metrics["systems"][n]["judge"] = summary
    names = list(systems)
    comp_md = head_md = ""
    if len(names) == 2:
        a, b = systems[names[0]], systems[names[1]]
        comp = compare_items(a, b, resamples=resamples, seed=seed)
        rows = headline_rows(a, b, comparison=comp)
        metrics["comparison"] = {"a": names[0], "b": names[1], "rows": [asdict(r) for r in comp.rows],
                                 "fixed": list(comp.fixed), "broken": list(comp.broken)}
        metrics["headline"] = [asdict(r) for r in rows]
        comp_md, head_md = comparison_markdown(comp), headline_markdown(rows, names[0], names[1])
    (out / "metrics.json").write_text(json.dumps(nan_to_none(metrics), indent=1, ensure_ascii=False,
                                                allow_nan=False), encoding="utf-8")
    with (out / "attribution.jsonl").open("w", encoding="utf-8") as fh:
        for items in systems.values():
            for r in items:
                fh.write(json.dumps({"system": r.system, "qid": r.qid, "scenario": r.scenario,
                                     "knowledge": r.knowledge, "label": attribute(r)}, ensure_ascii=False) + "\n")
    for n, items in systems.items():
        export_ragas(items, out / f"ragas-{_safe(n)}.jsonl")

    plots = {"Accuracy by scenario (95% CI)": plot_accuracy(systems),
             "Error attribution": plot_attribution(systems),
             "Detector ROC (flawed vs consistent contexts)": plot_roc(systems)}
    plots = {k: v for k, v in plots.items() if v is not None}
    for i, (k, png) in enumerate(plots.items(), 1):
        (out / f"plot{i}.png").write_bytes(png)
    sections = _sections(metrics)

    md = [f"# {title}\n", f"Systems: {', '.join(names)}\n"]
    if head_md:
        md += [f"## Headline: {names[1]} vs {names[0]}\n", head_md]
    md += [f"![{k}](plot{i}.png)\n" for i, k in enumerate(plots, 1)]
    for t, rows, cols in sections:
        md += [f"## {t}\n", _md_table(rows, cols)]
    if comp_md:
        md += ["## Paired comparison\n", comp_md.split("\n", 1)[1]]
    (out / "report.md").write_text("\n".join(md), encoding="utf-8")

    h = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
         "<style>body{font-family:sans-serif;max-width:1100px;margin:auto}table{border-collapse:collapse;"
         "margin:8px 0;font-size:12px}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}"
         "th{background:#eee}</style></head><body>", f"<h1>{html.escape(title)}</h1>",
         f"<p>Systems: {html.escape(', '.join(names))}</p>"]
    if metrics.get("headline"):
        hcols = list(metrics["headline"][0])
        h += [f"<h2>Headline: {html.escape(names[1])} vs {html.escape(names[0])}</h2>",
              _html_table(metrics["headline"], hcols)]
    for k, png in plots.items():
        h.append(f"<h2>{html.escape(k)}</h2><img alt='{html.escape(k)}' "
                 f"src='data:image/png;base64,{base64.b64encode(png).decode()}'>")
    for t, rows, cols in sections:
        h += [f"<h2>{html.escape(t)}</h2>", _html_table(rows, cols)]
    if metrics.get("comparison"):
        c = metrics["comparison"]
        h += ["<h2>Paired comparison</h2>", _html_table(c["rows"], list(c["rows"][0]) if c["rows"] else [])]
        for label in ("fixed", "broken"):
            h += [f"<h3>{label.capitalize()} by {html.escape(c['b'])} ({len(c[label])})</h3>",
                  _html_table(c[label], ("qid", "scenario", "knowledge", "question", "answer_a", "answer_b"))]
    h.append("</body></html>")
    path = out / "report.html"
    path.write_text("\n".join(h), encoding="utf-8")
    return path


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)
