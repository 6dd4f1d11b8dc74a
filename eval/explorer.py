"""The run explorer: one self-contained HTML page with every item of every system.

`write_explorer(systems, path, ...)` writes `explorer.html`: no server, no network, no CDN. The
page's CSS and JavaScript are inline (the template `explorer_page.html` beside this module) and
the items are embedded once as compact JSON:

- `questions`: one row per distinct item (qid, scenario, knowledge, language, question, gold
  answers, the context's asserted value, relevant and target chunk ids), shared by every system;
- `chunks`: one row per distinct (chunk id, text), referenced by index from the items;
- `items`: one row per (system, item) with its ids into the two tables above, its route, verdict
  and probabilities, gate reading, raw reply, final answer, attribution class and fixed/broken mark.

So the page grows with the items (no per-item image), and the table is virtualised (only the
visible rows are in the DOM), which keeps 10k items x 6 systems responsive. Plots are passed in
as PNG bytes and embedded once as data URIs.
"""

from __future__ import annotations

import base64
import html
import json
import math
from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from pathlib import Path

from lorarag.eval.answer_metrics import is_correct
from lorarag.eval.attribution import CLASSES, attribute
from lorarag.eval.plots import gate_doubt
from lorarag.eval.records import WRONG_VALUE_SCENARIOS, ItemResult
from lorarag.scenarios.records import SCENARIO_TYPES

EXPLORER_FILE = "explorer.html"
TEMPLATE = "explorer_page.html"
QUESTION_FIELDS = ("qid", "scenario", "knowledge", "language", "question", "gold", "ctx", "relevant", "target", "fact_id")
ITEM_FIELDS = (
    "s",
    "q",
    "cls",
    "route",
    "verdict",
    "ok",
    "abst",
    "answer",
    "raw",
    "flag",
    "vscore",
    "probs",
    "final",
    "retrieved",
    "notes",
    "cb",
    "mem",
    "ctxm",
    "lat",
    "cited",
    "badcite",
    "mark",
    "doubt",
    "gated",
)


def _num(x: float | None, nd: int = 4) -> float | None:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return None
    return round(float(x), nd)


def pair_marks(
    base: Sequence[ItemResult], lora: Sequence[ItemResult], correct: Callable[[ItemResult], bool] = is_correct
) -> dict[str, int]:
    """qid -> 1 when `lora` fixed it (base wrong, LoRA right), -1 when it broke it, 0 otherwise."""
    right = {r.qid: correct(r) for r in base}
    return {r.qid: (int(correct(r)) - int(right[r.qid])) for r in lora if r.qid in right}


class _Tables:
    """Interning of questions and chunks, so shared text is stored once."""

    def __init__(self) -> None:
        self.questions: list[list] = []
        self.chunks: list[list] = []
        self._q: dict[tuple[str, str], int] = {}
        self._c: dict[tuple[str, str | None], int] = {}
        self._cid: dict[str, int] = {}

    def question(self, r: ItemResult) -> int:
        key = (r.qid, r.question)
        if key not in self._q:
            self._q[key] = len(self.questions)
            self.questions.append(
                [
                    r.qid,
                    r.scenario,
                    r.knowledge,
                    r.language,
                    r.question,
                    list(r.gold_answers),
                    r.context_answer,
                    list(r.relevant_ids),
                    list(r.target_ids),
                    r.fact_id,
                ]
            )
        return self._q[key]

    def chunk(self, cid: str, text: str | None) -> int:
        if text is None and cid in self._cid:  # an id seen without its text (retrieved, not given)
            return self._cid[cid]
        key = (cid, text)
        if key not in self._c:
            self._c[key] = len(self.chunks)
            self.chunks.append([cid, text])
            if text is not None or cid not in self._cid:
                self._cid[cid] = self._c[key]
        return self._c[key]


