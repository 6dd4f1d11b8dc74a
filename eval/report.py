"""Reports over one or more runs: metrics.json, report.md, a self-contained report.html, exports.

`write_report(runs, out_dir)` takes run directories (or {name: [ItemResult]}) and writes
- metrics.json: per system answer, retrieval, conflict, detector and attribution numbers (and the
  paired comparison when there are exactly two systems: the first is A, the baseline);
- report.md and report.html, reading top-down: the caller's headline (with its targets) first,
  then the plots (eval/plots.py, embedded as base64 PNG: accuracy per scenario x knowledge with
  95 % CIs, attribution classes per system, detector ROC and reliability, the gate's doubt
  histograms with its threshold), then the detail tables;
- explorer.html: every item of every system in one filterable page (eval/explorer.py);
- attribution.jsonl (every item labelled) and ragas-<system>.jsonl (RAGAS dataset columns).
"""

from __future__ import annotations

import html
import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import Mapping, Sequence

from lorarag.core import outputs
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
from lorarag.eval.explorer import EXPLORER_FILE, plots_html, write_explorer
from lorarag.eval.judge import JUDGED_FILE, judge_summary, load_judged
from lorarag.eval.mdhtml import markdown_html, targets_verdict
from lorarag.eval.plots import plot_accuracy, plot_attribution, plot_gate, plot_reliability, plot_roc
from lorarag.eval.records import EvalError, ItemResult, check_unique, load_results, output_dir
from lorarag.eval.stats import nan_to_none
from lorarag.fallback.gate import GATE_FILE

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
        "clasheval": asdict(cm.clasheval(items)),
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
                 "fallback_success", "over_fallback", "consistent_abstention", "abstain_rate",
                 "correct_abstention")
LANGUAGE_COLS = ("language", "scenario", "knowledge", "n", "accuracy", "acc_lo", "acc_hi")
DETECTOR_COLS = ("knowledge", "positives", "n", "n_pos", "precision", "recall", "f1", "auroc", "n_invalid")
ATTR_COLS = ("scenario", "knowledge", "n", *CLASSES)
CLASHEVAL_COLS = ("context_bias", "context_bias_lo", "context_bias_hi", "n_context", "prior_bias",
                  "prior_bias_lo", "prior_bias_hi", "n_prior", "balanced")


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
        if m["clasheval"]["n_context"] or m["clasheval"]["n_prior"]:
            out.append((f"{name}: ClashEval biases (items where exactly one of prior and context is right; "
                        "95 % bootstrap CIs)", [m["clasheval"]], CLASHEVAL_COLS))
    return out


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


def report_plots(systems: Mapping[str, Sequence[ItemResult]], gate: Mapping | None,
                 gate_note: str = "") -> dict[str, bytes | str]:
    """Title -> PNG bytes, or a note saying why that plot is not there."""
    plots: dict[str, bytes | str] = {
        "Accuracy by scenario x knowledge (95% CI)": plot_accuracy(systems),
        "Error attribution by system": plot_attribution(systems),
        "Detector ROC (flawed vs consistent contexts)": plot_roc(systems) or "skipped: no system has a verdict score",
        "Reliability of the verdict score": plot_reliability(systems) or "skipped: no system has a verdict score"}
    thr = gate.get("threshold") if gate else None
    if isinstance(thr, (int, float)) and math.isfinite(thr):
        plots["Gate doubt: known vs never-learned facts"] = (
            plot_gate(systems, float(thr)) or "skipped: no item carries a gate reading in its trace notes")
    else:
        plots["Gate doubt: known vs never-learned facts"] = gate_note or "skipped: gate.json holds no threshold"
    return plots


CSS = ("body{font:14px/1.45 system-ui,sans-serif;max-width:1180px;margin:auto;padding:0 16px;color:#1d1d1d}"
       "table{border-collapse:collapse;margin:8px 0;font-size:12px}td,th{border:1px solid #ccc;padding:2px 6px;"
       "text-align:right}th{background:#eee}table.headline td:first-child,table.headline td:nth-child(2)"
       "{text-align:left}tr.missed td{background:#fde3d6}tr.met td{background:#e0f3ec}"
       ".verdict{font-size:15px;font-weight:600;padding:8px 12px;border-left:5px solid #0072B2;background:#eef5fb}"
       ".plots{display:flex;flex-wrap:wrap;gap:18px;align-items:flex-start}.plots figure{margin:0;max-width:100%}"
       ".plots img{max-width:100%;height:auto}.plots figcaption{font-weight:600}.note{color:#666;max-width:340px}"
       "nav a{margin-right:14px}")


