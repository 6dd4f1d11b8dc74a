"""The study's verdict tables: how often LoRA-RAG's verdict doubts its sources, per scenario and
knowledge, and which doubt it voices (wrong, outdated, irrelevant, ...)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from lorarag.eval.records import ItemResult
from lorarag.eval.stats import wilson_ci
from lorarag.fallback.format import VERDICTS
from lorarag.scenarios.records import SCENARIO_TYPES
from lorarag.study.baseline_tables import Label


def plain(knowledge: str, items: Sequence[ItemResult]) -> str:
    return knowledge


KNOWLEDGE_HEADER = ["| scenario | known facts | never-learned facts |", "|---|---|---|"]


def _rows_by_knowledge(lora: Sequence[ItemResult], cell: Callable[[str, list[ItemResult]], str]) -> list[str]:
    """Markdown rows, one a scenario, of `cell(knowledge, items)` over the items with a verdict on
    known and on never-learned facts; `–` where a cell has none, no row where both have none."""
    rows = []
    for s in SCENARIO_TYPES:
        cells = []
        for k in ("known", "unknown"):
            rs = [r for r in lora if r.scenario == s and r.knowledge == k and r.verdict is not None]
            cells.append(cell(k, rs) if rs else "–")
        if any(c != "–" for c in cells):
            rows.append(f"| {s} | {cells[0]} | {cells[1]} |")
    return rows


def detection_table(lora: Sequence[ItemResult], label: Label = plain) -> list[str]:
    """Markdown: how often the detector doubts its source (a verdict other than `supported`) per
    scenario, on known and on never-learned facts. Memory can only help on known facts: a detector
    that flags wrong passages of never-learned facts as often as of known ones reads their form."""

    def doubt(k: str, rs: list[ItemResult]) -> str:
        f = sum(r.verdict != "supported" for r in rs)
        lo, hi = wilson_ci(f, len(rs))
        return f"{f}/{len(rs)} = {f / len(rs):.2f} [{lo:.2f}, {hi:.2f}]{label(k, rs).removeprefix(k)}"

    rows = _rows_by_knowledge(lora, doubt)
    if not rows:
        return []
    return [
        "### Does detection rest on memory? The detector's doubt (verdict not `supported`), 95 % Wilson CI",
        "",
        *KNOWLEDGE_HEADER,
        *rows,
        "",
        *doubt_kinds_table(lora),
    ]


def doubt_kinds_table(lora: Sequence[ItemResult]) -> list[str]:
    """Markdown: which verdict each doubt is, per scenario and knowledge. A doubt gap made of
    `insufficient` / `irrelevant` (no memory to read a right source by) is a reading gap, not an
    accusation of right sources (`conflicting` / `outdated`)."""
    kinds = [v for v in (*VERDICTS, "invalid") if v != "supported"]

    def counts(_: str, rs: list[ItemResult]) -> str:
        return " · ".join(f"{v} {n}" for v in kinds if (n := sum(r.verdict == v for r in rs))) or "none"

    return [
        "What the doubt says: the verdicts other than `supported`, counted. `conflicting` and `outdated` "
        "call the source wrong; `insufficient` and `irrelevant` say it does not settle the question.",
        "",
        *KNOWLEDGE_HEADER,
        *_rows_by_knowledge(lora, counts),
        "",
    ]