def explorer_data(
    systems: Mapping[str, Sequence[ItemResult]],
    *,
    pair: tuple[str, str] | None = None,
    gate: Mapping | None = None,
    report_href: str | None = None,
    correct: Callable[[ItemResult], bool] = is_correct,
) -> dict:
    """The page's JSON: systems, question and chunk tables, one row per (system, item) (see module doc).

    `pair` = (base, LoRA) system names: their items get a fixed/broken mark and the page shows them
    side by side. `gate` = the adapter's gate.json (threshold, signal, rule, auroc), or None.
    `correct` decides an item right (its `ok` mark, attribution class and fixed/broken mark).
    """
    names = list(systems)
    if pair is not None and not all(p in systems for p in pair):
        pair = None
    marks = pair_marks(systems[pair[0]], systems[pair[1]], correct) if pair else {}
    t = _Tables()
    items: list[list] = []
    for s, name in enumerate(names):
        in_pair = pair is not None and name in pair
        for r in systems[name]:
            final = [t.chunk(c, x) for c, x in zip(r.final_ids, r.final_texts)]
            final += [t.chunk(c, None) for c in r.final_ids[len(r.final_texts) :]]
            g = gate_doubt(r.notes)
            row = {
                "s": s,
                "q": t.question(r),
                "cls": CLASSES.index(attribute(r, correct)),
                "route": r.route,
                "verdict": r.verdict,
                "ok": int(correct(r)),
                "abst": int(r.abstained),
                "answer": r.answer,
                "raw": r.raw_output if r.raw_output and r.raw_output != r.answer else None,
                "flag": _num(r.flag_score),
                "vscore": _num(r.verdict_score),
                "probs": [[lab, _num(p)] for lab, p in r.verdict_probs],
                "final": final,
                "retrieved": [t.chunk(c, None) for c in r.retrieved_ids],
                "notes": list(r.notes),
                "cb": r.closed_book_answer,
                "mem": r.memory_answer,
                "ctxm": r.context_answer_model,
                "lat": _num(r.latency_s, 3),
                "cited": list(r.cited),
                "badcite": list(r.bad_citations),
                "mark": marks.get(r.qid, 0) if in_pair else 0,
                "doubt": _num(g[1]) if g else None,
                "gated": int(any(n.startswith("gate: memory") for n in r.notes)),
            }
            items.append([row[f] for f in ITEM_FIELDS])
    gate_info = None
    if gate is not None:
        gate_info = {k: gate.get(k) for k in ("threshold", "signal", "rule", "auroc", "known_kept", "unseen_rejected")}
        gate_info = {k: (_num(v) if isinstance(v, float) else v) for k, v in gate_info.items()}
    return {
        "systems": names,
        "pair": [names.index(p) for p in pair] if pair else None,
        "fixed": sum(1 for v in marks.values() if v == 1),
        "broken": sum(1 for v in marks.values() if v == -1),
        "classes": list(CLASSES),
        "scenario_order": list(SCENARIO_TYPES),
        "wrong_value_scenarios": list(WRONG_VALUE_SCENARIOS),
        "gate": gate_info,
        "report": report_href,
        "question_fields": list(QUESTION_FIELDS),
        "item_fields": list(ITEM_FIELDS),
        "questions": t.questions,
        "chunks": t.chunks,
        "items": items,
    }


def _script_json(data: dict) -> str:
    """JSON safe inside <script>: no '<' (so no '</script>' or '<!--') can end the element early."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def plots_html(plots: Mapping[str, bytes | str]) -> str:
    """<figure>s for the plots: PNG bytes become data URIs; a str is a note saying why a plot is missing."""
    out = []
    for title, png in plots.items():
        t = html.escape(title)
        if isinstance(png, str):
            out.append(f"<figure><figcaption>{t}</figcaption><div class='note'>{html.escape(png)}</div></figure>")
        else:
            src = "data:image/png;base64," + base64.b64encode(png).decode()
            out.append(f"<figure><figcaption>{t}</figcaption><img alt='{t}' src='{src}'></figure>")
    return "\n".join(out)


def write_explorer(
    systems: Mapping[str, Sequence[ItemResult]],
    path: str | Path,
    *,
    pair: tuple[str, str] | None = None,
    gate: Mapping | None = None,
    plots: Mapping[str, bytes | str] | None = None,
    title: str = "lorarag run explorer",
    report_href: str | None = "report.html",
    correct: Callable[[ItemResult], bool] = is_correct,
) -> Path:
    """Write the explorer page for `systems` to `path` (see the module docstring); returns the path."""
    page = resources.files("lorarag.eval").joinpath(TEMPLATE).read_text(encoding="utf-8")
    data = _script_json(explorer_data(systems, pair=pair, gate=gate, report_href=report_href, correct=correct))
    page = (
        page.replace("__TITLE__", html.escape(title)).replace("__PLOTS__", plots_html(plots or {})).replace("__DATA__", data)
    )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page, encoding="utf-8")
    return path
