"""A run's results as tables: one tidy row per (system, item), and the headline's paired differences.

- `item_rows` / `write_items`: `items.jsonl` in the report folder, one row per (system, item) with
  what the system answered and the verdict the report gives it: `correct` (the same rule the
  headline scores by, passed in by the caller) and `attribution` (eval/attribution.py's class under
  that rule). The runner's results.jsonl stay as written; this table is made where the report is.
- `load_results(run)`: that table as a pandas DataFrame (`lorarag.load_results`).
- `cell_differences`: the paired difference of two systems per (scenario, knowledge) cell with its
  cluster bootstrap CI, the numbers of the headline table and of its forest plot.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from lorarag.eval.answer_metrics import is_correct
from lorarag.eval.attribution import attribute
from lorarag.eval.compare import pair
from lorarag.eval.records import EvalError, ItemResult
from lorarag.eval.stats import paired_bootstrap
from lorarag.scenarios.records import SCENARIO_TYPES

if TYPE_CHECKING:
    import pandas as pd

ITEMS_FILE = "items.jsonl"
Correct = Callable[[ItemResult], bool]
Score = Callable[[ItemResult], float]
# The columns of items.jsonl, in order (docs/outputs.md describes each).
ITEM_COLUMNS = (
    "system",
    "qid",
    "scenario",
    "knowledge",
    "cluster",
    "fact_id",
    "language",
    "source_set",
    "question",
    "gold",
    "context_answer",
    "answer",
    "abstained",
    "route",
    "verdict",
    "flag_score",
    "correct",
    "attribution",
)


def item_row(r: ItemResult, correct: Correct = is_correct) -> dict:
    """One item of one system as a flat row (ITEM_COLUMNS); `gold` lists the gold answers (empty:
    unanswerable), `cluster` is the resampling unit (organisation or document)."""
    return {
        "system": r.system,
        "qid": r.qid,
        "scenario": r.scenario,
        "knowledge": r.knowledge,
        "cluster": r.unit,
        "fact_id": r.fact_id,
        "language": r.language,
        "source_set": r.source_set,
        "question": r.question,
        "gold": list(r.gold_answers),
        "context_answer": r.context_answer,
        "answer": r.answer,
        "abstained": r.abstained,
        "route": r.route,
        "verdict": r.verdict,
        "flag_score": r.flag_score,
        "correct": bool(correct(r)),
        "attribution": attribute(r, correct),
    }


def item_rows(systems: Mapping[str, Sequence[ItemResult]], correct: Correct = is_correct) -> list[dict]:
    """Every (system, item) row, systems in the given order, items in their results' order."""
    return [item_row(r, correct) for items in systems.values() for r in items]


def write_items(systems: Mapping[str, Sequence[ItemResult]], path: str | Path, correct: Correct = is_correct) -> int:
    """Write `item_rows` as JSON lines to `path`; returns the number of rows."""
    rows = item_rows(systems, correct)
    with Path(path).open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    return len(rows)


def items_path(run: str | Path) -> Path:
    """items.jsonl of a `lorarag run` folder (its report/), of a report folder, or the file itself."""
    p = Path(run)
    for cand in (p / "report" / ITEMS_FILE, p / ITEMS_FILE):
        if cand.is_file():
            return cand
    if p.is_file():
        return p
    raise EvalError(
        f"{p}: no {ITEMS_FILE} (expected in {p / 'report'} of a finished `lorarag run`, or in a "
        "report folder; the report step writes it)"
    )


def load_results(run: str | Path) -> pd.DataFrame:
    """One row per (system, item) of a run as a pandas DataFrame: the columns of ITEM_COLUMNS
    (system, qid, scenario, knowledge, cluster, ..., answer, gold, correct, attribution).

    `run` is a `lorarag run` folder (runs/NAME: its report/items.jsonl), a report folder, or an
    items.jsonl file. `correct` follows the rule the run's headline scores by (`data.answer_metric`).
    """
    import pandas as pd

    path = items_path(run)
    rows = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except ValueError as exc:
                raise EvalError(f"{path}:{i}: not a JSON line ({exc})") from exc
    df = pd.DataFrame(rows, columns=list(ITEM_COLUMNS) if not rows else None)
    missing = [c for c in ITEM_COLUMNS if c not in df.columns]
    if missing:
        raise EvalError(f"{path}: no column {', '.join(missing)} (written by another version? rerun the report)")
    return df


def _cells(base: Sequence[ItemResult]) -> list[tuple[str, str]]:
    order = {k: i for i, k in enumerate(("known", "unknown"))}
    cells = {(r.scenario, r.knowledge) for r in base}
    return sorted(
        cells,
        key=lambda c: (
            SCENARIO_TYPES.index(c[0]) if c[0] in SCENARIO_TYPES else len(SCENARIO_TYPES),
            order.get(c[1], len(order)),
            c,
        ),
    )


def cell_differences(
    base: Sequence[ItemResult], lora: Sequence[ItemResult], score: Score, *, resamples: int = 2000, seed: int = 0
) -> list[dict]:
    """Per (scenario, knowledge) cell of the paired items: n, clusters, both means, `lora` − `base`
    and its 95 % paired bootstrap CI resampling clusters (the headline's `cell_diff`: the same
    pairing, score, seed and resampling, so the forest plot shows the table's numbers). A cell of
    one cluster has no CI (lo, hi NaN)."""
    a_all, b_all = pair(base, lora, warn=False)
    out = []
    for s, k in _cells(a_all):
        idx = [i for i, r in enumerate(a_all) if r.scenario == s and r.knowledge == k]
        a, b = [a_all[i] for i in idx], [b_all[i] for i in idx]
        units = [r.unit for r in a]
        d = paired_bootstrap(
            np.array([score(r) for r in a]), np.array([score(r) for r in b]), resamples=resamples, seed=seed, clusters=units
        )
        out.append(
            {
                "scenario": s,
                "knowledge": k,
                "label": f"{s.replace('_', ' ')} ({k})",
                "n": len(a),
                "clusters": len(set(units)),
                "base": d.a,
                "lora": d.b,
                "diff": d.diff,
                "lo": d.lo,
                "hi": d.hi,
            }
        )
    return out
