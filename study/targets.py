"""The product's absolute targets (accuracy per cell, over-fallback, detector AUROC) for KBs
scored by `contains` (the demo world's), the pair of systems they compare, and the table of a
real conflict set evaluated beside the run.

Pure functions over ItemResults (eval/), so the same numbers can be rebuilt from any run folder.
Every target line states the measured number and whether it is met; a missed target is never
hidden. study/headline.py writes them into the run's one headline.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

from lorarag.eval.conflict_metrics import (
    cell_rate,
    detector,
    gold_f1,
    over_fallback,
    sides_with_source,
)
from lorarag.eval.records import ItemResult
from lorarag.scenarios.records import SCENARIO_TYPES, SOUND_CONTEXTS
from lorarag.study.config import RunConfig


def _first(cfg: RunConfig, results: Mapping[str, Sequence[ItemResult]], kind: str) -> tuple[str, list[ItemResult]] | None:
    for s in cfg.systems:
        if s.kind == kind and s.name in results and not s.is_variant:  # a policy variant is an ablation
            return s.name, list(results[s.name])
    return None


def pair_names(cfg: RunConfig, results: Mapping[str, Sequence[ItemResult]]) -> tuple[str, str] | None:
    """(base RAG system, LoRA-RAG system) names of the run, when both were evaluated."""
    base, lora = _first(cfg, results, "base_rag"), _first(cfg, results, "lora_rag")
    return (base[0], lora[0]) if base and lora else None


def _cell(items: Sequence[ItemResult], scenario: str, knowledge: str) -> list[ItemResult]:
    return [r for r in items if r.scenario == scenario and r.knowledge == knowledge]


def _acc(items: Sequence[ItemResult]) -> str:
    if not items:
        return "–"
    a = cell_rate(items)
    return f"{a.value:.2f} [{a.lo:.2f}, {a.hi:.2f}] (n={a.n})"


def _num(x: float) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.2f}"


INVALID_LIMIT = 0.05  # a system with more invalid replies than this is flagged as broken, not scored
BASE_TARGET = "base RAG"  # prefix of the base-RAG targets; the others are LoRA-RAG's and its detector's


def targets(base: Sequence[ItemResult], lora: Sequence[ItemResult], *, updates: bool | None = None
            ) -> list[tuple[str, float, bool]]:
    """(target, measured, met) for every target of the CPU demo; the `update` targets where the run
    evaluates that cell (`updates`; None: where `lora` holds update items). Resampling callers pass
    it, so every resample reports the same targets."""
    def acc(items, s, k):
        sel = _cell(items, s, k)
        return cell_rate(sel).value if sel else math.nan

    def auroc(items, k, pos=None, neg=SOUND_CONTEXTS):
        sel = [r for r in items if r.knowledge == k]
        return detector(sel, pos, neg).auroc if sel else math.nan

    ofb = over_fallback([r for r in lora if r.knowledge == "unknown"]).value
    fe_unknown = auroc(lora, "unknown", ["factual_error"])
    rows = [
        (f"{BASE_TARGET}, consistent (known) >= 0.9", acc(base, "consistent", "known"), lambda v: v >= 0.9),
        (f"{BASE_TARGET}, factual error (known) ~ 0 (<= 0.2)", acc(base, "factual_error", "known"), lambda v: v <= 0.2),
        (f"{BASE_TARGET}, outdated (known) ~ 0 (<= 0.2)", acc(base, "outdated", "known"), lambda v: v <= 0.2),
        ("LoRA-RAG, consistent (known) >= 0.9", acc(lora, "consistent", "known"), lambda v: v >= 0.9),
        ("LoRA-RAG, factual error (known) >= 0.8", acc(lora, "factual_error", "known"), lambda v: v >= 0.8),
        ("LoRA-RAG, outdated (known) >= 0.9", acc(lora, "outdated", "known"), lambda v: v >= 0.9),
        ("LoRA-RAG, irrelevant (known) >= 0.9", acc(lora, "irrelevant", "known"), lambda v: v >= 0.9),
        ("LoRA-RAG, over-fallback on consistent unknown facts <= 0.10", ofb, lambda v: v <= 0.10),
        ("detector AUROC, known, all flawed >= 0.9", auroc(lora, "known"), lambda v: v >= 0.9),
        ("detector AUROC, known, factual error >= 0.9", auroc(lora, "known", ["factual_error"]),
         lambda v: v >= 0.9),
        ("detector AUROC, unknown, factual error ~ 0.5 (0.35-0.65)", fe_unknown,
         lambda v: 0.35 <= v <= 0.65),
    ]
    if updates if updates is not None else any(r.scenario == "update" for r in lora):
        # the context right, the memory stale: the cells that tell detection from memory
        # an update differs from the memory as a factual error does: only what the source says about
        # itself (its date) can tell a newer value from a wrong one, and outdated from newer
        rows += [("LoRA-RAG, update (known) >= 0.85", acc(lora, "update", "known"), lambda v: v >= 0.85),
                 ("detector AUROC, known, outdated vs update >= 0.9",
                  auroc(lora, "known", ["outdated"], ["update"]), lambda v: v >= 0.9),
                 ("detector AUROC, known, factual error vs update >= 0.9",
                  auroc(lora, "known", ["factual_error"], ["update"]), lambda v: v >= 0.9)]
    return [(name, v, (not math.isnan(v)) and bool(ok(v))) for name, v, ok in rows]


def set_table(title: str, results: Mapping[str, Sequence[ItemResult]]) -> str:
    """Markdown for a real conflict set, one row per system x cell: accuracy (95 % CI), mean token
    F1 to the true answer and how often the answer sides with a wrong source (both readable where
    answers are sentences), and for systems with a verdict, over-fallback and detector AUROC."""
    lines = [f"## {title}: by system and cell", "",
             "| system | cell | accuracy [95% CI] | token F1 to true answer | sides with wrong source "
             "| over-fallback | detector AUROC |", "|---|---|---|---|---|---|---|"]
    for name, items in results.items():
        judged = any(r.flag_score is not None for r in items)
        extra = [_num(over_fallback(items).value), _num(detector(items).auroc)] if judged else ["–", "–"]
        cells = [(s, k) for s in SCENARIO_TYPES for k in sorted({r.knowledge for r in items}) if _cell(items, s, k)]
        for i, (s, k) in enumerate(cells):
            sel = _cell(items, s, k)
            lines.append(f"| {name} | {s} ({k}) | {_acc(sel)} | {_num(gold_f1(sel))} | "
                         f"{_num(sides_with_source(sel).value)} | " + " | ".join(extra if i == 0 else ["", ""]) + " |")
    return "\n".join(lines) + "\n"
