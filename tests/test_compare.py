"""Paired bootstrap against scipy.stats.bootstrap, McNemar against scipy.stats.binomtest, fixed/broken lists."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from lorarag.eval.compare import compare_items, write_comparison
from lorarag.eval.compare_headline import headline_rows, headline_rows_markdown
from lorarag.eval.stats import mcnemar_exact, paired_bootstrap
from tests.eval_fixtures import make_item


@pytest.mark.parametrize("only_a,only_b,both,neither", [(3, 12, 20, 5), (0, 0, 10, 10), (7, 7, 1, 1), (1, 30, 0, 0)])
def test_mcnemar_matches_binomtest(only_a, only_b, both, neither):
    a = np.array([1] * only_a + [0] * only_b + [1] * both + [0] * neither, dtype=bool)
    b = np.array([0] * only_a + [1] * only_b + [1] * both + [0] * neither, dtype=bool)
    x, y, p = mcnemar_exact(a, b)
    assert (x, y) == (only_a, only_b)
    want = stats.binomtest(only_b, only_a + only_b, 0.5).pvalue if only_a + only_b else 1.0
    assert p == pytest.approx(want, rel=1e-10)


def test_bootstrap_matches_scipy_percentile_ci():
    rng = np.random.default_rng(3)
    a = (rng.random(400) < 0.55).astype(float)
    b = (rng.random(400) < 0.70).astype(float)
    ours = paired_bootstrap(a, b, resamples=20000, seed=1)
    ref = stats.bootstrap(
        (a, b),
        lambda x, y, axis=-1: np.mean(y, axis=axis) - np.mean(x, axis=axis),
        paired=True,
        vectorized=True,
        n_resamples=20000,
        method="percentile",
        random_state=np.random.default_rng(7),
    ).confidence_interval
    assert ours.diff == pytest.approx(b.mean() - a.mean())
    # Independent Monte-Carlo runs of the same estimator: equal within Monte-Carlo error.
    assert ours.lo == pytest.approx(ref.low, abs=0.01) and ours.hi == pytest.approx(ref.high, abs=0.01)
    # Seeded: the same call gives the same interval.
    again = paired_bootstrap(a, b, resamples=20000, seed=1)
    assert (again.lo, again.hi) == (ours.lo, ours.hi)


def test_conditional_rate_uses_each_systems_denominator():
    num_a, den_a = np.array([1, 0, 0, 0]), np.array([1, 1, 0, 0])  # A: 1 of 2
    num_b, den_b = np.array([0, 0, 1, 1]), np.array([0, 1, 1, 1])  # B: 2 of 3
    d = paired_bootstrap(num_a, num_b, den_a=den_a, den_b=den_b, resamples=1000)
    assert (d.a, d.b) == (0.5, pytest.approx(2 / 3)) and d.diff == pytest.approx(2 / 3 - 0.5)


def _runs():
    gold = "50 km/h"
    a, b = [], []
    for i in range(40):
        right_a = i % 2 == 0  # A: 20/40
        right_b = i % 4 != 3  # B: 30/40
        sc = "consistent" if i < 20 else "factual_error"
        common = dict(
            qid=f"q{i}",
            fact_id=f"f{i}",
            scenario=sc,
            context_answer=gold if sc == "consistent" else "70 km/h",
            closed_book_answer=gold,
        )
        a.append(make_item(system="base", answer=gold if right_a else "70 km/h", **common))
        b.append(
            make_item(
                system="lora",
                answer=gold if right_b else "70 km/h",
                route="context",
                flag_score=0.2 if sc == "consistent" else 0.8,
                verdict="supported" if sc == "consistent" else "conflicting",
                **common,
            )
        )
    return a, b


def test_compare_runs_fixed_broken_and_files(tmp_path):
    a, b = _runs()
    c = compare_items(a, b, resamples=1000, seed=0, unit="item")
    acc = next(r for r in c.rows if r.metric == "accuracy" and r.scenario == "all" and r.knowledge == "all")
    assert (acc.a, acc.b, acc.n) == (0.5, 0.75, 40)
    ca = np.array([i % 2 == 0 for i in range(40)])
    cb = np.array([i % 4 != 3 for i in range(40)])
    only_a, only_b = int(np.sum(ca & ~cb)), int(np.sum(~ca & cb))
    assert acc.p_mcnemar == pytest.approx(stats.binomtest(only_b, only_a + only_b).pvalue)
    assert len(c.fixed) == only_b and len(c.broken) == only_a
    assert acc.lo < acc.diff < acc.hi
    assert {r.qid for r in a} >= {x["qid"] for x in c.fixed}
    md = write_comparison(c, tmp_path)
    text = md.read_text()
    assert "| accuracy | all | all | 40 (40) | 0.500 | 0.750 | 0.250 |" in text and "McNemar p (items)" in text
    assert f"## Fixed by lora ({only_b})" in text
    with pytest.raises(ValueError):
        compare_items(a, b, resamples=100)


def test_headline_rows_for_a_pair():
    a, b = _runs()
    rows = headline_rows(a, b, resamples=1000)
    metrics = {r.metric for r in rows}
    assert {"accuracy", "context_bias", "detector_auroc", "attribution:correct"} <= metrics
    cons = next(r for r in rows if r.metric == "accuracy" and r.scenario == "consistent")
    assert cons.base_lo < cons.base < cons.base_hi
    auroc = next(r for r in rows if r.metric == "detector_auroc" and r.knowledge == "all")
    assert auroc.lora == 1.0 and math.isnan(auroc.base)  # the base run has no detector
    assert "| accuracy | all | all | 40 |" in headline_rows_markdown(rows)


def test_pairing_refuses_different_items_under_one_qid():
    a, b = _runs()
    b = [make_item(system="lora", qid=r.qid, scenario="outdated") if r.qid == "q0" else r for r in b]
    with pytest.raises(ValueError, match="q0 is a different item"):
        compare_items(a, b, resamples=1000)
    with pytest.raises(ValueError, match="share no qid"):
        compare_items(a, [make_item(qid="zz")], resamples=1000)


def test_a_repeated_qid_is_an_error_on_either_side():
    """A duplicate would count twice for A and once for B (the map keeps one): refused."""
    from lorarag.core.errors import RecordError

    a, b = _runs()
    with pytest.raises(RecordError, match="run A: duplicate result for qid 'q0'"):
        compare_items(a + a[:1], b, resamples=1000)
    with pytest.raises(RecordError, match="run B: duplicate result for qid 'q0'"):
        compare_items(a, b + b[:1], resamples=1000)
    with pytest.raises(RecordError, match=r"run B: results of several systems in one list \(base, lora\)"):
        compare_items(a, b + [make_item(system="base", qid="zz")], resamples=1000)


def _clustered():
    """Four clusters (organisations) of 3, 2, 4 and 2 items. B − A per item, by hand:
    c1 (+1, +1, 0), c2 (+1, 0), c3 (+1, +1, +1, −1), c4 (−1, 0): cluster sums 2, 1, 2, −1, cluster-mean
    differences 2/3, 1/2, 1/2, −1/2; over all 11 items B − A = 4/11."""
    diffs = {"c1": (1, 1, 0), "c2": (1, 0), "c3": (1, 1, 1, -1), "c4": (-1, 0)}
    a, b, gold, wrong = [], [], "50 km/h", "70 km/h"
    for c, ds in diffs.items():
        for j, d in enumerate(ds):
            right_a, right_b = (d == -1) or (d == 0 and j % 2 == 0), d == 1 or (d == 0 and j % 2 == 0)
            common = dict(qid=f"{c}-{j}", fact_id=f"{c}-{j}", cluster=c, scenario="factual_error", context_answer=wrong)
            a.append(make_item(system="base", answer=gold if right_a else wrong, **common))
            b.append(make_item(system="lora", answer=gold if right_b else wrong, **common))
    return a, b


def test_compare_resamples_clusters_by_default_checked_by_hand():
    """The sign-flip test over the 4 cluster sums (2, 1, 2, −1; observed |sum| 4): of the 16 sign
    patterns, |±2 ±1 ±2 ±1| >= 4 holds for 6 (the two 2s alike, with the 1s alike or opposite:
    2 × (1 + 2)), so p = 6/16. Over items, McNemar sees 6 pairs B-only and 2 A-only:
    p = 2 · P(X <= 2), X ~ Bin(8, 1/2) = 2 · 37/256 = 74/256. The cluster bootstrap draws 4 clusters
    with replacement: its 256 equally likely draws, enumerated here, give the reference interval."""
    import itertools

    a, b = _clustered()
    c = compare_items(a, b, resamples=20000, seed=0)
    acc = next(r for r in c.rows if r.metric == "accuracy" and r.scenario == "all")
    assert (c.unit, acc.n, acc.clusters) == ("cluster", 11, 4)
    assert acc.diff == pytest.approx(4 / 11)
    assert acc.p_mcnemar == pytest.approx(6 / 16)
    sums, sizes = [2, 1, 2, -1], [3, 2, 4, 2]
    draws = [sum(sums[i] for i in d) / sum(sizes[i] for i in d) for d in itertools.product(range(4), repeat=4)]
    lo, hi = np.quantile(draws, [0.025, 0.975])  # the exact bootstrap distribution's percentiles
    assert acc.lo == pytest.approx(lo, abs=0.03) and acc.hi == pytest.approx(hi, abs=0.03)
    items = compare_items(a, b, resamples=20000, seed=0, unit="item")
    acc_i = next(r for r in items.rows if r.metric == "accuracy" and r.scenario == "all")
    assert acc_i.p_mcnemar == pytest.approx(74 / 256) and acc_i.clusters == 11
    with pytest.raises(ValueError, match="unit is one of cluster, item"):
        compare_items(a, b, unit="fact")


def test_several_seeds_make_each_seeds_cluster_its_own_unit():
    """Two seeds of the same runs: 8 (seed, cluster) units with sums 2, 1, 2, −1 at each seed, observed
    sum 8; p is the share of the 2^8 sign patterns reaching |sum| >= 8, enumerated here."""
    import itertools

    from lorarag.eval.compare import compare_seeds

    a, b = _clustered()
    c = compare_seeds([a, a], [b, b], resamples=1000)
    acc = next(r for r in c.rows if r.metric == "accuracy" and r.scenario == "all")
    d = [2, 1, 2, -1] * 2
    want = np.mean([abs(np.dot(s, d)) >= 8 - 1e-9 for s in itertools.product((1, -1), repeat=8)])
    assert (acc.n, acc.clusters, c.seeds) == (22, 8, 2) and acc.p_mcnemar == pytest.approx(want)
    assert acc.diff == pytest.approx(4 / 11)
    with pytest.raises(ValueError, match="one run of B per run of A"):
        compare_seeds([a, a], [b], resamples=1000)
