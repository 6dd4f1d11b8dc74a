"""The headline of a run: base RAG vs LoRA-RAG with paired CIs, the targets, the detection, baseline
and abstention tables (eval/abstention.py: abstention recall and precision on unanswerable questions),
and the error attribution by labelled chunk id on retrieved + poisoned context.
The same table for every knowledge base, the demo world's included; a KB scored by `contains`
also gets the product's absolute targets per cell, and any KB with unanswerable questions the
target on abstaining on them (study/targets.py).

Answers are scored by `data.answer_metric` (eval/scoring.py):
- `contains`: a gold answer in the reply (eval.answer_metrics.is_correct);
- `token_f1` (sentence answers, ConflictNQ): on a source asserting a wrong value (factual error,
  outdated) the share of replies *siding with the truth*, closer in token F1 to the true answer
  than to the source's value (eval.conflict_metrics.sides_with_truth; a reply equally far from
  both, an abstention say, does not side with the truth); elsewhere the mean token F1 to the true
  answer (unanswerable: abstaining is right); on an update, the share of replies closer to the
  current answer than to the superseded one the LoRA learned.
Every difference is LoRA-RAG minus base RAG over the same items, with a seeded paired-bootstrap
95 % CI that resamples clusters (the document holding each fact), McNemar's p over items and a
cluster-level permutation p beside it. A missed target is printed as missed, never hidden.
A known-fact cell whose items are asked in a wording training used (a single-wording set without
`data.paraphrase`: scenarios/kb_wordings.py) says so in the table itself: `known (trained wording)`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import astuple, dataclass
from typing import Any

import numpy as np

from lorarag.eval.abstention import abstention_lines
from lorarag.eval.attribution import attribution_table, table_markdown
from lorarag.eval.compare import pair
from lorarag.eval.records import ItemResult
from lorarag.eval.scoring import Score, correct_fn, metric_name, right_text, score_fn
from lorarag.eval.shortcut import probe_lines
from lorarag.eval.stats import ci_text, cluster_permutation_test, counts_text, mcnemar_exact, noninferior, paired_bootstrap
from lorarag.scenarios.records import SCENARIO_TYPES
from lorarag.study.baseline_tables import Label, abstention_table, baseline_table, comparable, variant_table
from lorarag.study.ledger import reads_note
from lorarag.study.targets import Target, abstention_rows, judge, over_fallback_cell, target_rows
from lorarag.study.targets import target_values as absolute_values
from lorarag.study.verdict_tables import detection_table
from lorarag.trained.config import RunConfig

FE_GAIN = 0.40  # LoRA-RAG over base RAG, known facts with a wrong source
# Non-inferiority on consistent sources of never-learned facts, relative to base RAG's score: LoRA-RAG
# keeps at least 75 % of it, judged on the paired CI's lower bound (a fixed 0.10 on a base F1 of 0.17
# would allow losing more than half of it and still be called met).
UNSEEN_REL_MARGIN = 0.25


def system_pairs(cfg: RunConfig, results: Mapping[str, Sequence[ItemResult]]) -> list[tuple[str, str, str]]:
    """(context, base RAG system, LoRA-RAG system) for each context mode both kinds were run in."""

    def first(kind: str, ctx: str) -> str | None:
        return next(
            (s.name for s in cfg.systems if s.kind == kind and s.context == ctx and s.name in results and not s.is_variant),
            None,
        )

    out = []
    for ctx in ("presented", "retrieved"):
        base, lora = first("base_rag", ctx), first("lora_rag", ctx)
        if base and lora:
            out.append((ctx, base, lora))
    return out


@dataclass(frozen=True)
class CellDiff:
    """LoRA-RAG − base RAG on one cell's paired items: the CI resamples clusters (organisation or
    document), McNemar counts items, the permutation test counts clusters."""

    n: int
    base: float
    lora: float
    diff: float
    lo: float
    hi: float
    p_mcnemar: float  # NaN for a graded score (token F1)
    clusters: int
    p_cluster: float


def cell_diff(
    cfg: RunConfig, base: Sequence[ItemResult], lora: Sequence[ItemResult], scenario: str, knowledge: str, score: Score
) -> CellDiff | None:
    """The paired difference of one cell (None when either side has no item of it)."""
    a = [r for r in base if r.scenario == scenario and r.knowledge == knowledge]
    b = [r for r in lora if r.scenario == scenario and r.knowledge == knowledge]
    if not a or not b:
        return None
    a, b = pair(a, b, warn=False)
    sa, sb = np.array([score(r) for r in a]), np.array([score(r) for r in b])
    units = [r.unit for r in a]
    d = paired_bootstrap(sa, sb, resamples=cfg.eval.bootstrap, seed=cfg.eval.seed, clusters=units)
    binary = bool(np.isin(sa, (0.0, 1.0)).all() and np.isin(sb, (0.0, 1.0)).all())
    p = mcnemar_exact(sa == 1.0, sb == 1.0)[2] if binary else math.nan  # token F1 is not a yes/no score
    k, pc = cluster_permutation_test(sa, sb, units, seed=cfg.eval.seed)
    return CellDiff(len(a), d.a, d.b, d.diff, d.lo, d.hi, p, k, pc)


def _updates(cfg: RunConfig) -> bool:
    """Whether the run asks the `update` cell with facts taught their older value."""
    return "update" in cfg.eval.scenarios and cfg.data.update_fraction > 0


def diff_target_names(metric: str) -> tuple[str, str]:
    """The two paired-difference targets' names. They hold no measured number, so every seed of
    `lorarag seeds` reports the same targets (study/seeds.seed_rows compares their names)."""
    return (
        f"LoRA-RAG − base RAG, {metric_name(metric, 'factual_error')}, factual error (known) >= {FE_GAIN:.2f}, CI above 0",
        f"LoRA-RAG − base RAG, {metric_name(metric, 'consistent')}, consistent (never-learned): lower 95 % "
        f"CI bound > −{UNSEEN_REL_MARGIN:.2f} × base",
    )


def kb_target_rows(cfg: RunConfig, base: Sequence[ItemResult], lora: Sequence[ItemResult]) -> list[Target]:
    """The run's targets, each met only past its 95 % CI (study/targets.judge): LoRA-RAG − base RAG on
    factual errors of known facts (the paired CI's lower bound at the gain) and non-inferiority on
    consistent sources of never-learned ones; with `contains` scoring, also the product's absolute
    targets per cell, and with any scoring the abstention target on unanswerable questions (study/targets.py)."""
    metric = cfg.data.answer_metric
    absolute = target_rows(base, lora, updates=_updates(cfg)) if metric == "contains" else abstention_rows(lora)
    fe, cons = (
        cell_diff(cfg, base, lora, s, k, score_fn(metric))
        for s, k in (("factual_error", "known"), ("consistent", "unknown"))
    )
    (fe_name, cons_name), nan, how = diff_target_names(metric), math.nan, "paired cluster bootstrap"
    margin, ok = noninferior(cons.lo, cons.base, UNSEEN_REL_MARGIN) if cons else (nan, False)
    return [
        judge(fe_name, fe.diff if fe else nan, fe.lo if fe else nan, nan, FE_GAIN, how),
        Target(
            cons_name, cons.diff if cons else nan, ok, f"lower {_n(cons.lo if cons else nan)} against −{_n(margin)} ({how})"
        ),
        *absolute,
    ]


def kb_targets(cfg: RunConfig, base: Sequence[ItemResult], lora: Sequence[ItemResult]) -> list[tuple[str, float, bool]]:
    """(target, measured, met) of `kb_target_rows`."""
    return [(t.name, t.value, t.met) for t in kb_target_rows(cfg, base, lora)]


def target_values(cfg: RunConfig, base: Sequence[ItemResult], lora: Sequence[ItemResult]) -> list[tuple[str, float]]:
    """(target, measured) of `kb_targets` on items that may repeat, as a resample of clusters draws
    them (study/pooled_targets.py): a difference is the cell's mean score of LoRA-RAG minus base RAG's (the
    point estimate of `cell_diff`, without a CI of its own: the pooled CI is the resampling's)."""
    metric = cfg.data.answer_metric
    score = score_fn(metric)

    def diff(scenario: str, knowledge: str) -> float:
        a = [score(r) for r in base if r.scenario == scenario and r.knowledge == knowledge]
        b = [score(r) for r in lora if r.scenario == scenario and r.knowledge == knowledge]
        return float(np.mean(b) - np.mean(a)) if a and b else math.nan

    asked = "unanswerable" in cfg.eval.scenarios  # a resample without such an item reports it undefined
    absolute = (
        absolute_values(base, lora, updates=_updates(cfg), unanswerable=asked)
        if metric == "contains"
        else [(t.name, t.value) for t in abstention_rows(lora, asked)]
    )
    fe_name, cons_name = diff_target_names(metric)
    return [(fe_name, diff("factual_error", "known")), (cons_name, diff("consistent", "unknown")), *absolute]


def wording_label(summary: Mapping[str, Any]) -> Label:
    """`known (trained wording)` for a known cell whose items are all asked in a wording training
    used, `known (trained wording: k of n)` for some, else the knowledge as it is. The ids come from
    the run summary (`test_wordings.trained_wording`); a summary with SFT rows and without that record
    is of a run that trained every wording, so all its known cells are labelled; one with neither
    labels nothing."""
    record = summary.get("test_wordings")
    trained = None if record is None else {f"kb/{q}" for q in record["trained_wording"]}

    def label(knowledge: str, items: Sequence[ItemResult]) -> str:
        if knowledge != "known" or not items or (trained is None and "sft" not in summary):
            return knowledge
        k = len(items) if trained is None else sum(r.fact_id in trained for r in items)
        return (
            knowledge
            if not k
            else (
                f"{knowledge} (trained wording)"
                if k == len(items)
                else f"{knowledge} (trained wording: {k} of {len(items)})"
            )
        )

    return label


def _n(x: float) -> str:
    return "–" if x is None or math.isnan(x) else f"{x:.2f}"


def _p(x: float) -> str:
    return "–" if math.isnan(x) else (f"{x:.2g}" if x < 0.01 else f"{x:.2f}")


def update_note(summary: Mapping[str, Any]) -> str:
    """What the run's `update` cell holds, or why it does not apply (a set without older versions)."""
    upd = summary.get("updates") or {}
    if upd.get("taught_older"):
        return (
            f"Knowledge updates: {upd['taught_older']} taught fact(s) learned in their older version "
            f"(data.update_fraction {upd['fraction']}); {upd['tested']} asked on the `update` cell (the current "
            "chunk is right, the memory stale), the others train the judgement."
        )
    return "Knowledge updates: the `update` cell does not apply: " + (
        "the set supplies no older versions (`data.outdated`)."
        if not upd.get("older_versions")
        else "`data.update_fraction` is 0, so no fact is taught in its older version."
    )


def _notes(summary: Mapping[str, Any]) -> list[str]:
    out = []
    if summary:
        out.append(
            f"Knowledge base: {summary.get('documents')} documents, {summary.get('chunks')} chunks, "
            f"{summary.get('questions')} labelled questions; labels mapped to chunks (`data/labels.jsonl`) by rule "
            f"{counts_text(summary.get('label_rules'))}; facts split {counts_text(summary.get('splits'))}."
        )
    sft = summary.get("sft") or {}
    wordings = counts_text({int(k): v for k, v in (sft.get("wordings") or {}).items()}, "{v} with {k}")
    tw = summary.get("test_wordings")
    if tw:
        by = tw["by"]
        out.append(
            f"Known test items asked in a wording no SFT row uses: {tw['held_out']} of {tw['items']} (one of "
            f"the set's wordings held out of training: {by['set']}; trained in generated paraphrases, tested "
            f"in the set's own: {by['paraphrase']}); asked in a wording training used: {by['trained']}"
            + (" (their cells say `trained wording`)." if by["trained"] else ".")
            + (f" Taught questions by number of trained wordings: {wordings}." if wordings else "")
        )
    elif wordings:
        out.append(
            f"Taught questions by number of wordings the set offers: {wordings}. Known facts are tested "
            "in a wording they were trained in (every known cell says `trained wording`)."
        )
    # every flawed cell's probe; a run written before there was one a cell has the factual-error one alone
    out += probe_lines(
        summary.get("shortcuts") or ({"factual_error": summary["shortcut"]} if summary.get("shortcut") else {})
    )
    para = summary.get("paraphrase")
    if para:
        out.append(
            f"data.paraphrase: the generator reworded {para['questions']} single-wording taught question(s); "
            f"{para['kept']} of {para['replies']} replies kept as training wordings for "
            f"{para['questions_with_one']} of them (rejected: {counts_text(para['rejected']) or 'none'}); a "
            "known one with a kept paraphrase is tested in the set's own wording, which no SFT row asks."
        )
    if sft.get("no_factual_error"):
        out.append(
            f"{sft['no_factual_error']} taught question(s) got no factual-error training row (no conflict "
            "passage left and the answer is not a span of its chunk)."
        )
    return out


def kb_name(cfg: RunConfig) -> str:
    """The knowledge base as the headline names it: the questions file, or the demo world's seed and size."""
    w = cfg.data.world
    return f"the demo world (seed {w.seed}, {w.n_orgs} organisations)" if w is not None else str(cfg.data.questions.path)


def headline_markdown(cfg: RunConfig, results: Mapping[str, Sequence[ItemResult]], summary: Mapping[str, Any]) -> str:
    """Markdown: notes on the data, base vs LoRA per cell with paired CIs, targets, attribution."""
    metric = cfg.data.answer_metric
    score = score_fn(metric)
    label = wording_label(summary)
    lines = [f"## Headline: base RAG vs LoRA-RAG on {kb_name(cfg)}", ""]
    notes = reads_note(summary) + _notes(summary) + ([update_note(summary)] if "update" in cfg.eval.scenarios else [])
    lines += [f"- {n}" for n in notes] + [""]
    pairs = system_pairs(cfg, results)
    for ctx, b, lo in pairs:
        base, lora = results[b], results[lo]
        lines += [
            f"### {ctx} context: {b} vs {lo}",
            "",
            f"| scenario | knowledge | metric | n (clusters) | {b} | {lo} | {lo} − {b} [95% paired CI] | "
            f"McNemar p (items) | permutation p (clusters) | {lo} over-fallback [95% CI] (of which abstained) |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for s in SCENARIO_TYPES:
            for k in ("known", "unknown"):
                c = cell_diff(cfg, base, lora, s, k, score)
                if c is None:
                    continue
                mine = [r for r in lora if r.knowledge == k]
                ofb = over_fallback_cell(cfg, mine) if s == "consistent" else "–"
                cell = label(k, [r for r in mine if r.scenario == s])
                lines.append(
                    f"| {s} | {cell} | {metric_name(metric, s)} | {c.n} ({c.clusters}) | {_n(c.base)} | "
                    f"{_n(c.lora)} | {ci_text(c.diff, c.lo, c.hi)} | {_p(c.p_mcnemar)} | "
                    f"{_p(c.p_cluster)} | {ofb} |"
                )
        lines.append("")
    if pairs:
        ctx, b, lo = pairs[0]
        lines += [
            f"### Targets ({ctx} context)",
            "",
            "| target | measured | bound used (95 % CI) | met |",
            "|---|---|---|---|",
        ]
        fe_mark = label("known", [r for r in results[lo] if r.scenario == "factual_error" and r.knowledge == "known"])
        for name, v, ok, bound in (astuple(t) for t in kb_target_rows(cfg, results[b], results[lo])):
            if "(known)" in name and fe_mark != "known":
                name += " — " + fe_mark.removeprefix("known ")
            lines.append(f"| {name} | {_n(v)} | {bound} | {'yes' if ok else '**MISSED**'} |")
        lines.append("")
    if pairs:
        lines += detection_table(results[pairs[0][2]], label)
    for ctx, b, lo in pairs:
        lines += baseline_table(cfg, results, ctx, b, lo, score, label)
        names = [lo, *(s.name for s in comparable(cfg, results, ctx, lo) if s.kind != "oracle")]
        lines += abstention_lines(results, names, ctx, asked="unanswerable" in cfg.eval.scenarios)
        lines += abstention_table(cfg, [results], ctx, lo, label)
        lines += variant_table(cfg, results, ctx, lo, score, label)
    for sc in cfg.systems:
        if sc.context == "retrieved" and sc.kind in ("base_rag", "lora_rag") and sc.name in results:
            lines += [
                f"### Error attribution by labelled chunk id: {sc.name} (retrieved + poisoned context)",
                "",
                f"`correct`: {right_text(metric)}.",
                "",
                table_markdown(attribution_table(results[sc.name], correct_fn(metric))),
            ]
    return "\n".join(lines).rstrip() + "\n"
