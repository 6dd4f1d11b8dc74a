"""The run explorer's data and page (no browser: tests/test_explorer_browser.py opens it), and the
report's top-down order and plots."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

from lorarag.eval.compare import compare_items
from lorarag.eval.explorer import ITEM_FIELDS, QUESTION_FIELDS, explorer_data, write_explorer
from lorarag.eval.mdhtml import markdown_html, targets_verdict
from lorarag.eval.plots import expected_calibration_error, gate_doubt, reliability
from lorarag.eval.report import write_report
from tests.eval_fixtures import make_item, synthetic_run

GATE = {"threshold": 1.6, "signal": "closed_book_nll", "rule": "logistic", "auroc": 0.91}


class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.external, self.scripts, self.imgs, self._in = [], [], [], None
        self.order: list[str] = []  # h2/section ids and imgs, in document order

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for key in ("src", "href"):
            v = a.get(key)
            if v and not (v.startswith("data:") or v.startswith("#") or re.fullmatch(r"[\w.-]+\.html", v)):
                self.external.append(v)
        if tag == "script":
            self._in = a.get("type", "js")
            self.scripts.append([self._in, ""])
        if tag == "img":
            self.imgs.append(a.get("alt"))
            self.order.append("img")
        if tag == "section":
            self.order.append(a.get("id", ""))

    def handle_endtag(self, tag):
        if tag == "script":
            self._in = None

    def handle_data(self, data):
        if self._in is not None:
            self.scripts[-1][1] += data


def _data(path) -> dict:
    p = _Page()
    p.feed(path.read_text(encoding="utf-8"))
    assert p.external == [], p.external  # no server, no network, no CDN
    (blob,) = [s for t, s in p.scripts if t == "application/json"]
    return json.loads(blob)


def test_explorer_data_holds_every_item_once_with_shared_questions_and_chunks():
    run = synthetic_run(40)
    d = explorer_data(run, pair=("base_rag", "lora_rag"), gate=GATE)
    assert d["item_fields"] == list(ITEM_FIELDS) and d["question_fields"] == list(QUESTION_FIELDS)
    assert len(d["items"]) == sum(len(v) for v in run.values()) == 240
    assert len(d["questions"]) == 40  # one row per item, shared by the six systems
    F = {n: i for i, n in enumerate(ITEM_FIELDS)}
    ids = [c[0] for c in d["chunks"]]
    assert len(ids) == len(set(ids))  # each chunk stored once
    # fixed/broken marks agree with the paired comparison
    comp = compare_items(run["base_rag"], run["lora_rag"], resamples=1000)
    lora = d["systems"].index("lora_rag")
    by_qid = {d["questions"][it[F["q"]]][0]: it[F["mark"]] for it in d["items"] if it[F["s"]] == lora}
    assert sorted(q for q, m in by_qid.items() if m == 1) == sorted(x["qid"] for x in comp.fixed)
    assert sorted(q for q, m in by_qid.items() if m == -1) == sorted(x["qid"] for x in comp.broken)
    assert d["fixed"] == len(comp.fixed) and d["broken"] == len(comp.broken)
    other = d["systems"].index("oracle")
    assert all(it[F["mark"]] == 0 for it in d["items"] if it[F["s"]] == other)  # marks only on the pair
    # the gate reading is parsed from the trace notes, the verdict distribution kept
    rows = [it for it in d["items"] if it[F["s"]] == lora]
    assert all(isinstance(it[F["doubt"]], float) for it in rows)
    assert all(it[F["gated"]] == (it[F["doubt"]] > 1.6) for it in rows)
    assert all(len(it[F["probs"]]) == 5 and it[F["raw"]].startswith("memory:") for it in rows)
    assert d["gate"]["threshold"] == 1.6 and d["pair"] == [2, 3]


def test_explorer_page_is_self_contained_and_survives_hostile_text(tmp_path):
    evil = "</script><script>alert(1)</script> <!-- \u2028"
    items = {
        "a": [
            make_item(system="a", qid="q1", answer=evil, question="What? " + evil),
            make_item(
                system="a",
                qid="q2",
                final_ids=("kb1~fe", "kb2"),
                target_ids=("kb1~fe",),
                scenario="factual_error",
                context_answer="70 km/h",
                final_texts=("The limit is 70 km/h.", "Other text."),
            ),
        ]
    }
    path = write_explorer(items, tmp_path / "explorer.html", plots={"A plot": b"\x89PNG fake", "Skipped": "why"})
    d = _data(path)
    F = {n: i for i, n in enumerate(ITEM_FIELDS)}
    assert d["items"][0][F["answer"]] == evil  # intact after the round trip
    text = path.read_text()
    assert text.count("</script>") == 2 and "data:image/png;base64," in text and "why" in text
    assert d["pair"] is None and d["gate"] is None


def test_explorer_size_grows_with_items_not_faster(tmp_path):
    small = write_explorer(synthetic_run(200), tmp_path / "s.html").stat().st_size
    big = write_explorer(synthetic_run(2000), tmp_path / "b.html").stat().st_size
    template = write_explorer({"x": [make_item(system="x")]}, tmp_path / "t.html").stat().st_size
    per_item = (big - small) / (6 * 1800)
    assert per_item < 400, per_item  # bytes per (system, item): no per-item images or repeated text
    assert (big - template) < 11 * (small - template)


def test_reliability_bins_and_gate_notes():
    items = [
        make_item(qid=f"q{i}", scenario="consistent" if i < 5 else "factual_error", flag_score=f)
        for i, f in enumerate([0.05, 0.05, 0.15, 0.95, 0.95, 0.95, 0.95, 0.95, 0.15, 0.05])
    ]
    pts = reliability(items)
    assert [n for _, _, n in pts] == [3, 2, 5]
    assert pts[-1][1] == 0.6 and abs(pts[0][1] - 1 / 3) < 1e-9
    assert 0 < expected_calibration_error(pts) < 1
    assert gate_doubt(("p_unknown=0.1", "gate doubt (closed_book_nll)=2.5167")) == ("closed_book_nll", 2.5167)
    assert gate_doubt(("p_unknown=none",)) is None


HEADLINE = """## Headline: base_rag vs lora_rag