def write_report(runs: Runs, out_dir: str | Path, *, resamples: int = 2000, seed: int = 0,
                 title: str = "lorarag evaluation report", headline: str | None = None,
                 gate: Mapping | str | Path | None = None, pair: tuple[str, str] | None = None,
                 explorer: bool = True, force: bool = False) -> Path:
    """Write metrics.json, report.md, report.html, exports and (`explorer`) explorer.html for `runs`;
    returns the HTML path.

    The pages read top-down: `headline` (Markdown from the caller, e.g. the run's base-vs-LoRA
    table with its targets) first, then the plots, then the detail tables. `gate` is the adapter's
    gate.json (a dict, the file or its folder): its threshold is drawn over the gate's doubt
    histograms (without it that plot is skipped with a note). `pair` = (base, LoRA) names for the
    explorer's side-by-side view and fixed/broken marks (default: the two systems, when two).
    Files already in `out_dir` are replaced only when this code wrote them (core/outputs.py) or with
    `force`; the runs' own results are never replaced.
    """
    systems, judged = _load(runs)
    out = output_dir(out_dir)
    gate_info, gate_note = _gate(gate)
    plots = report_plots(systems, gate_info, gate_note)
    pngs = {k: v for k, v in plots.items() if isinstance(v, bytes)}
    names = list(systems)
    files = [out / f for f in ("metrics.json", "attribution.jsonl", "report.md", "report.html")]
    files += [out / f"ragas-{_safe(n)}.jsonl" for n in names] + [out / f"plot{i}.png" for i in range(1, len(pngs) + 1)]
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

    for i, (k, png) in enumerate(pngs.items(), 1):
        (out / f"plot{i}.png").write_bytes(png)
    sections = _sections(metrics)
    if pair is None and len(names) == 2:
        pair = (names[0], names[1])
    if explorer:
        write_explorer(systems, out / EXPLORER_FILE, pair=pair, gate=gate_info, plots=plots,
                       title=f"{title}: explorer")
    verdict = targets_verdict(headline) if headline else None

    md = [f"# {title}\n", f"Systems: {', '.join(names)}\n"]
    if explorer:
        md.append("Every item, filterable, with its sources, reply, verdict and route: "
                  f"[{EXPLORER_FILE}]({EXPLORER_FILE})\n")
    if headline:
        md += [f"**{verdict}**\n" if verdict else "", headline]
    elif head_md:
        md += [f"## Headline: {names[1]} vs {names[0]}\n", head_md]
    md += [f"![{k}](plot{i}.png)\n" for i, k in enumerate(pngs, 1)]
    md += [f"{k}: {v}\n" for k, v in plots.items() if isinstance(v, str)]
    if headline and head_md:
        md += [f"## Paired metrics: {names[1]} vs {names[0]}\n", head_md]
    for t, rows, cols in sections:
        md += [f"## {t}\n", _md_table(rows, cols)]
    if comp_md:
        md += ["## Paired comparison\n", comp_md.split("\n", 1)[1]]
    (out / "report.md").write_text("\n".join(md), encoding="utf-8")

    h = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
         f"<style>{CSS}</style></head><body>", f"<h1>{html.escape(title)}</h1>",
         f"<p>Systems: {html.escape(', '.join(names))}</p>",
         "<nav><a href='#headline'>headline</a><a href='#plots'>plots</a><a href='#detail'>detail</a>"
         + (f"<a href='{EXPLORER_FILE}'><b>run explorer: every item</b></a>" if explorer else "") + "</nav>"]
    if headline:
        h += ["<section id='headline'>", f"<p class='verdict'>{html.escape(verdict)}</p>" if verdict else "",
              markdown_html(headline), "</section>"]
    elif metrics.get("headline"):
        h += [f"<section id='headline'><h2>Headline: {html.escape(names[1])} vs {html.escape(names[0])}</h2>",
              _html_table(metrics["headline"], list(metrics["headline"][0])), "</section>"]
    h.append(f"<section id='plots'><h2>Plots</h2><div class='plots'>{plots_html(plots)}</div></section>")
    h.append("<section id='detail'><h2>Detail</h2>")
    if headline and metrics.get("headline"):
        h += [f"<h3>Paired metrics: {html.escape(names[1])} vs {html.escape(names[0])}</h3>",
              _html_table(metrics["headline"], list(metrics["headline"][0]))]
    for t, rows, cols in sections:
        h += [f"<h3>{html.escape(t)}</h3>", _html_table(rows, cols)]
    if metrics.get("comparison"):
        c = metrics["comparison"]
        h += ["<h3>Paired comparison</h3>", _html_table(c["rows"], list(c["rows"][0]) if c["rows"] else [])]
        for label in ("fixed", "broken"):
            h += [f"<h4>{label.capitalize()} by {html.escape(c['b'])} ({len(c[label])})</h4>",
                  _html_table(c[label], ("qid", "scenario", "knowledge", "question", "answer_a", "answer_b"))]
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
