"""Just enough Markdown to HTML for the report's headline: headings, pipe tables, paragraphs, bold.

The headline comes as Markdown from the caller (study/headline.py writes it for the terminal and
headline.md); the HTML report shows the same text first. A table row whose cells say `**MISSED**`
is marked `missed` and one saying `yes` in its last cell `met`, so the verdict reads by colour too.
"""

from __future__ import annotations

import html
import re

_BOLD = re.compile(r"\*\*(.+?)\*\*")


def _inline(text: str) -> str:
    return _BOLD.sub(r"<strong>\1</strong>", html.escape(text.strip()))


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _table(lines: list[str]) -> str:
    head, body = _cells(lines[0]), [_cells(ln) for ln in lines[2:]] if len(lines) > 1 else []
    out = ["<table class='headline'><thead><tr>" + "".join(f"<th>{_inline(c)}</th>" for c in head) + "</tr></thead><tbody>"]
    for row in body:
        cls = " class='missed'" if any("**MISSED**" in c for c in row) else (" class='met'" if row[-1:] == ["yes"] else "")
        out.append(f"<tr{cls}>" + "".join(f"<td>{_inline(c)}</td>" for c in row) + "</tr>")
    return "".join(out) + "</tbody></table>"


def markdown_html(md: str) -> str:
    """HTML for headline Markdown: `#`-headings (one level down), pipe tables, paragraphs."""
    out, table, para = [], [], []

    def flush() -> None:
        if table:
            out.append(_table(table))
            table.clear()
        if para:
            out.append("<p>" + " ".join(_inline(p) for p in para) + "</p>")
            para.clear()

    for line in md.splitlines():
        s = line.strip()
        if s.startswith("|"):
            if para:
                flush()
            table.append(s)
            continue
        flush()
        m = re.match(r"^(#{1,5})\s+(.*)$", s)
        if m:
            level = min(6, len(m.group(1)))
            out.append(f"<h{level}>{_inline(m.group(2))}</h{level}>")
        elif s:
            para.append(s)
    flush()
    return "\n".join(out)


def targets_verdict(md: str) -> str | None:
    """'k of n targets met' from the Markdown's `### Targets` table (None when it has none)."""
    if "### Targets" not in md:
        return None
    rows = [_cells(ln) for ln in md.split("### Targets", 1)[1].splitlines() if ln.strip().startswith("|")][2:]
    met = sum(1 for r in rows if r[-1:] == ["yes"])
    missed = sum(1 for r in rows if r[-1:] == ["**MISSED**"])
    return f"{met} of {len(rows)} targets met" + (f", {missed} missed (the red rows of the targets table)" if missed else "")
