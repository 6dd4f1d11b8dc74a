"""Targets are met only past their 95 % CI bound (study/targets.py), checked on hand-computed cases."""

from __future__ import annotations

import math

import pytest

from lorarag.study.targets import judge, target_rows, targets
from tests.eval_fixtures import make_item


def _unknown_consistent(n: int, left: int) -> list:
    """n routed consistent items of never-learned facts, `left` of them answered from memory."""
    return [
        make_item(
            system="l",
            qid=f"u{i}",
            fact_id=f"u{i}",
            knowledge="unknown",
            route="fallback" if i < left else "context",
            verdict="supported",
            flag_score=0.1,
        )
        for i in range(n)
    ]


def test_over_fallback_two_of_25_is_missed_on_its_wilson_upper_bound():
    """2 of 25 is 0.08, under the 0.10 bar on the mean; its Wilson upper bound is 0.2497 (by hand:
    centre (0.08 + z²/50) / (1 + z²/25) = 0.1359, half-width 1.96 · sqrt(0.08 · 0.92 / 25 + z²/2500)
    / (1 + z²/25) = 0.1137), so the target is not met and the table says which bound it read."""
    rows = {t.name: t for t in target_rows([], _unknown_consistent(25, 2))}
    t = rows["LoRA-RAG, over-fallback on consistent unknown facts <= 0.10"]
    assert t.value == pytest.approx(0.08) and not t.met
    assert t.bound == "upper 0.25 (Wilson)"
    # 0 of 60: upper bound z²/60 / (1 + z²/60) = 0.0602 <= 0.10: met
    t = {t.name: t for t in target_rows([], _unknown_consistent(60, 0))}[t.name]
    assert t.value == 0.0 and t.met and t.bound == "upper 0.06 (Wilson)"


def test_judge_reads_the_lower_bound_for_at_least_the_upper_for_at_most_and_both_for_a_band():
    assert judge("x >= 0.9", 0.95, 0.91, 0.99, 0.9, "w").met
    assert not judge("x >= 0.9", 0.95, 0.89, 0.99, 0.9, "w").met  # the mean clears, the bound does not
    assert judge("x <= 0.2", 0.10, 0.02, 0.19, 0.2, "w").met
    assert not judge("x <= 0.2", 0.10, 0.02, 0.30, 0.2, "w").met
    band = judge("x ~ 0.5 (0.35-0.65)", 0.5, 0.40, 0.60, (0.35, 0.65), "b")
    assert band.met and band.bound == "0.40 to 0.60 (b)"
    assert not judge("x ~ 0.5 (0.35-0.65)", 0.5, 0.30, 0.60, (0.35, 0.65), "b").met
    assert not judge("x >= 0.9", math.nan, math.nan, math.nan, 0.9, "w").met
    assert not judge("x >= 0.9", 0.95, math.nan, math.nan, 0.9, "w").met  # no CI, no claim


def test_accuracy_targets_read_wilson_bounds_and_auroc_targets_a_cluster_bootstrap():
    # LoRA factual error (known) 24/25: Wilson lower bound 0.805 (by hand) >= 0.8: met;
    # base consistent (known) 19/20: lower bound 0.764 < 0.9: missed although 0.95 is above the bar
    fe = [
        make_item(
            system="l",
            qid=f"f{i}",
            fact_id=f"org{i % 5}",
            scenario="factual_error",
            context_answer="70 km/h",
            answer="50 km/h" if i < 24 else "70 km/h",
            verdict="conflicting",
            flag_score=0.9,
            route="fallback",
        )
        for i in range(25)
    ]
    cons = [
        make_item(system="l", qid=f"c{i}", fact_id=f"org{i % 5}", verdict="supported", flag_score=0.1, route="context")
        for i in range(25)
    ]
    base = [make_item(system="b", qid=f"c{i}", answer="50 km/h" if i < 19 else "no") for i in range(20)]
    rows = {t.name: t for t in target_rows(base, fe + cons)}
    t = rows["LoRA-RAG, factual error (known) >= 0.8"]
    assert (t.value, t.met, t.bound) == (pytest.approx(0.96), True, "lower 0.80 (Wilson)")
    t = rows["base RAG, consistent (known) >= 0.9"]
    assert (t.value, t.met, t.bound) == (pytest.approx(0.95), False, "lower 0.76 (Wilson)")
    # perfect separation over 5 organisations a class: every resample separates, AUROC 1 [1, 1]
    t = rows["detector AUROC, known, factual error >= 0.9"]
    assert t.value == 1.0 and t.met and t.bound == "lower 1.00 (cluster bootstrap)"
    # the triples agree with the rows
    assert [(n, ok) for n, _, ok in targets(base, fe + cons)] == [(r.name, r.met) for r in rows.values()]


def test_an_auroc_read_on_one_cluster_a_class_has_no_ci_and_is_not_met():
    fe = [
        make_item(system="l", qid=f"f{i}", fact_id="org", scenario="factual_error", verdict="conflicting", flag_score=0.9)
        for i in range(4)
    ]
    cons = [make_item(system="l", qid=f"c{i}", fact_id="org", verdict="supported", flag_score=0.1) for i in range(4)]
    t = {t.name: t for t in target_rows([], fe + cons)}["detector AUROC, known, factual error >= 0.9"]
    assert t.value == 1.0 and not t.met and t.bound == "lower – (cluster bootstrap)"
