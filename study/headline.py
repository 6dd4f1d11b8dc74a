"""The headline table of a run: base RAG vs LoRA-RAG by scenario, and the issue's targets.

Pure functions over ItemResults (eval/), so the same table can be rebuilt from any run folder.
Every target line states the measured number and whether it is met; a missed target is never
hidden.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

from lorarag.eval.conflict_metrics import (
    cell_rate,
    consistent_abstention,
    context_bias,
    detector,
    fallback_success,
    gold_f1,
    over_fallback,
    sides_with_source,
)
from lorarag.eval.answer_metrics import is_correct
from lorarag.eval.records import ItemResult
from lorarag.scenarios.records import SCENARIO_TYPES, SOUND_CONTEXTS
from lorarag.study.baselines import baseline_table
from lorarag.study.config import RunConfig
from lorarag.study.headline_kb import system_pairs


def _first(cfg: RunConfig, results: Mapping[str, Sequence[ItemResult]], kind: str) -> tuple[str, list[ItemResult]] | None:
    for s in cfg.systems:
        if s.kind == kind and s.name in results:
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
        rows += [("LoRA-RAG, update (known) >= 0.85", acc(lora, "update", "known"), lambda v: v >= 0.85),
                 ("detector AUROC, known, outdated vs update >= 0.9",
                  auroc(lora, "known", ["outdated"], ["update"]), lambda v: v >= 0.9)]
    return [(name, v, (not math.isnan(v)) and bool(ok(v))) for name, v, ok in rows]


def headline_markdown(cfg: RunConfig, results: Mapping[str, Sequence[ItemResult]]) -> str:
    """Markdown: accuracy by scenario (95 % Wilson CIs), conflict metrics, detector, targets."""
    base = _first(cfg, results, "base_rag")
    lora = _first(cfg, results, "lora_rag")
    names = [n for n in (base, lora) if n is not None]
    lines = [f"## Headline: {' vs '.join(n for n, _ in names)}", "",
             "| scenario | knowledge | " + " | ".join(f"{n} accuracy [95% CI]" for n, _ in names) + " |",
             "|---|---|" + "---|" * len(names)]
    knows = sorted({r.knowledge for _, items in names for r in items})
    for s in SCENARIO_TYPES:
        for k in knows:
            cells = [_cell(items, s, k) for _, items in names]
            if any(cells):
                lines.append(f"| {s} | {k} | " + " | ".join(_acc(c) for c in cells) + " |")
    lines += ["", "| metric | " + " | ".join(n for n, _ in names) + " |", "|---|" + "---|" * len(names)]
    for label, fn, k in (("context bias (known)", context_bias, "known"),
                         ("fallback success (known)", fallback_success, "known"),
                         ("over-fallback, consistent (known)", over_fallback, "known"),
                         ("over-fallback, consistent (unknown)", over_fallback, "unknown"),
                         ("of which abstention, consistent (unknown)", consistent_abstention, "unknown")):
        vals = [fn([r for r in items if r.knowledge == k]).value for _, items in names]
        lines.append(f"| {label} | " + " | ".join(_num(v) for v in vals) + " |")
    for k in knows:
        for pos, neg in ((None, SOUND_CONTEXTS), ("factual_error", SOUND_CONTEXTS), ("outdated", SOUND_CONTEXTS),
                         ("irrelevant", SOUND_CONTEXTS), ("outdated", ("update",))):
            if neg == ("update",) and not any(r.scenario == "update" for _, items in names for r in items):
                continue
            vals = [detector([r for r in items if r.knowledge == k], [pos] if pos else None, neg).auroc
                    for _, items in names]
            vs = "" if neg == SOUND_CONTEXTS else f" vs {', '.join(neg)}"
            lines.append(f"| detector AUROC ({k}, {pos or 'all flawed'}{vs}) | " +
                         " | ".join(_num(v) for v in vals) + " |")
    if lora is not None:
        inv = sum(r.verdict == "invalid" for r in lora[1])
        lines.append(f"| invalid replies | – | {inv} of {len(lora[1])} |" if len(names) == 2 else
                     f"| invalid replies | {inv} of {len(lora[1])} |")
    others = [n for n in results if n not in {x for x, _ in names}]
    if others:
        lines += ["", "| other system | " + " | ".join(f"{s} ({k})" for s in SCENARIO_TYPES for k in knows
                                                        if any(_cell(results[o], s, k) for o in others)) + " |"]
        cols = [(s, k) for s in SCENARIO_TYPES for k in knows if any(_cell(results[o], s, k) for o in others)]
        lines.append("|---|" + "---|" * len(cols))
        for o in others:
            lines.append(f"| {o} | " + " | ".join(
                _num(cell_rate(_cell(results[o], s, k)).value) if _cell(results[o], s, k) else "–"
                for s, k in cols) + " |")
    broken = [(n, inv, len(items)) for n, items in results.items()
              if items and (inv := sum(r.verdict == "invalid" for r in items)) / len(items) > INVALID_LIMIT]
    if broken:
        lines += [""] + [f"**{n}: {inv} of {total} replies invalid ({inv / total:.0%} > {INVALID_LIMIT:.0%}): its "
                         "numbers measure the reply parser, not the system.**" for n, inv, total in broken]
    if base is not None and lora is not None:
        lines += ["", "### Targets", "", "| target | measured | met |", "|---|---|---|"]
        for name, v, ok in targets(base[1], lora[1]):
            lines.append(f"| {name} | {_num(v)} | {'yes' if ok else '**MISSED**'} |")
        if any(r.scenario == "update" for r in lora[1]):
            taught = cfg.train.sft is not None and cfg.train.sft.updates
            lines += ["", "The update cell: the context carries a value dated after the training snapshot, so the "
                      "context is right and the memory stale; " + (
                          "the SFT rows teach the judgement on other facts and dates (`train.sft.updates`)."
                          if taught else "**no SFT row teaches it** (`train.sft.updates` is off): the cell measures "
                          "how often the memory overrides a correct newer source.")]
    for ctx, b, lo in system_pairs(cfg, results):
        lines += [""] + baseline_table(cfg, results, ctx, b, lo, lambda r: float(is_correct(r)))
    return "\n".join(lines).rstrip() + "\n"


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
