"""The pooled summary's held-out section (study/seeds_heldout.py): each run's ledger counts and probes, and
each cell's mean over runs, computed here by hand."""

import json
from pathlib import Path

from lorarag.study.seeds_heldout import heldout_markdown


def _run(root: Path, summary: dict) -> Path:
    (root / "data").mkdir(parents=True)
    (root / "data" / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    return root


def _probe(auroc, length):
    return {"n_pos": 10, "n_neg": 10, "auroc": auroc, "auroc_splits": [], "length_auroc": length}


def test_each_run_and_the_mean_over_runs(tmp_path):
    a = _run(
        tmp_path / "a",
        {
            "test_reads": [{"what": "the KB's test facts", "reads": 1, "recipes": 1}],
            "shortcuts": {"factual_error": _probe(0.40, 0.52), "fabricated": _probe(1.0, 0.60)},
        },
    )
    b = _run(
        tmp_path / "b",
        {
            "test_reads": [{"what": "the KB's test facts", "reads": 2, "recipes": 1}],
            "shortcuts": {"factual_error": _probe(0.50, 0.56), "fabricated": _probe(0.90, 0.64)},
        },
    )
    md = heldout_markdown(["42", "43"], [a, b]).splitlines()
    assert "| run | test split | factual error | fabricated |" in md
    reads = "the KB's test facts: test split read {} under 1 recipe"
    assert f"| 42 | {reads.format('1 time')} | 0.40 (length 0.52) | 1.00 (length 0.60) |" in md
    assert f"| 43 | {reads.format('2 times')} | 0.50 (length 0.56) | 0.90 (length 0.64) |" in md
    # factual error: (0.40 + 0.50) / 2 = 0.45, length 0.54; fabricated: 0.95, length 0.62
    assert "| mean | | 0.45 (length 0.54) | 0.95 (length 0.62) |" in md
    told = next(line for line in md if line.startswith("Above 0.6"))
    assert "fabricated" in told and "factual error" not in told


def test_a_run_without_a_summary_says_so(tmp_path):
    a = _run(tmp_path / "a", {"shortcuts": {"irrelevant": _probe(None, 0.50)}})
    md = heldout_markdown([42, 43], [a, tmp_path / "missing"]).splitlines()
    assert "| 42 | not recorded | – (length 0.50) |" in md
    assert "| 43 | not recorded | – |" in md
    assert "| mean | | – (length 0.50) |" in md
    assert any(line.startswith("No cell's probe is above 0.6") for line in md)
