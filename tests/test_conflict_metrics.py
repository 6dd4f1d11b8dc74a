"""Conflict metrics on hand-built items: ClashEval biases, fallback rates, detector scores."""

from __future__ import annotations

import math

import pytest

from lorarag.eval import conflict_metrics as cm
from tests.eval_fixtures import make_item

G, W, P = "50 km/h", "70 km/h", "30 km/h"  # gold, context's wrong value, model's wrong prior


def fe(qid, answer, cb, route="context", verdict="supported", flag=0.2, scenario="factual_error"):
    return make_item(
        qid=qid,
        scenario=scenario,
        context_answer=W,
        answer=answer,
        closed_book_answer=cb,
        route=route,
        verdict=verdict,
        flag_score=flag,
    )


def ok(qid, answer, cb, route="context", verdict="supported", flag=0.1, knowledge="known"):
    return make_item(
        qid=qid, answer=answer, closed_book_answer=cb, route=route, verdict=verdict, flag_score=flag, knowledge=knowledge
    )


ITEMS = [
    # factual errors; closed-book right for the first three
    fe("a", f"It is {W}", G),  # misled
    fe("b", G, G, route="fallback", verdict="conflicting", flag=0.9),  # fallback success
    fe("c", "no idea at all", G, verdict="conflicting", flag=0.7),  # neither
    fe("d", W, P),  # misled, but prior wrong: not in denominator
    fe("e", G, P, route="fallback", verdict="outdated", flag=0.8, scenario="outdated"),
    # consistent; closed-book wrong for the first two
    ok("f", P, P),  # keeps its prior
    ok("g", G, P),  # follows the context
    ok("h", G, G, route="fallback", verdict="conflicting", flag=0.6),  # over-fallback (still right)
    ok("i", G, G, flag=0.3),
]


def test_clasheval_biases():
    cb = cm.context_bias(ITEMS)
    assert (cb.k, cb.n) == (1, 3)  # a misled; b, c not; d excluded (prior wrong); e not misled
    pb = cm.prior_bias(ITEMS)
    assert (pb.k, pb.n) == (1, 2)  # f keeps, g follows context


def test_fallback_rates():
    fs = cm.fallback_success(ITEMS)
    assert (fs.k, fs.n) == (2, 5)  # b and e
    of = cm.over_fallback(ITEMS)
    assert (of.k, of.n) == (1, 4)
    assert math.isnan(cm.over_fallback([make_item(route=None)]).value)


def test_detector_scores_by_hand():
    d = cm.detector(ITEMS)
    # positives a-e (flags: 0.2 0.9 0.7 0.2 0.8, predicted: b c e); negatives f-i (0.1 0.1 0.6 0.3, predicted: h)
    assert d.precision == pytest.approx(3 / 4) and d.recall == pytest.approx(3 / 5)
    assert d.f1 == pytest.approx(2 * 3 / (2 * 3 + 1 + 2))
    # AUROC = P(score_pos > score_neg) + 0.5 P(tie) over 5 x 4 pairs, counted by hand:
    # 0.2 beats 0.1,0.1 (2) ; 0.9: 4 ; 0.7: 4 ; 0.2: 2 ; 0.8: 4  -> 16 / 20
    assert d.auroc == pytest.approx(16 / 20)
    only_fe = cm.detector(ITEMS, ["factual_error"])
    assert only_fe.n_pos == 4 and only_fe.auroc == pytest.approx(12 / 16)
    assert math.isnan(cm.detector([ok("x", G, G)]).auroc)


def test_accuracy_table_cells_and_wilson():
    rows = cm.conflict_table(ITEMS)
    cons = next(r for r in rows if r["scenario"] == "consistent")
    assert cons["n"] == 4 and cons["accuracy"] == pytest.approx(3 / 4)
    from scipy.stats import binomtest

    ci = binomtest(3, 4).proportion_ci(method="wilson")
    assert (cons["acc_lo"], cons["acc_hi"]) == pytest.approx((ci.low, ci.high))
    assert rows[-1]["scenario"] == "all" and rows[-1]["n"] == len(ITEMS)


