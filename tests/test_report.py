"""Render the report from a small two-system results fixture; check files, HTML structure, images.
Then the report of a tiny run (tests/tiny_run.py: the run's real report step): the banner counts the
targets table, the forest plot comes first, plots are named by what they show, no `nan` anywhere."""

from __future__ import annotations

import base64
import json
import re
from html.parser import HTMLParser

import pytest

from lorarag.eval.records import save_results
from lorarag.eval.report import write_report
from tests.eval_fixtures import make_item, synthetic_run
from tests.tiny_run import report_run, with_one_cluster_cell

G, W = "50 km/h", "70 km/h"


def _fixture():
    base, lora = [], []
    for i in range(24):
        sc = ("consistent", "factual_error", "outdated")[i % 3]
        kn = "known" if i < 16 else "unknown"
        wrong_ctx = sc != "consistent"
        common = dict(
            qid=f"q{i}",
            scenario=sc,
            knowledge=kn,
            context_answer=W if wrong_ctx else G,
            closed_book_answer=G if kn == "known" else "no idea",
            final_texts=(f"The limit is {W if wrong_ctx else G}.", "x"),
        )
        base.append(make_item(system="base_rag", answer=W if wrong_ctx else G, **common))
        flag = 0.9 if wrong_ctx else 0.1 + 0.02 * i
        lora.append(
            make_item(
                system="lora_rag",
                answer=G if (kn == "known" or not wrong_ctx) else W,
                route="fallback" if wrong_ctx and kn == "known" else "context",
                verdict="conflicting" if flag > 0.5 else "supported",
                flag_score=flag,
                verdict_score=max(flag, 1 - flag),
                **common,
            )
        )
    lora.append(
        make_item(
            system="lora_rag",
            qid="zh1",
            language="zh",
            question="首都是哪里？",
            gold_answers=("北京",),
            answer="答案是北京。",
            flag_score=0.2,
            verdict="supported",
            route="context",
        )
    )
    return base, lora


