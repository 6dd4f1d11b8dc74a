"""Reports over one or more runs: metrics.json, report.md, a self-contained report.html, exports.

`write_report(runs, out_dir)` takes run directories (or {name: [ItemResult]}) and writes
- metrics.json: per system answer, retrieval, conflict, detector and attribution numbers (and the
  paired comparison when there are exactly two systems: the first is A, the baseline);
- report.md and report.html, reading top-down: the banner counted from the headline's targets
  table, the forest plot of the paired LoRA-RAG − baseline differences per cell, the caller's
  headline, then the other plots (eval/plots.py: accuracy per scenario x knowledge with 95 % CIs,
  attribution classes per system, detector ROC and reliability, the gate's doubt histograms with
  its threshold; each also a PNG named by what it shows, `PLOT_FILES`), then the detail tables;
- explorer.html: every item of every system in one filterable page (eval/explorer.py);
- items.jsonl (one tidy row per system and item, with `correct` and its attribution class:
  eval/tables.py, `lorarag.load_results`), attribution.jsonl (every item labelled) and
  ragas-<system>.jsonl (RAGAS's dataset columns: user_input, response, retrieved_contexts, reference).
`correct` (a rule per item, default: a gold answer in the reply) and `score` (the per-item score the
forest plot differences, default: `correct` as 0/1) come from the caller, so the report counts an
item right by the same rule as the caller's headline.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path

from lorarag.core import outputs
from lorarag.eval import conflict_metrics as cm
from lorarag.eval import retrieval_metrics as rm
from lorarag.eval.answer_metrics import answer_summary, is_correct
from lorarag.eval.attribution import attribution_lines, attribution_table
from lorarag.eval.compare import compare_items, comparison_markdown
from lorarag.eval.compare_headline import headline_rows, headline_rows_markdown
from lorarag.eval.explorer import EXPLORER_FILE, plots_html, write_explorer
from lorarag.eval.judge import JUDGED_FILE, judge_summary, load_judged
from lorarag.eval.mdhtml import markdown_html, targets_verdict
from lorarag.eval.plots import (
    PLOT_FILES,
    plot_accuracy,
    plot_attribution,
    plot_forest,
    plot_gate,
    plot_reliability,
    plot_roc,
)
from lorarag.eval.records import EvalError, ItemResult, check_unique, load_results, output_dir
from lorarag.eval.report_tables import html_table, md_table, metric_sections
from lorarag.eval.stats import nan_to_none
from lorarag.eval.tables import ITEMS_FILE, cell_differences, write_items
from lorarag.fallback.gate import GATE_FILE

Runs = Sequence[str | Path] | Mapping[str, Sequence[ItemResult]]
Correct = Callable[[ItemResult], bool]


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
        "retrieval": {"retrieved": rm.items_summary(items, "retrieved"), "final": rm.items_summary(items, "final")},
        "conflict": cm.conflict_table(items),
        "by_language": cm.language_table(items),
        "detector": cm.detector_table(items),
        "attribution": attribution_table(items),
        "clasheval": asdict(cm.clasheval(items)),
    }


def export_ragas(items: Sequence[ItemResult], path: str | Path) -> int:
    """Write RAGAS dataset rows as JSONL, in the column names of RAGAS's SingleTurnSample
    (`EvaluationDataset.from_list` reads them): user_input (the question), response (the reply),
    retrieved_contexts (the passages given to the model), reference (the first gold answer; "" for
    an unanswerable item), plus `references` (every gold answer) and `qid` to join back to items.jsonl."""
    path = Path(path)
    with path.open("w", encoding="utf-8") as fh:
        for r in items:
            fh.write(
                json.dumps(
                    {
                        "user_input": r.question,
                        "response": r.answer,
                        "retrieved_contexts": list(r.final_texts),
                        "reference": r.gold_answers[0] if r.gold_answers else "",
                        "references": list(r.gold_answers),
                        "qid": r.qid,
                    },
                    ensure_ascii=False,
                )
                + "\n"
            )
    return len(items)


def _gate(gate: Mapping | str | Path | None) -> tuple[dict | None, str]:
    """The adapter's gate calibration (a gate.json dict, file or its folder), or None and why not."""
    if gate is None:
        return None, "skipped: no gate.json was passed to the report (the caller passes the adapter's)"
    if isinstance(gate, Mapping):
        return dict(gate), ""
    path = Path(gate) / GATE_FILE if Path(gate).is_dir() else Path(gate)
    try:
        return json.loads(path.read_text(encoding="utf-8")), ""
    except (OSError, ValueError) as exc:
        return None, f"skipped: {path} could not be read ({exc.__class__.__name__})"


