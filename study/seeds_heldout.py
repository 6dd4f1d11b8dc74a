"""What `lorarag seeds` says about how held out its test items are: each run's test-split reads (the test
ledger, study/ledger.py) and each flawed cell's context-only probe (eval/shortcut.py), per run and on average.

A pooled table is only as held out as its runs. Every run's headline says how often its test split was read
and whether a cell's contexts can be told by their form alone; the pooled summary gathers both from the runs'
data summaries (`<run>/data/summary.json`, written by study/kb.py and study/ledger.note_reads), so a reader of
the pooled numbers sees them beside the numbers, not in six other files.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path

from lorarag.eval.shortcut import FLAWED_CELLS, SHORTCUT_AUROC
from lorarag.study.kb import read_summary
from lorarag.study.ledger import reads_text


def _probe(p: dict | None) -> str:
    if not p:
        return "–"
    auc = "–" if p.get("auroc") is None else f"{p['auroc']:.2f}"
    return f"{auc} (length {p['length_auroc']:.2f})"


def heldout_markdown(labels: Sequence[int | str], roots: Sequence[Path]) -> str:
    """Markdown: per run, the ledger's counts at its read and each flawed cell's probe AUROC (text, and
    length alone); then each cell's mean over the runs and the cells above SHORTCUT_AUROC."""
    summaries = [read_summary(Path(r)) for r in roots]
    probes = [s.get("shortcuts") or {} for s in summaries]
    cells = [c for c in FLAWED_CELLS if any(c in p for p in probes)]
    lines = [
        "## Held out: test reads and context-only probes",
        "",
        "Each run's test split as the ledger counted it at that run's read (study/ledger.py), and each flawed "
        "cell's context-only probe (eval/shortcut.py: TF-IDF + logistic regression on held-out facts, AUROC "
        "against the consistent contexts, length alone in brackets; 0.5 = chance).",
        "",
        "| run | test split | " + " | ".join(c.replace("_", " ") for c in cells) + " |",
        "|---|---|" + "---|" * len(cells),
    ]
    for label, summary, p in zip(labels, summaries, probes):
        reads = reads_text(summary) or "not recorded"
        lines.append(f"| {label} | {reads} | " + " | ".join(_probe(p.get(c)) for c in cells) + " |")
    if cells:
        means = []
        for c in cells:
            text = [p[c]["auroc"] for p in probes if c in p and p[c].get("auroc") is not None]
            length = [p[c]["length_auroc"] for p in probes if c in p]
            means.append((c, statistics.fmean(text) if text else None, statistics.fmean(length)))
        lines.append(
            "| mean | | "
            + " | ".join(("–" if t is None else f"{t:.2f}") + f" (length {ln:.2f})" for _, t, ln in means)
            + " |"
        )
        told = [c.replace("_", " ") for c, t, ln in means if max(t or 0.0, ln) > SHORTCUT_AUROC]
        lines += [
            "",
            (
                f"Above {SHORTCUT_AUROC} on the mean: {', '.join(told)}. Those cells' contexts can be told by "
                "their form, so a detector may flag them without consulting its memory: read them beside the "
                "never-learned cells, where memory cannot help."
                if told
                else f"No cell's probe is above {SHORTCUT_AUROC} on the mean: no cell's contexts are told by form."
            ),
        ]
    return "\n".join(lines) + "\n"
