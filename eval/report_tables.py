"""The report's metric tables: which columns each section shows, as Markdown and as HTML."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

from lorarag.eval.attribution import CLASSES


def fmt_cell(x) -> str:
    if x is None:
        return "—"
    if isinstance(x, float):
        return "—" if math.isnan(x) else f"{x:.3f}"
    return str(x)


def md_table(rows: Sequence[dict], cols: Sequence[str]) -> str:
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(fmt_cell(r.get(c)) for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def html_table(rows: Sequence[dict], cols: Sequence[str]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(fmt_cell(r.get(c)))}</td>" for c in cols) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


CONFLICT_COLS = (
    "scenario",
    "knowledge",
    "n",
    "accuracy",
    "acc_lo",
    "acc_hi",
    "context_bias",
    "prior_bias",
    "fallback_success",
    "over_fallback",
    "consistent_abstention",
    "abstain_rate",
    "correct_abstention",
)
LANGUAGE_COLS = ("language", "scenario", "knowledge", "n", "accuracy", "acc_lo", "acc_hi")
DETECTOR_COLS = ("knowledge", "positives", "n", "n_pos", "precision", "recall", "f1", "auroc", "n_invalid")
ATTR_COLS = ("scenario", "knowledge", "n", *CLASSES)
CLASHEVAL_COLS = (
    "context_bias",
    "context_bias_lo",
    "context_bias_hi",
    "n_context",
    "prior_bias",
    "prior_bias_lo",
    "prior_bias_hi",
    "n_prior",
    "balanced",
)


def metric_sections(metrics: dict) -> list[tuple[str, list[dict], Sequence[str]]]:
    out = []
    for name, m in metrics["systems"].items():
        ans = [{"metric": k, "value": v} for k, v in m["answer"].items()]
        stages = m["retrieval"]
        ret = [{"metric": k, **{st: stages[st].get(k) for st in stages}} for k in stages["final"]]
        ans += [{"metric": f"judge_{k}", "value": v} for k, v in m.get("judge", {}).items()]
        out += [
            (f"{name}: answers", ans, ("metric", "value")),
            (f"{name}: conflict and fallback", m["conflict"], CONFLICT_COLS),
        ]
        if len({r["language"] for r in m["by_language"]}) > 1:
            out.append((f"{name}: accuracy by language", m["by_language"], LANGUAGE_COLS))
        if any(r["n"] for r in m["detector"]):
            out.append((f"{name}: detector", m["detector"], DETECTOR_COLS))
        if len(ret) > 1:  # more than the count: some item had a relevant chunk to find
            out.append(
                (
                    f"{name}: retrieval (retrieved = top-N before rerank, final = given to the model)",
                    ret,
                    ("metric", *stages),
                )
            )
        out.append((f"{name}: error attribution", m["attribution"], ATTR_COLS))
        if m["clasheval"]["n_context"] or m["clasheval"]["n_prior"]:
            out.append(
                (
                    f"{name}: ClashEval biases (items where exactly one of prior and context is right; 95 % bootstrap CIs)",
                    [m["clasheval"]],
                    CLASHEVAL_COLS,
                )
            )
    return out
