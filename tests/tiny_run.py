"""A tiny `lorarag run` folder whose report stage is the real one (study/evaluate.report on the CI
config), on results written by hand or by `synthetic_run` instead of by a model: the headline, the
targets, report.md/html, the plots and items.jsonl as a run writes them, in seconds."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from lorarag.core.config import load_config
from lorarag.eval.records import ItemResult, save_results
from lorarag.trained.config import RunConfig

REPO = Path(__file__).resolve().parent.parent


def ci_config(**data) -> RunConfig:
    """configs/run/ci-tiny.yaml, with `data` fields replaced (e.g. answer_metric)."""
    cfg = load_config(REPO / "configs/run/ci-tiny.yaml", RunConfig)
    return cfg.model_copy(update={"data": cfg.data.model_copy(update=data)}) if data else cfg


def with_one_cluster_cell(results: Mapping[str, Sequence[ItemResult]]) -> dict[str, list[ItemResult]]:
    """The results plus an `update` cell of one cluster (the first fact's consistent known items
    asked again as updates): a cell whose paired difference has no CI."""
    out = {}
    for name, items in results.items():
        first = items[0].unit
        extra = [
            dataclasses.replace(r, qid=f"{r.qid}/update", scenario="update")
            for r in items
            if r.unit == first and r.scenario == "consistent" and r.knowledge == "known"
        ]
        out[name] = [*items, *extra]
    return out


# data/summary.json as the data step writes it: counts by label rule, split and number of wordings
SUMMARY = {
    "documents": 40,
    "chunks": 40,
    "questions": 48,
    "label_rules": {"answer": 40, "title": 8},
    "splits": {"known": 24, "unknown": 24},
    "sft": {"wordings": {"1": 8, "3": 16}},
}


def report_run(
    root: Path, results: Mapping[str, Sequence[ItemResult]], cfg: RunConfig | None = None, summary: Mapping | None = SUMMARY
) -> str:
    """Write `results` as the run's eval/<system>/results.jsonl (and `summary` as data/summary.json)
    under `root` and run the report step; returns the headline Markdown."""
    from lorarag.study.evaluate import report
    from lorarag.study.run_folder import Paths

    if summary is not None:
        (root / "data").mkdir(parents=True, exist_ok=True)
        (root / "data/summary.json").write_text(json.dumps(summary))
    for name, items in results.items():
        save_results(root / "eval" / name / "results.jsonl", items)
    return report(cfg or ci_config(), Paths(root), {n: root / "eval" / n for n in results}, lambda _: None)