| scenario | knowledge | base_rag accuracy [95% CI] |
|---|---|---|
| consistent | known | 1.00 |

### Targets

| target | measured | met |
|---|---|---|
| base RAG, consistent (known) >= 0.9 | 1.00 | yes |
| LoRA-RAG, factual error (known) >= 0.8 | 0.10 | **MISSED** |
"""


def test_headline_markdown_renders_with_its_verdict():
    assert targets_verdict(HEADLINE).startswith("1 of 2 targets met, 1 missed")
    h = markdown_html(HEADLINE)
    assert "<h2>Headline: base_rag vs lora_rag</h2>" in h and '<tr class="missed">' in h and "<strong>MISSED</strong>" in h
    assert '<tr class="met">' in h and targets_verdict("no table") is None


def test_report_reads_top_down_headline_plots_detail(tmp_path):
    run = synthetic_run(120)
    pair = {n: run[n] for n in ("base_rag", "lora_rag")}
    path = write_report(run, tmp_path, resamples=1000, headline=HEADLINE, gate=GATE, pair=("base_rag", "lora_rag"))
    p = _Page()
    html = path.read_text()
    p.feed(html)
    assert p.external == []
    # the forest plot of the headline's differences inside the headline, before its table
    assert p.order[:3] == ["headline", "img", "plots"] and p.order[-1] == "detail"
    assert p.imgs == [
        "Headline: lora_rag − base_rag per cell (paired, 95% CI)",
        "Accuracy by scenario x knowledge (95% CI)",
        "Error attribution by system",
        "Detector ROC (flawed vs consistent contexts)",
        "Reliability of the verdict score",
        "Gate doubt: known vs never-learned facts",
    ]
    assert html.index("1 of 2 targets met") < html.index("<img")
    assert "href='explorer.html'" in html and (tmp_path / "explorer.html").is_file()
    d = _data(tmp_path / "explorer.html")
    assert len(d["items"]) == 6 * 120 and d["gate"]["threshold"] == 1.6
    assert _data(tmp_path / "explorer.html")["systems"] == list(run)
    md = (tmp_path / "report.md").read_text()
    assert md.index("### Targets") < md.index("![Accuracy by scenario")
    # without gate.json the gate plot is skipped with a note; no explorer when not asked for
    path = write_report(pair, tmp_path / "pair", resamples=1000, explorer=False)
    p = _Page()
    p.feed(path.read_text())
    assert len(p.imgs) == 5 and "skipped: no gate.json was passed" in path.read_text()
    assert not (tmp_path / "pair/explorer.html").exists()
