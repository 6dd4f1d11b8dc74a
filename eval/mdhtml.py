"""The report's Markdown as HTML (markdown-it-py, CommonMark plus tables), and the targets banner.

The headline comes as Markdown from the caller (study/headline.py writes it for the terminal and
headline.md); the HTML report shows the same text first. A table row with a cell saying `**MISSED**`
is marked `missed` and one saying `yes` in its last cell `met`, so the verdict reads by colour too.
The banner ("k of n targets met, m missed") counts the rows of the tables under a `Targets` heading,
and only those: the tables that follow it (detection, baselines, attribution) are no targets.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

MISSED, MET = "**MISSED**", "yes"


@lru_cache(maxsize=1)
def _parser() -> Any:
    from markdown_it import MarkdownIt

    # raw HTML in the Markdown is shown as text, never passed through
    return MarkdownIt("commonmark", {"html": False}).enable("table")


def _rows(tokens: list, start: int) -> list[tuple[int, list[str]]]:
    """(index of tr_open, the cells' Markdown) of every body row of the table opening at `start`."""
    out: list[tuple[int, list[str]]] = []
    body, i = False, start
    while i < len(tokens) and tokens[i].type != "table_close":
        t = tokens[i]
        if t.type == "tbody_open":
            body = True
        elif t.type == "tr_open" and body:
            out.append((i, []))
        elif t.type == "inline" and body and out:
            out[-1][1].append(t.content.strip())
        i += 1
    return out


def markdown_html(md: str) -> str:
    """HTML of Markdown (headings, lists, tables, emphasis, code); tables get the class `headline`
    and their rows `missed` / `met` by the verdict they hold."""
    p = _parser()
    tokens = p.parse(md)
    for i, t in enumerate(tokens):
        if t.type != "table_open":
            continue
        t.attrSet("class", "headline")
        for j, cells in _rows(tokens, i):
            if any(MISSED in c for c in cells):
                tokens[j].attrSet("class", "missed")
            elif cells[-1:] == [MET]:
                tokens[j].attrSet("class", "met")
    return p.renderer.render(tokens, p.options, {})


def targets_counts(md: str) -> tuple[int, int, int] | None:
    """(met, rows, missed) of the tables under the Markdown's `Targets` headings (None when it has none)."""
    tokens = _parser().parse(md)
    under, found, met, n, missed = False, False, 0, 0, 0
    for i, t in enumerate(tokens):
        if t.type == "heading_open":
            under = tokens[i + 1].content.strip().startswith("Targets")
        elif t.type == "table_open" and under:
            found = True
            for _, cells in _rows(tokens, i):
                n += 1
                met += cells[-1:] == [MET]
                missed += cells[-1:] == [MISSED]
    return (met, n, missed) if found else None


def targets_verdict(md: str) -> str | None:
    """'k of n targets met, m missed' from the Markdown's `Targets` table (None when it has none)."""
    counts = targets_counts(md)
    if counts is None:
        return None
    met, n, missed = counts
    return f"{met} of {n} targets met, {missed} missed" + (" (the red rows of the targets table)" if missed else "")
