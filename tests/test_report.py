"""Render the report from a small two-system results fixture; check files, HTML structure, images."""

from __future__ import annotations

import base64
import json
from html.parser import HTMLParser

import pytest

from lorarag.eval.records import save_results
from lorarag.eval.report import write_report
from tests.eval_fixtures import make_item

G, W = "50 km/h", "70 km/h"


def _fixture():
    base, lora = [], []
    for i in range(24):
        sc = ("consistent", "factual_error", "outdated")[i % 3]
        kn = "known" if i < 16 else "unknown"
        wrong_ctx = sc != "consistent"
        common = dict(qid=f"q{i}", scenario=sc, knowledge=kn, context_answer=W if wrong_ctx else G,
                      closed_book_answer=G if kn == "known" else "no idea",
                      final_texts=(f"The limit is {W if wrong_ctx else G}.", "x"))
        base.append(make_item(system="base_rag", answer=W if wrong_ctx else G, **common))
        flag = 0.9 if wrong_ctx else 0.1 + 0.02 * i
        lora.append(make_item(system="lora_rag", answer=G if (kn == "known" or not wrong_ctx) else W,
                              route="fallback" if wrong_ctx and kn == "known" else "context",
                              verdict="conflicting" if flag > 0.5 else "supported", flag_score=flag,
                              verdict_score=max(flag, 1 - flag), **common))
    lora.append(make_item(system="lora_rag", qid="zh1", language="zh", question="首都是哪里？",
                          gold_answers=("北京",), answer="答案是北京。", flag_score=0.2, verdict="supported",
                          route="context"))
    return base, lora


class _Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.imgs, self.external = [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        a = dict(attrs)
        if tag == "img":
            self.imgs.append(a.get("src", ""))
        for key in ("src", "href"):
            # data: URIs, anchors in the page, and the run explorer written beside it
            if key in a and not (a[key].startswith(("data:", "#")) or a[key] == "explorer.html"):
                self.external.append(a[key])


def test_html_report_from_run_dirs(tmp_path):
    base, lora = _fixture()
    save_results(tmp_path / "a" / "results.jsonl", base)
    save_results(tmp_path / "b" / "results.jsonl", lora)
    html_path = write_report([tmp_path / "a", tmp_path / "b"], tmp_path / "rep", resamples=1000)
    out = tmp_path / "rep"
    for name in ("report.html", "report.md", "metrics.json", "attribution.jsonl", "explorer.html",
                 "ragas-base_rag.jsonl", "ragas-lora_rag.jsonl"):
        assert (out / name).exists(), name

    p = _Collect()
    p.feed(html_path.read_text(encoding="utf-8"))
    assert p.external == []  # self-contained
    assert len(p.imgs) == 4  # accuracy, attribution, ROC, reliability (no gate.json passed: no gate plot)
    for src in p.imgs:
        assert src.startswith("data:image/png;base64,")
        png = base64.b64decode(src.split(",", 1)[1])
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 2000
    assert p.tags.count("table") >= 10 and "h2" in p.tags

    def no_nan(x):
        raise AssertionError(f"non-JSON constant {x}")

    m = json.loads((out / "metrics.json").read_text(), parse_constant=no_nan)
    assert set(m["systems"]) == {"base_rag", "lora_rag"}
    base_cons = next(r for r in m["systems"]["base_rag"]["conflict"]
                     if r["scenario"] == "consistent" and r["knowledge"] == "known")
    assert base_cons["accuracy"] == 1.0
    # Base RAG is misled on every wrong context whose closed-book answer was right (known facts).
    known = next(r for r in m["systems"]["base_rag"]["conflict"] if r["scenario"] == "all"
                 and r["knowledge"] == "known")
    assert known["context_bias"] == 1.0
    head = {(r["metric"], r["scenario"], r["knowledge"]): r for r in m["headline"]}
    assert head[("accuracy", "factual_error", "known")]["lora"] == 1.0
    assert head[("detector_auroc", "all", "all")]["lora"] == 1.0
    assert m["comparison"]["a"] == "base_rag" and len(m["comparison"]["fixed"]) > 0

    md = (out / "report.md").read_text()
    assert "## Headline: lora_rag vs base_rag" in md and "![Detector ROC" in md
    rag = [json.loads(x) for x in (out / "ragas-lora_rag.jsonl").read_text().splitlines()]
    assert set(rag[0]) == {"question", "answer", "contexts", "ground_truth", "ground_truths"}
    assert rag[-1]["ground_truth"] == "北京" and rag[-1]["question"] == "首都是哪里？"


def test_single_system_without_detector_has_no_roc(tmp_path):
    base, _ = _fixture()
    html_path = write_report({"base_rag": base}, tmp_path)
    p = _Collect()
    p.feed(html_path.read_text())
    assert len(p.imgs) == 2
    md = (tmp_path / "report.md").read_text()
    assert "accuracy by language" not in md  # one language: no split to show
    _, lora = _fixture()  # 24 en items + one zh item
    write_report({"lora_rag": lora}, tmp_path / "bi")
    md = (tmp_path / "bi/report.md").read_text()
    assert "## lora_rag: accuracy by language" in md and "| zh | consistent | known | 1 | 1.000" in md
    with pytest.raises(ValueError):
        write_report({"empty": []}, tmp_path / "x")


def test_duplicates_other_systems_and_a_file_as_out_are_errors(tmp_path):
    from lorarag.core.errors import RecordError, UserError

    base, lora = _fixture()
    with pytest.raises(RecordError, match="results of base_rag: duplicate result for qid 'q0'"):
        write_report({"base_rag": base + base[:1]}, tmp_path / "d")
    with pytest.raises(RecordError, match="several systems"):
        write_report({"base_rag": base + lora[:1]}, tmp_path / "m")
    save_results(tmp_path / "run" / "results.jsonl", base + base[:1])
    with pytest.raises(RecordError, match=r"results.jsonl:25: duplicate result for qid 'q0' \(first at line 1\)"):
        write_report([tmp_path / "run"], tmp_path / "r")
    taken = tmp_path / "report.html"
    taken.write_text("mine")
    with pytest.raises(UserError, match="report.html: is a file; the output must be a folder"):
        write_report({"base_rag": base}, taken)
    assert taken.read_text() == "mine"