def report_plots(
    systems: Mapping[str, Sequence[ItemResult]],
    gate: Mapping | None,
    gate_note: str = "",
    *,
    pair: tuple[str, str] | None = None,
    correct: Correct = is_correct,
    score: Callable[[ItemResult], float] | None = None,
    resamples: int = 2000,
    seed: int = 0,
) -> dict[str, tuple[str, bytes | str]]:
    """Title -> (PLOT_FILES key, PNG bytes or a note saying why that plot is not there), the forest
    plot of `pair` = (baseline, LoRA-RAG) first: `score` per item (default: `correct` as 0/1)."""
    if pair is not None and all(p in systems for p in pair):
        rows = cell_differences(
            systems[pair[0]], systems[pair[1]], score or (lambda r: float(correct(r))), resamples=resamples, seed=seed
        )
        forest = plot_forest(rows, *pair) or "skipped: no cell has a paired difference"
        forest_title = f"Headline: {pair[1]} − {pair[0]} per cell (paired, 95% CI)"
    else:
        forest, forest_title = "skipped: no (baseline, LoRA-RAG) pair of systems", "Headline: paired differences per cell"
    no_score = "skipped: no system has a verdict score"
    plots: dict[str, tuple[str, bytes | str]] = {
        forest_title: ("forest", forest),
        "Accuracy by scenario x knowledge (95% CI)": ("accuracy", plot_accuracy(systems)),
        "Error attribution by system": ("attribution", plot_attribution(systems, correct)),
        "Detector ROC (flawed vs consistent contexts)": ("roc", plot_roc(systems) or no_score),
        "Reliability of the verdict score": ("reliability", plot_reliability(systems) or no_score),
    }
    thr = gate.get("threshold") if gate else None
    if isinstance(thr, (int, float)) and math.isfinite(thr):
        gate_plot = plot_gate(systems, float(thr)) or "skipped: no item carries a gate reading in its trace notes"
    else:
        gate_plot = gate_note or "skipped: gate.json holds no threshold"
    plots["Gate doubt: known vs never-learned facts"] = ("gate", gate_plot)
    return plots


CSS = (
    "body{font:14px/1.45 system-ui,sans-serif;max-width:1180px;margin:auto;padding:0 16px;color:#1d1d1d}"
    "table{border-collapse:collapse;margin:8px 0;font-size:12px}td,th{border:1px solid #ccc;padding:2px 6px;"
    "text-align:right}th{background:#eee}table.headline td:first-child,table.headline td:nth-child(2)"
    "{text-align:left}tr.missed td{background:#fde3d6}tr.met td{background:#e0f3ec}"
    ".verdict{font-size:15px;font-weight:600;padding:8px 12px;border-left:5px solid #0072B2;background:#eef5fb}"
    ".plots{display:flex;flex-wrap:wrap;gap:18px;align-items:flex-start}.plots figure{margin:0;max-width:100%}"
    ".plots img{max-width:100%;height:auto}.plots figcaption{font-weight:600}.note{color:#666;max-width:340px}"
    "nav a{margin-right:14px}"
)