def test_accuracy_by_language_splits_a_bilingual_cell():
    """4 en items (3 right) and 2 zh items (0 right) in one consistent/known cell: 0.5 together,
    0.75 and 0.0 apart, each with its own Wilson interval (scipy as the reference)."""
    from scipy.stats import binomtest

    en = [make_item(qid=f"e{i}", answer="50 km/h" if i < 3 else "no idea") for i in range(4)]
    zh = [
        make_item(qid=f"z{i}", language="zh", question="限速是多少？", gold_answers=("50公里",), answer="不知道")
        for i in range(2)
    ]
    rows = cm.language_table(en + zh)
    cell = {(r["language"], r["scenario"]): r for r in rows}
    assert [r["language"] for r in rows] == ["en", "en", "zh", "zh"]  # the cell, then each language's "all"
    assert cell[("en", "consistent")]["n"] == 4 and cell[("en", "consistent")]["accuracy"] == pytest.approx(0.75)
    assert cell[("zh", "consistent")]["n"] == 2 and cell[("zh", "consistent")]["accuracy"] == 0.0
    ci = binomtest(0, 2).proportion_ci(method="wilson")
    assert (cell[("zh", "all")]["acc_lo"], cell[("zh", "all")]["acc_hi"]) == pytest.approx((ci.low, ci.high))
    assert cm.conflict_table(en + zh)[0]["accuracy"] == pytest.approx(0.5)


def test_long_form_answers_token_f1_and_siding_with_the_source():
    """Sentence-long answers (ConflictNQ): contains-gold fails, token F1 reads them. By hand:
    gold "a visa is required" (4 tokens after dropping "a" -> visa, is, required: 3), fabricated
    "a curator pass is issued" (curator, pass, is, issued: 4)."""
    gold, fake = ("A visa is required.",), "A curator pass is issued."
    right = make_item(
        scenario="factual_error", gold_answers=gold, context_answer=fake, answer="Yes, a visa is required before travel."
    )
    misled = make_item(
        qid="q2",
        scenario="factual_error",
        gold_answers=gold,
        context_answer=fake,
        answer="No visa: a curator pass is issued at the border.",
    )
    cons = make_item(qid="q3", gold_answers=gold, context_answer=gold[0], answer="visa")
    # right: answer tokens yes, visa, is, required, before, travel (6) vs gold 3 -> P 3/6, R 1 -> F1 2/3
    # misled: no, visa, curator, pass, is, issued, at, border (8, "the" dropped); gold overlap visa, is
    #   -> P 2/8, R 2/3 -> F1 4/11; fake overlap curator, pass, is, issued -> P 4/8, R 1 -> F1 2/3
    # cons: "visa" vs 3 gold tokens -> P 1, R 1/3 -> F1 1/2
    assert cm.gold_f1([right, misled, cons]) == pytest.approx((2 / 3 + 4 / 11 + 1 / 2) / 3)
    sides = cm.sides_with_source([right, misled, cons])
    assert (sides.k, sides.n) == (1, 2)  # the consistent item has no wrong value to side with
    assert math.isnan(cm.gold_f1([]))


def test_clasheval_biases_by_hand_with_bootstrap_cis():
    """The same subsets as context_bias / prior_bias above: 1 of 3 misled, 1 of 2 keeping the prior."""
    s = cm.clasheval(ITEMS, resamples=2000, seed=3)
    assert (s.n_context, s.n_prior) == (3, 2)
    assert s.context_bias == pytest.approx(1 / 3) and s.prior_bias == pytest.approx(1 / 2)
    assert s.balanced == pytest.approx(1 - (1 / 3 + 1 / 2) / 2)
    assert 0.0 <= s.context_bias_lo <= s.context_bias <= s.context_bias_hi <= 1.0
    assert 0.0 <= s.prior_bias_lo <= s.prior_bias <= s.prior_bias_hi <= 1.0
    assert cm.clasheval(ITEMS, resamples=2000, seed=3) == s  # same seed, same CIs
    empty = cm.clasheval([make_item(closed_book_answer=None)])
    assert (empty.n_context, empty.n_prior) == (0, 0) and math.isnan(empty.context_bias)