class _Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.imgs, self.alts, self.external = [], [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        a = dict(attrs)
        if tag == "img":
            self.imgs.append(a.get("src", ""))
            self.alts.append(a.get("alt", ""))
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
    for name in (
        "report.html",
        "report.md",
        "metrics.json",
        "attribution.jsonl",
        "explorer.html",
        "ragas-base_rag.jsonl",
        "ragas-lora_rag.jsonl",
    ):
        assert (out / name).exists(), name

    p = _Collect()
    p.feed(html_path.read_text(encoding="utf-8"))
    assert p.external == []  # self-contained
    # the forest plot of the two systems' paired differences, accuracy, attribution, ROC, reliability
    # (no gate.json passed: no gate plot)
    assert len(p.imgs) == 5 and p.alts[0] == "Headline: lora_rag − base_rag per cell (paired, 95% CI)"
    for src in p.imgs:
        assert src.startswith("data:image/png;base64,")
        png = base64.b64decode(src.split(",", 1)[1])
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 2000
    assert p.tags.count("table") >= 10 and "h2" in p.tags

    def no_nan(x):
        raise AssertionError(f"non-JSON constant {x}")

    m = json.loads((out / "metrics.json").read_text(), parse_constant=no_nan)
    assert set(m["systems"]) == {"base_rag", "lora_rag"}
    base_cons = next(
        r for r in m["systems"]["base_rag"]["conflict"] if r["scenario"] == "consistent" and r["knowledge"] == "known"
    )
    assert base_cons["accuracy"] == 1.0
    # Base RAG is misled on every wrong context whose closed-book answer was right (known facts).
    known = next(r for r in m["systems"]["base_rag"]["conflict"] if r["scenario"] == "all" and r["knowledge"] == "known")
    assert known["context_bias"] == 1.0
    head = {(r["metric"], r["scenario"], r["knowledge"]): r for r in m["headline"]}
    assert head[("accuracy", "factual_error", "known")]["lora"] == 1.0
    assert head[("detector_auroc", "all", "all")]["lora"] == 1.0
    assert m["comparison"]["a"] == "base_rag" and len(m["comparison"]["fixed"]) > 0

    md = (out / "report.md").read_text()
    assert "## Headline: lora_rag vs base_rag" in md and "![Detector ROC" in md
    rag = [json.loads(x) for x in (out / "ragas-lora_rag.jsonl").read_text().splitlines()]
    # RAGAS's current SingleTurnSample names, not the 0.1 ones (question/answer/contexts/ground_truth)
    assert set(rag[0]) == {"user_input", "response", "retrieved_contexts", "reference", "references", "qid"}
    assert rag[-1]["reference"] == "北京" and rag[-1]["user_input"] == "首都是哪里？"
    assert rag[-1]["response"] == "答案是北京。" and rag[0]["retrieved_contexts"] == ["The limit is 50 km/h.", "x"]


def test_single_system_without_detector_has_no_roc(tmp_path):
    base, _ = _fixture()
    html_path = write_report({"base_rag": base}, tmp_path)
    p = _Collect()
    p.feed(html_path.read_text())
    assert len(p.imgs) == 2  # one system: no pair, so no forest plot (a note says why)
    md = (tmp_path / "report.md").read_text()
    assert "skipped: no (baseline, LoRA-RAG) pair of systems" in md
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


# A headline with its targets table (2 met, 1 missed: counted by hand) and other tables after it
# whose last cells also say yes / **MISSED**: those rows are no targets.
FIXED = """## Headline

- first note
- second note with **bold**

### Targets (retrieved context)

| target | measured | met |
|---|---|---|
| base RAG, consistent (known) >= 0.9 | 1.00 | yes |
| LoRA-RAG, factual error (known) >= 0.8 | 0.10 | **MISSED** |
| LoRA-RAG, consistent (known) >= 0.9 | 0.95 | yes |

### lora_rag against every baseline

| scenario | knowledge | captured |
|---|---|---|
| consistent | known | yes |
| outdated | known | **MISSED** |
| irrelevant | known | yes |
"""


def test_banner_counts_the_targets_table_only_and_markdown_renders_lists():
    from lorarag.eval.mdhtml import markdown_html, targets_counts, targets_verdict

    assert targets_counts(FIXED) == (2, 3, 1)
    assert targets_verdict(FIXED).startswith("2 of 3 targets met, 1 missed")
    h = markdown_html(FIXED)
    assert "<li>first note</li>" in h and "<strong>bold</strong>" in h and "- first" not in h
    assert h.count('<tr class="missed">') == 2 and h.count('<tr class="met">') == 4
    assert targets_counts("| a | b |\n|---|---|\n| x | yes |\n") is None  # no Targets heading


def test_twelve_and_twenty_systems_get_distinct_colours():
    from lorarag.eval.plots import OKABE_ITO, system_colours

    for n in (12, 20):
        assert len(set(system_colours([f"s{i}" for i in range(n)]).values())) == n
    assert list(system_colours(["a", "b"]).values()) == list(OKABE_ITO[:2])  # few systems: colour-blind safe


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny") / "runs" / "ci-tiny"
    table = report_run(root, with_one_cluster_cell(synthetic_run(48)))
    return root, table


def _targets_rows(md: str) -> list[str]:
    """The last cells of the rows of the `### Targets` table, read line by line (blank line ends it)."""
    block = md.split("### Targets", 1)[1].split("\n\n")[1]  # the heading's line, then the table
    return [ln.rstrip(" |").rsplit("|", 1)[1].strip() for ln in block.splitlines()[2:]]


def test_tiny_run_report_counts_right_and_shows_the_headline_first(tiny_run):
    from lorarag.eval.plots import PLOT_FILES

    root, table = tiny_run
    rep = root / "report"
    last = _targets_rows(table)
    assert len(last) >= 10 and set(last) <= {"yes", "**MISSED**"}
    banner = f"{last.count('yes')} of {len(last)} targets met, {last.count('**MISSED**')} missed"
    md, html = (rep / "report.md").read_text(), (rep / "report.html").read_text()
    assert banner in md and banner in html
    # the forest plot first: the first image of both pages, before the headline's table
    assert re.findall(r"!\[[^]]*\]\(([^)]+)\)", md)[0] == "headline-forest.png"
    assert md.index("headline-forest.png") < md.index("### retrieved context")
    p = _Collect()
    p.feed(html)
    assert p.alts[0] == "Headline: lora_rag − base_rag per cell (paired, 95% CI)"
    assert html.index("<img") < html.index("### retrieved context".replace("### ", "<h3>"))
    # plots named by what they show (no gate.json: no gate plot); none numbered
    pngs = {f.name for f in rep.glob("*.png")}
    assert pngs == {PLOT_FILES[k] for k in ("forest", "accuracy", "attribution", "roc", "reliability")}
    assert all((rep / f).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for f in pngs)
    # no nan in any table; the one-cluster cell says so; no raw dict; lists are lists
    for text in (md, table, (rep / "headline.md").read_text()):
        assert not re.search(r"\bnan\b", text, re.I)
        assert "{'" not in text
    assert "| update | known (trained wording) | accuracy | 1 (1) | 1.00 | 1.00 | +0.00 (one cluster: no CI) |" in table
    # data/summary.json's counts in words
    assert "by rule answer 40, title 8; facts split known 24, unknown 24." in table
    assert "Taught questions by number of wordings the set offers: 8 with 1, 16 with 3." in table
    assert "<li>" in html and "<p>- " not in html
