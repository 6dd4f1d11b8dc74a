"""The headline table of a base-vs-LoRA pair, printed by `lorarag run` and written into the report.

One row per metric and cell: base and LoRA with 95 % CIs (accuracy: Wilson per system, bootstrap on
the difference), the paired test of `compare.compare_items` (by default over clusters).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from lorarag.eval import conflict_metrics as cm
from lorarag.eval.answer_metrics import is_correct
from lorarag.eval.attribution import attribution_counts
from lorarag.eval.compare import Comparison, compare_items, fmt_value, pair
from lorarag.eval.records import ItemResult
from lorarag.eval.stats import wilson_ci

# --------------------------------------------------------------------------------------
# The headline table of a base-vs-LoRA pair (printed by `lorarag run`).
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HeadlineRow:
    """One headline line: a metric for base and LoRA with 95 % CIs (accuracy: Wilson per system,
    bootstrap on the difference; other rates: the bootstrap of the difference only); `p_mcnemar` is
    the paired test of `compare_items` (by default over clusters)."""

    metric: str
    scenario: str
    knowledge: str
    n: int
    base: float
    base_lo: float
    base_hi: float
    lora: float
    lora_lo: float
    lora_hi: float
    diff: float
    diff_lo: float
    diff_hi: float
    p_mcnemar: float | None = None


def headline_rows(
    base: Sequence[ItemResult],
    lora: Sequence[ItemResult],
    *,
    resamples: int = 2000,
    seed: int = 0,
    comparison: Comparison | None = None,
) -> list[HeadlineRow]:
    """Accuracy by scenario/knowledge (with CIs), context bias, fallback success, over-fallback,
    detector AUROC and attribution counts for a base-vs-LoRA pair (`comparison`: reuse one
    already computed by `compare_items` on the same runs)."""
    c = comparison or compare_items(base, lora, resamples=resamples, seed=seed)
    pa, pb = pair(base, lora, warn=False)
    nan = math.nan
    rows: list[HeadlineRow] = []
    for r in c.rows:
        if r.metric == "accuracy":
            sel_a = [
                x
                for x in pa
                if (r.scenario == "all" or x.scenario == r.scenario) and (r.knowledge == "all" or x.knowledge == r.knowledge)
            ]
            sel_b = [
                x
                for x in pb
                if (r.scenario == "all" or x.scenario == r.scenario) and (r.knowledge == "all" or x.knowledge == r.knowledge)
            ]
            la, ha = wilson_ci(sum(map(is_correct, sel_a)), len(sel_a))
            lb, hb = wilson_ci(sum(map(is_correct, sel_b)), len(sel_b))
            rows.append(
                HeadlineRow(
                    "accuracy", r.scenario, r.knowledge, r.n, r.a, la, ha, r.b, lb, hb, r.diff, r.lo, r.hi, r.p_mcnemar
                )
            )
        elif (r.metric in ("context_bias", "fallback_success") and r.scenario == "all") or (
            r.metric == "over_fallback" and r.scenario == "consistent"
        ):
            rows.append(
                HeadlineRow(r.metric, r.scenario, r.knowledge, r.n, r.a, nan, nan, r.b, nan, nan, r.diff, r.lo, r.hi)
            )
    for k in sorted({x.knowledge for x in pa}) + ["all"]:
        da = cm.detector([x for x in pa if k == "all" or x.knowledge == k])
        db = cm.detector([x for x in pb if k == "all" or x.knowledge == k])
        rows.append(
            HeadlineRow(
                "detector_auroc", "all", k, db.n, da.auroc, nan, nan, db.auroc, nan, nan, db.auroc - da.auroc, nan, nan
            )
        )
    ca, cb = attribution_counts(pa), attribution_counts(pb)
    for cls in ca:
        rows.append(
            HeadlineRow(
                f"attribution:{cls}",
                "all",
                "all",
                len(pa),
                ca[cls],
                nan,
                nan,
                cb[cls],
                nan,
                nan,
                cb[cls] - ca[cls],
                nan,
                nan,
            )
        )
    return rows


def headline_rows_markdown(rows: Sequence[HeadlineRow], base_name: str = "base", lora_name: str = "lora") -> str:
    """`headline_rows` as a Markdown table (values with [95% CI] where known): the base-vs-LoRA
    table of the report (eval/report.py); a run's own headline is study/headline.py's."""

    def v(x: float, lo: float, hi: float) -> str:
        return fmt_value(x) + ("" if math.isnan(lo) else f" [{fmt_value(lo, 2)}, {fmt_value(hi, 2)}]")

    out = [
        f"| metric | scenario | knowledge | n | {base_name} | {lora_name} | diff [95% CI] | paired test p |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        fmt = (lambda x: str(int(x))) if r.metric.startswith("attribution:") else fmt_value
        base = v(r.base, r.base_lo, r.base_hi) if not r.metric.startswith("attribution:") else fmt(r.base)
        lora = v(r.lora, r.lora_lo, r.lora_hi) if not r.metric.startswith("attribution:") else fmt(r.lora)
        out.append(
            f"| {r.metric} | {r.scenario} | {r.knowledge} | {r.n} | {base} | {lora} | "
            f"{v(r.diff, r.diff_lo, r.diff_hi) if not r.metric.startswith('attribution:') else fmt(r.diff)}"
            f" | {fmt_value(r.p_mcnemar, 4)} |"
        )
    return "\n".join(out) + "\n"
