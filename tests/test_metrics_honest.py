"""Metrics and statistics that cannot be gamed, each on hand-computed cases: a reply naming both
values, abstentions on correct sources, invalid detector replies, correct abstention as its own
rate, clustered items, and non-inferiority judged on the CI bound."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lorarag.eval.answer_metrics import is_correct, names_wrong_value
from lorarag.eval.conflict_metrics import (
    accuracy,
    cell_rate,
    conflict_table,
    consistent_abstention,
    correct_abstention,
    detector,
    over_fallback,
)
from lorarag.eval.stats import cluster_permutation_test, noninferior, one_per_cluster, paired_bootstrap
from tests.eval_fixtures import make_item


def test_a_reply_naming_both_values_is_not_an_answer():
    fe = dict(scenario="outdated", gold_answers=("50 km/h",), context_answer="80 km/h")
    assert not is_correct(make_item(**fe, answer="It was 80 km/h, now 50 km/h."))
    assert names_wrong_value(make_item(**fe, answer="It was 80 km/h, now 50 km/h."))
    assert is_correct(make_item(**fe, answer="The limit is 50 km/h."))
    # a consistent source asserts the gold itself: naming it is the answer
    assert is_correct(make_item(answer="50 km/h, as the source says"))
    # a wrong value inside a gold answer cannot be told apart, so it does not count against the reply
    assert is_correct(make_item(scenario="factual_error", gold_answers=("50 km/h",), context_answer="50", answer="50 km/h"))


def test_abstaining_on_a_correct_source_is_over_fallback():
    """10 consistent items: 6 answered from the context, 2 fallbacks, 2 abstentions. Over-fallback
    counts both detours, 4/10; abstention alone is 2/10. Counting fallbacks only would say 0.2,
    and a system abstaining on all ten would score 0.0."""
    items = (
        [make_item(qid=f"c{i}", route="context") for i in range(6)]
        + [make_item(qid=f"f{i}", route="fallback") for i in range(2)]
        + [make_item(qid=f"a{i}", route="abstain", abstained=True, answer="") for i in range(2)]
    )
    assert (over_fallback(items).k, over_fallback(items).n) == (4, 10)
    assert consistent_abstention(items).value == pytest.approx(0.2)
    shy = [make_item(qid=f"a{i}", route="abstain", abstained=True, answer="") for i in range(10)]
    assert over_fallback(shy).value == 1.0
    assert over_fallback([make_item()]).n == 0 and math.isnan(over_fallback([make_item()]).value)  # no routing


def test_invalid_detector_replies_count_as_misses():
    """2 factual-error items with an invalid reply, 2 flagged (flag 0.9), 2 consistent supported (0.1).
    Invalid = not flagged on a flawed context: TP 2, FN 2, FP 0 -> recall 0.5, precision 1.0.
    AUROC: the invalid positives score 0.0, below both negatives: 4 of 8 pairs ordered = 0.5."""
    fe = dict(scenario="factual_error", context_answer="80 km/h")
    items = (
        [make_item(qid=f"i{i}", verdict="invalid", flag_score=None, **fe) for i in range(2)]
        + [make_item(qid=f"c{i}", verdict="conflicting", flag_score=0.9, **fe) for i in range(2)]
        + [make_item(qid=f"s{i}", verdict="supported", flag_score=0.1) for i in range(2)]
    )
    d = detector(items)
    assert (d.n, d.n_pos, d.n_invalid) == (6, 4, 2)
    assert d.recall == pytest.approx(0.5) and d.precision == pytest.approx(1.0)
    assert d.f1 == pytest.approx(2 * 2 / (2 * 2 + 0 + 2))
    assert d.auroc == pytest.approx(0.5)
    # an invalid reply on a consistent context is a false positive with the worst score
    cons_bad = items[2:] + [make_item(qid="x", verdict="invalid", flag_score=None)]
    d2 = detector(cons_bad)
    assert d2.precision == pytest.approx(2 / 3) and d2.recall == 1.0 and d2.n_invalid == 1
    assert d2.auroc == pytest.approx((2 * 2 + 0) / (2 * 3))  # 0.9 beats 0.1 twice, never beats 1.0


def test_correct_abstention_is_its_own_rate_not_accuracy():
    """3 answerable items (2 right) and 2 unanswerable (1 abstained): accuracy 2/3 over the
    answerable, correct abstention 1/2; folded together it would have been 3/5."""
    items = [
        make_item(qid="a1"),
        make_item(qid="a2"),
        make_item(qid="a3", answer="90 km/h"),
        make_item(qid="u1", scenario="unanswerable", gold_answers=(), context_answer=None, abstained=True),
        make_item(qid="u2", scenario="unanswerable", gold_answers=(), context_answer=None, answer="70"),
    ]
    assert (accuracy(items).k, accuracy(items).n) == (2, 3)
    assert (correct_abstention(items).k, correct_abstention(items).n) == (1, 2)
    row = next(r for r in conflict_table(items) if r["scenario"] == "all" and r["knowledge"] == "all")
    assert row["accuracy"] == pytest.approx(2 / 3) and row["correct_abstention"] == pytest.approx(0.5)
    assert cell_rate(items[3:]).value == pytest.approx(0.5)  # the unanswerable cell: its abstention rate


def test_cluster_bootstrap_resamples_whole_clusters():
    """Two clusters of three items. A is wrong everywhere; B is right on every item of cluster x and
    wrong on cluster y: B − A = 0.5. Drawing clusters, a resample is (x, x) = 1, (x, y) = 0.5 or
    (y, y) = 0 with probabilities 1/4, 1/2, 1/4, so the 95 % CI is [0, 1]. Drawing items as if
    independent gives a much narrower one."""
    a = np.zeros(6)
    b = np.array([1, 1, 1, 0, 0, 0], dtype=float)
    clusters = ["x", "x", "x", "y", "y", "y"]
    d = paired_bootstrap(a, b, clusters=clusters, resamples=2000)
    assert d.diff == pytest.approx(0.5) and (d.lo, d.hi) == (0.0, 1.0) and d.n == 6
    items = paired_bootstrap(a, b, resamples=2000)
    assert items.lo > 0.0 and items.hi < 1.0
    # one cluster: no CI at all, rather than a zero-width one
    one = paired_bootstrap(a, b, clusters=["x"] * 6)
    assert one.diff == pytest.approx(0.5) and math.isnan(one.lo) and math.isnan(one.hi)
    # without clusters the item bootstrap is unchanged: each item is its own cluster
    same = paired_bootstrap(a, b, clusters=[str(i) for i in range(6)], resamples=2000)
    assert (same.lo, same.hi) == (items.lo, items.hi)


def test_over_fallback_carries_a_cluster_ci_in_the_headline():
    """Two organisations of 3 consistent never-learned items: x abstains on all 3, y answers all 3
    from the context. Over-fallback 3/6 = 0.50; drawing organisations, a resample is (x, x) = 1,
    (x, y) = 0.5 or (y, y) = 0 with probabilities 1/4, 1/2, 1/4, so the 95 % CI is [0, 1] (items drawn
    as if independent would give a narrower one); abstentions 0.50 of the items."""
    from types import SimpleNamespace

    from lorarag.eval.stats import cluster_rate
    from lorarag.study.headline import over_fallback_cell

    items = [
        make_item(qid=f"x{i}", cluster="x", knowledge="unknown", route="abstain", abstained=True, answer="")
        for i in range(3)
    ] + [make_item(qid=f"y{i}", cluster="y", knowledge="unknown", route="context") for i in range(3)]
    assert cluster_rate(np.array([1, 1, 1, 0, 0, 0.0]), ["x"] * 3 + ["y"] * 3) == (0.5, 0.0, 1.0)
    cfg = SimpleNamespace(eval=SimpleNamespace(bootstrap=2000, seed=0))
    assert over_fallback_cell(cfg, items) == "0.50 [0.00, 1.00] (0.50)"
    assert over_fallback_cell(cfg, [make_item(route=None)]) == "–"  # no routing, no over-fallback


def test_cluster_permutation_test_matches_scipy_and_counts_clusters():
    from scipy.stats import permutation_test

    rng = np.random.default_rng(3)
    a = rng.integers(0, 2, 40).astype(float)
    b = rng.integers(0, 2, 40).astype(float)
    clusters = [f"org{i % 12}" for i in range(40)]
    k, p = cluster_permutation_test(a, b, clusters)
    d = np.array([sum(b[i] - a[i] for i in range(40) if clusters[i] == f"org{c}") for c in range(12)])
    ref = permutation_test(
        (d,),
        lambda x, axis: np.sum(x, axis=axis),
        permutation_type="samples",
        n_resamples=np.inf,
        vectorized=True,
        alternative="two-sided",
    ).pvalue
    assert k == 12 and p == pytest.approx(ref)
    # 3 clusters, each with B one item better: 2 of the 8 sign patterns reach |sum| = 3
    assert cluster_permutation_test(np.zeros(6), np.array([1, 0, 1, 0, 1, 0.0]), list("xxyyzz")) == (3, 0.25)
    # the same 3 differences as 3 items in one cluster: a single cluster, p = 1
    assert cluster_permutation_test(np.zeros(3), np.ones(3), ["x"] * 3) == (1, 1.0)


def test_one_item_per_cluster_takes_the_smallest_key():
    idx = one_per_cluster(["f1", "f2", "f1", "f2", "f3"], ["q4", "q2", "q1", "q3", "q9"])
    assert idx.tolist() == [1, 2, 4]


def test_non_inferiority_needs_the_bound_past_a_margin_relative_to_the_base_rate():
    """Base F1 0.17, margin 0.25 x 0.17 = 0.0425: a CI of [−0.11, −0.00] is not met even though its
    mean (−0.06) is within a fixed 0.10; a bound of −0.03 is."""
    margin, ok = noninferior(-0.11, 0.17, 0.25)
    assert margin == pytest.approx(0.0425) and not ok
    assert noninferior(-0.03, 0.17, 0.25)[1]
    assert not noninferior(math.nan, 0.17, 0.25)[1]