def write_report(
    runs: Runs,
    out_dir: str | Path,
    *,
    resamples: int = 2000,
    seed: int = 0,
    title: str = "lorarag evaluation report",
    headline: str | None = None,
    gate: Mapping | str | Path | None = None,
    pair: tuple[str, str] | None = None,
    explorer: bool = True,
    force: bool = False,
    correct: Correct = is_correct,
    score: Callable[[ItemResult], float] | None = None,
) -> Path:
    """Write metrics.json, report.md, report.html, items.jsonl, exports and (`explorer`) explorer.html
    for `runs`; returns the HTML path.

    The pages read top-down: the banner (targets met, counted from the `Targets` table of
    `headline`), the forest plot of `pair`'s paired differences per cell, `headline` (Markdown from
    the caller, e.g. the run's base-vs-LoRA table with its targets), then the other plots, then the
    detail tables. `gate` is the adapter's gate.json (a dict, the file or its folder): its threshold
    is drawn over the gate's doubt histograms (without it that plot is skipped with a note). `pair` =
    (base, LoRA) names for the forest plot, the explorer's side-by-side view and fixed/broken marks
    (default: the two systems, when two). `correct` decides an item right (items.jsonl, attribution,
    explorer) and `score` is what the forest plot differences (default: `correct` as 0/1): pass the
    headline's own rules. Files already in `out_dir` are replaced only when this code wrote them
    (core/outputs.py) or with `force`; the runs' own results are never replaced.
    """
    systems, judged = _load(runs)
    out = output_dir(out_dir)
    gate_info, gate_note = _gate(gate)
    names = list(systems)
    if pair is None and len(names) == 2:
        pair = (names[0], names[1])
    drawn = report_plots(
        systems,
        gate_info,
        gate_note,
        pair=pair,
        correct=correct,
        score=score or (lambda r: float(correct(r))),
        resamples=resamples,
        seed=seed,
    )
    plots = {t: v for t, (_, v) in drawn.items()}  # title -> PNG or note (the pages' and explorer's form)
    pngs = {t: (PLOT_FILES[k], v) for t, (k, v) in drawn.items() if isinstance(v, bytes)}  # title -> (file, PNG)
    files = [out / f for f in ("metrics.json", "attribution.jsonl", ITEMS_FILE, "report.md", "report.html")]
    files += [out / f"ragas-{_safe(n)}.jsonl" for n in names] + [out / f for f, _ in pngs.values()]
    files += [out / EXPLORER_FILE] if explorer else []
    outputs.claim(files, force=force, inputs=_inputs(runs))
    metrics: dict = {"systems": {n: system_metrics(items) for n, items in systems.items()}}
    for n, summary in judged.items():  # LLM-judged faithfulness / relevance, when a judge phase ran
        metrics["systems"][n]["judge"] = summary
    comp_md = head_md = ""
    if len(names) == 2:
        a, b = systems[names[0]], systems[names[1]]
        comp = compare_items(a, b, resamples=resamples, seed=seed)
        rows = headline_rows(a, b, comparison=comp)
        metrics["comparison"] = {
            "a": names[0],
            "b": names[1],
            "rows": [asdict(r) for r in comp.rows],
            "fixed": list(comp.fixed),
            "broken": list(comp.broken),
        }
        metrics["headline"] = [asdict(r) for r in rows]
        comp_md, head_md = comparison_markdown(comp), headline_rows_markdown(rows, names[0], names[1])
    (out / "metrics.json").write_text(
        json.dumps(nan_to_none(metrics), indent=1, ensure_ascii=False, allow_nan=False), encoding="utf-8"
    )
    with (out / "attribution.jsonl").open("w", encoding="utf-8") as fh:
        for items in systems.values():
            fh.writelines(attribution_lines(items, correct))
    write_items(systems, out / ITEMS_FILE, correct)
    for n, items in systems.items():
        export_ragas(items, out / f"ragas-{_safe(n)}.jsonl")
    for fname, png in pngs.values():
        (out / fname).write_bytes(png)
    sections = metric_sections(metrics)
    if explorer:
        write_explorer(
            systems, out / EXPLORER_FILE, pair=pair, gate=gate_info, plots=plots, title=f"{title}: explorer", correct=correct
        )
    verdict = targets_verdict(headline) if headline else None
    first = next(iter(plots))  # the forest plot: the headline's picture, shown before its table
    rest = {t: v for t, v in plots.items() if t != first}

    md = [f"# {title}\n", f"Systems: {', '.join(names)}\n"]
    if explorer:
        md.append(
            f"Every item, filterable, with its sources, reply, verdict and route: [{EXPLORER_FILE}]({EXPLORER_FILE})\n"
        )
    md += [f"**{verdict}**\n"] if verdict else []
    md += [f"![{first}]({pngs[first][0]})\n" if first in pngs else f"{first}: {plots[first]}\n"]
    if headline:
        md.append(headline)
    elif head_md:
        md += [f"## Headline: {names[1]} vs {names[0]}\n", head_md]
    md += [f"![{t}]({pngs[t][0]})\n" for t in rest if t in pngs]
    md += [f"{t}: {v}\n" for t, v in rest.items() if isinstance(v, str)]
    if headline and head_md:
        md += [f"## Paired metrics: {names[1]} vs {names[0]}\n", head_md]
    for t, rows, cols in sections:
        md += [f"## {t}\n", md_table(rows, cols)]
    if comp_md:
        md += ["## Paired comparison\n", comp_md.split("\n", 1)[1]]
    (out / "report.md").write_text("\n".join(md), encoding="utf-8")

    h = [
        f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f"<p>Systems: {html.escape(', '.join(names))}</p>",
        "<nav><a href='#headline'>headline</a><a href='#plots'>plots</a><a href='#detail'>detail</a>"
        + (f"<a href='{EXPLORER_FILE}'><b>run explorer: every item</b></a>" if explorer else "")
        + "</nav>",
        "<section id='headline'>",
        f"<p class='verdict'>{html.escape(verdict)}</p>" if verdict else "",
        f"<div class='plots'>{plots_html({first: plots[first]})}</div>",
    ]
    if headline:
        h.append(markdown_html(headline))
    elif metrics.get("headline"):
        h += [
            f"<h2>Headline: {html.escape(names[1])} vs {html.escape(names[0])}</h2>",
            html_table(metrics["headline"], list(metrics["headline"][0])),
        ]
    h.append("</section>")
    h.append(f"<section id='plots'><h2>Plots</h2><div class='plots'>{plots_html(rest)}</div></section>")
    h.append("<section id='detail'><h2>Detail</h2>")
    if headline and metrics.get("headline"):
        h += [
            f"<h3>Paired metrics: {html.escape(names[1])} vs {html.escape(names[0])}</h3>",
            html_table(metrics["headline"], list(metrics["headline"][0])),
        ]
    for t, rows, cols in sections:
        h += [f"<h3>{html.escape(t)}</h3>", html_table(rows, cols)]
    if metrics.get("comparison"):
        c = metrics["comparison"]
        h += ["<h3>Paired comparison</h3>", html_table(c["rows"], list(c["rows"][0]) if c["rows"] else [])]
        for label in ("fixed", "broken"):
            h += [
                f"<h4>{label.capitalize()} by {html.escape(c['b'])} ({len(c[label])})</h4>",
                html_table(c[label], ("qid", "scenario", "knowledge", "question", "answer_a", "answer_b")),
            ]
    h.append("</section></body></html>")
    path = out / "report.html"
    path.write_text("\n".join(h), encoding="utf-8")
    outputs.record(files)
    return path


def _inputs(runs: Runs) -> list[Path]:
    """The files a report reads (never to be written over): each run's results and judged rows."""
    if isinstance(runs, Mapping):
        return []
    paths = []
    for r in runs:
        p = Path(r)
        paths += [p / "results.jsonl", p / JUDGED_FILE] if p.is_dir() else [p]
    return paths


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)
