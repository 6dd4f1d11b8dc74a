"""The run explorer and report in a real browser: headless Chromium opens them from disk.

1. A small real run (configs/run/ci-tiny.yaml via study.pipeline.run): filter, open an item, check
   the DOM against results.jsonl, take screenshots.
2. A synthetic 10k items x 6 systems page: page load and filter times, measured and printed (no
   timed assertion; the numbers are for the reader and the docs).

Skipped, naming what is missing, where Chromium, chromedriver or Selenium is absent (`make browser`
installs them). Set LORARAG_SCREENSHOTS=<folder> to keep the screenshots (docs/img/ holds copies).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.browser import chromium_driver, missing, select, wait_ready

pytestmark = pytest.mark.slow


def _shots(tmp_path: Path) -> Path:
    out = Path(os.environ.get("LORARAG_SCREENSHOTS") or tmp_path / "shots")
    out.mkdir(parents=True, exist_ok=True)
    return out


def _png_ok(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000, (path, len(data))


def _visible(driver, css: str):
    from selenium.webdriver.common.by import By

    els = driver.find_elements(By.CSS_SELECTOR, css)
    assert els and all(e.is_displayed() for e in els), css
    return els


@pytest.fixture(scope="module")
def real_run(tmp_path_factory) -> Path:
    """The reduced demo, run once for this module (~40 s); returns its run folder."""
    if missing():  # no 40-s run for a test that would skip anyway
        pytest.skip(f"browser test skipped: missing {', '.join(missing())}; run `make browser`")
    import torch

    torch.set_num_threads(1)
    from lorarag.study.pipeline import run
    from tests.test_run_e2e import _in_tmp

    tmp = tmp_path_factory.mktemp("run")
    cfg = _in_tmp(tmp)
    lines: list[str] = []
    run(cfg, echo=lines.append)
    root = tmp / "runs" / cfg.name
    assert any(ln.startswith("explorer") and ln.endswith(str(root / "report/explorer.html")) for ln in lines)
    return root


def test_explorer_of_a_real_run_filters_and_shows_an_item(real_run, tmp_path):
    from selenium.webdriver.common.by import By

    rows = {
        p.parent.name: [json.loads(x) for x in p.read_text().splitlines()]
        for p in sorted((real_run / "eval").glob("*/results.jsonl"))
    }
    total = sum(len(v) for v in rows.values())
    shots = _shots(tmp_path)
    d = chromium_driver(tmp_path / "profile")
    try:
        d.get((real_run / "report/explorer.html").as_uri())
        st = wait_ready(d)
        assert st["total"] == total and st["shown"] == total
        assert d.find_element(By.ID, "count").text == f"{total} of {total} items"
        rendered = d.find_elements(By.CSS_SELECTOR, "#spacer .row")
        assert 0 < len(rendered) <= total
        for el in ("f-system", "f-scenario", "f-knowledge", "f-class", "f-route", "f-language", "f-text", "hdr"):
            assert d.find_element(By.ID, el).is_displayed(), el

        # filter: the LoRA-RAG system's factual-error items
        select(d, "f-system", "lora_rag")
        mine = rows["lora_rag"]
        assert d.execute_script("return window.__explorer.shown") == len(mine)
        select(d, "f-scenario", "factual_error")
        want = [r for r in mine if r["scenario"] == "factual_error"]
        assert d.execute_script("return window.__explorer.shown") == len(want) > 0
        cells = [e.text for e in d.find_elements(By.CSS_SELECTOR, "#spacer .row > div:first-child")]
        assert cells == ["lora_rag"] * len(want)

        # open the first item: its detail matches its row in results.jsonl
        _visible(d, "#spacer .row")[0].click()
        qid = d.find_element(By.CSS_SELECTOR, "#spacer .row.sel > div:nth-child(2)").get_attribute("textContent")
        item = next(r for r in want if r["qid"] == qid)
        assert qid in d.find_element(By.ID, "d-title").text
        assert d.find_element(By.ID, "d-question").text == item["question"]
        assert item["gold_answers"][0] in d.find_element(By.ID, "d-gold").text
        srcs = _visible(d, "#d-sources .src")
        assert len(srcs) == len(item["final_ids"])
        pert = [c for c in item["final_ids"] if "~" in c or (c in item["target_ids"] and c not in item["relevant_ids"])]
        assert len(d.find_elements(By.CSS_SELECTOR, "#d-sources .src.perturbed")) == len(pert)
        assert len(d.find_elements(By.CSS_SELECTOR, "#d-sources .src.goldchunk")) == len(
            [c for c in item["final_ids"] if c in item["relevant_ids"]]
        )
        if pert and item["context_answer"] in " ".join(item["final_texts"]):
            assert _visible(d, "#d-sources mark.pert")[0].text.lower() == item["context_answer"].lower()
        assert d.find_element(By.ID, "d-route").text == item["route"]
        assert d.find_element(By.ID, "d-verdict").text.startswith(item["verdict"])
        gate = json.loads(
            (
                Path(json.loads((real_run.parent / "train/ci-tiny-qwen3/adapter.json").read_text())["adapter"]) / "gate.json"
            ).read_text()
        )
        body = d.find_element(By.ID, "detail").text
        assert f"threshold {gate['threshold']:.4f}" in body and "doubt" in body
        assert "raw reply" in body and "attribution class" in body
        _visible(d, "#pair-table")
        mark = d.find_element(By.ID, "pair-mark").text
        base = next(r for r in rows["base_rag"] if r["qid"] == qid)
        assert mark in ("fixed", "broken", "both right", "both wrong")
        assert len(d.find_elements(By.CSS_SELECTOR, "#detail table.cmp:not(#pair-table) tr[data-i]")) == sum(
            1 for v in rows.values() if any(r["qid"] == qid for r in v)
        )
        assert base["question"] == item["question"]
        d.save_screenshot(str(shots / "explorer.png"))
        _png_ok(shots / "explorer.png")

        # the plots panel: the report's plots, embedded once
        d.find_element(By.CSS_SELECTOR, "#plots summary").click()
        imgs = _visible(d, "#plots img")
        assert all(i.get_attribute("src").startswith("data:image/png;base64,") for i in imgs) and len(imgs) >= 3
        assert d.execute_script("return [...document.querySelectorAll('#plots img')].every(i => i.naturalWidth > 0)")

        # the report: headline (with the targets' verdict) first, then plots, then detail
        d.get((real_run / "report/report.html").as_uri())
        order = d.execute_script("return [...document.querySelectorAll('section')].map(s => s.id)")
        assert order == ["headline", "plots", "detail"]
        assert "targets met" in d.find_element(By.CSS_SELECTOR, "#headline .verdict").text
        assert d.execute_script("return [...document.querySelectorAll('#plots img')].every(i => i.naturalWidth > 0)")
        d.execute_script("document.getElementById('plots').scrollIntoView()")
        d.save_screenshot(str(shots / "report-plots.png"))
        _png_ok(shots / "report-plots.png")
    finally:
        d.quit()


def test_explorer_at_10k_items_x_6_systems_load_and_filter_times(tmp_path, capsys):
    if missing():  # before selenium's import: where `make browser` could not install it, this skips
        pytest.skip(f"browser test skipped: missing {', '.join(missing())}; run `make browser`")
    from selenium.webdriver.common.by import By

    from lorarag.eval.explorer import write_explorer
    from tests.eval_fixtures import synthetic_run

    run = synthetic_run(10_000)
    n = sum(len(v) for v in run.values())
    t = time.perf_counter()
    page = write_explorer(
        run,
        tmp_path / "explorer.html",
        pair=("base_rag", "lora_rag"),
        gate={"threshold": 1.6, "signal": "closed_book_nll", "rule": "logistic", "auroc": 0.9},
    )
    write_s = time.perf_counter() - t
    size = page.stat().st_size
    d = chromium_driver(tmp_path / "profile")
    try:
        t = time.perf_counter()
        d.get(page.as_uri())
        st = wait_ready(d)
        load_s = time.perf_counter() - t
        dom = d.execute_script("return performance.getEntriesByType('navigation')[0].domContentLoadedEventEnd")
        assert st["total"] == n == 60_000
        assert len(d.find_elements(By.CSS_SELECTOR, "#spacer .row")) < 200  # virtualised: visible rows only
        times = {}
        for label, el, value in (
            ("system=lora_rag", "f-system", "lora_rag"),
            ("+scenario=outdated", "f-scenario", "outdated"),
            ("+class=correct", "f-class", "correct"),
            ("+base→LoRA fixed", "f-change", "fixed"),
        ):
            t = time.perf_counter()
            select(d, el, value)
            times[label] = (d.execute_script("return window.__explorer.lastFilterMs"), 1000 * (time.perf_counter() - t))
        shown = d.execute_script("return window.__explorer.shown")
        assert 0 < shown < 10_000
        d.find_element(By.ID, "f-reset").click()
        for label, text in (("search (first: builds the index)", "tartu"), ("search again", "item 4242)")):
            box = d.find_element(By.ID, "f-text")
            box.clear()
            box.send_keys(text)
            time.sleep(0.5)  # the box waits 150 ms for typing to stop
            times[label] = (d.execute_script("return window.__explorer.lastFilterMs"), float("nan"))
        assert d.execute_script("return window.__explorer.shown") == 6  # one item, six systems
        _visible(d, "#spacer .row")[2].click()  # base_rag's: the closed-book systems have no sources
        _visible(d, "#d-sources .src")
        _visible(d, "#pair-table")
        d.save_screenshot(str(_shots(tmp_path) / "explorer-10k.png"))
        _png_ok(_shots(tmp_path) / "explorer-10k.png")
        t = time.perf_counter()
        d.execute_script("var s=document.getElementById('scroller'); s.scrollTop = s.scrollHeight / 2")
        d.find_element(By.ID, "f-reset").click()
        d.execute_script("var s=document.getElementById('scroller'); s.scrollTop = s.scrollHeight / 2")
        scroll_ms = 1000 * (time.perf_counter() - t)
        assert d.find_elements(By.CSS_SELECTOR, "#spacer .row")
    finally:
        d.quit()
    with capsys.disabled():
        print(
            f"\nexplorer at {n} items (10k x 6 systems): {size / 1e6:.1f} MB ({size / n:.0f} B/item), "
            f"written in {write_s:.1f} s"
        )
        print(
            f"  page load: {1000 * load_s:.0f} ms until ready (DOMContentLoaded {dom:.0f} ms, "
            f"in-page parse+first render {st['loadMs']:.0f} ms)"
        )
        for label, (inpage, wall) in times.items():
            print(f"  filter {label}: {inpage:.1f} ms in page" + (f" ({wall:.0f} ms round trip)" if wall == wall else ""))
        print(f"  reset + scroll to the middle: {scroll_ms:.0f} ms round trip")
    assert size / n < 400  # proportional to the items, no per-item images
