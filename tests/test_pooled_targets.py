"""The seeds x facts pooled table (study/pooled_targets.py, eval.stats.crossed_bootstrap), hand-computed."""

from __future__ import annotations

import numpy as np
import pytest

from lorarag.eval.stats import crossed_bootstrap
from lorarag.study.pooled_targets import pooled_differences, pooled_markdown, pooled_rows
from tests.eval_fixtures import make_item


def _items(system: str, right: dict[str, bool], wordings: int = 2, scenario: str = "factual_error"):
    """One item per (fact, wording) of a known cell; `right[fact]`: answered with the gold value."""
    return [
        make_item(
            system=system, qid=f"{f}/p{w}/{scenario}", fact_id=f, scenario=scenario, answer="50 km/h" if ok else "80 km/h"
        )
        for f, ok in sorted(right.items())
        for w in range(wordings)
    ]


def test_a_statistic_that_does_not_move_has_a_point_ci():
    assert crossed_bootstrap(lambda s, u: [0.7, 1.0], 3, 10, resamples=200) == [(0.7, 0.7), (1.0, 1.0)]


def test_a_fact_asked_twice_is_one_unit_not_two_items():
    """Two identical wordings per fact: grouped by fact, the CI equals the CI of one wording per
    fact (same draws); counted as independent items, it would be narrower."""
    right = {f"f{i}": i % 2 == 0 for i in range(20)}  # half right
    once = [(_items("base", right, 1), _items("lora", right, 1))]
    twice = [(_items("base", right, 2), _items("lora", right, 2))]
    acc = lambda b, lo: [("lora acc", float(np.mean([r.answer == "50 km/h" for r in lo])))]  # noqa: E731
    (r1,), (r2,) = pooled_rows(once, acc, resamples=400), pooled_rows(twice, acc, resamples=400)
    assert r1.value == r2.value == 0.5
    assert (r1.lo, r1.hi) == (r2.lo, r2.hi)
    assert r1.hi - r1.lo > 0.3  # 20 facts: about +-0.22


def test_seeds_that_disagree_widen_the_interval():
    right_a = {f"f{i}": True for i in range(30)}
    right_b = {f"f{i}": i < 15 for i in range(30)}
    acc = lambda b, lo: [("lora acc", float(np.mean([r.answer == "50 km/h" for r in lo])))]  # noqa: E731
    base = _items("base", right_a)
    same = pooled_rows([(base, _items("lora", right_a))] * 2, acc, resamples=300)[0]
    apart = pooled_rows([(base, _items("lora", right_a)), (base, _items("lora", right_b))], acc, resamples=300)[0]
    assert (same.value, same.lo, same.hi) == (1.0, 1.0, 1.0)
    assert apart.value == 0.75  # (1.0 + 0.5) / 2
    # a resample drawing seed b twice reads about 0.5, one drawing seed a twice reads 1.0
    assert apart.hi == 1.0 and apart.lo < 0.6


def test_differences_hand_computed_with_mcnemar_per_seed():
    """8 facts x 2 wordings of factual error (known). Base RAG is misled everywhere; LoRA-RAG is
    right on all 16 items at seed 1 and on 12 (6 facts) at seed 2. McNemar: 16 and 12 discordant
    pairs, all one way: p = 2 * 0.5^16 and 2 * 0.5^12; with one item a fact (its cluster here), 8
    and 6 pairs: p = 2 * 0.5^8 and 2 * 0.5^6."""
    facts = [f"f{i}" for i in range(8)]
    base = _items("base", {f: False for f in facts})
    s1 = _items("lora", {f: True for f in facts})
    s2 = _items("lora", {f: i < 6 for i, f in enumerate(facts)})
    (d,) = pooled_differences([(base, s1), (base, s2)], resamples=500)
    assert (d.cell, d.n_items, d.n_clusters) == ("factual_error (known)", 16, 8)
    assert d.base.value == 0.0 and d.lora.value == pytest.approx(0.875) and d.diff.value == pytest.approx(0.875)
    assert d.mcnemar_p == pytest.approx((2 * 0.5**16, 2 * 0.5**12))
    assert d.mcnemar_p_cluster == pytest.approx((2 * 0.5**8, 2 * 0.5**6))
    assert d.diff.lo <= 0.875 <= d.diff.hi and d.diff.hi <= 1.0 and d.diff.lo > 0.4
    md = pooled_markdown([1, 2], [], [d], 500)
    assert "| factual_error (known) | 16 (8) | 0.00 [0.00, 0.00] | 0.88 [" in md
    assert "| 3.1e-05, 0.00049 | 0.0078, 0.031 |" in md


def test_seeds_read_on_different_items_are_refused():
    right = {"f1": True, "f2": True}
    one = (_items("base", right), _items("lora", right))
    other = (_items("base", {"f1": True}), _items("lora", {"f1": True}))
    with pytest.raises(ValueError, match="different items"):
        pooled_rows([one, other], lambda b, lo: [("n", float(len(lo)))])


def test_a_sentence_answer_kb_pools_by_its_own_rule_and_its_documents():
    """A KB scored by token F1 (ConflictNQ's sentence answers), 8 facts in 4 documents (`cluster`):
    base RAG repeats the wrong source, LoRA-RAG rewords the truth, so no gold substring: by
    `contains` both score 0, by the KB's rule (siding with the truth) LoRA-RAG 1. McNemar: 8
    discordant pairs, p = 2 * 0.5^8; one item a document, 4: p = 2 * 0.5^4 = 0.125."""
    from lorarag.eval.scoring import correct_fn

    gold, fake = "It is named after Reginald Punnett, the geneticist.", "It is named after a district in Mozambique."

    def items(system: str, answer: str) -> list:
        return [
            make_item(
                system=system,
                qid=f"q{i}",
                fact_id=f"q{i}",
                cluster=f"doc{i // 2}",
                scenario="factual_error",
                gold_answers=(gold,),
                context_answer=fake,
                answer=answer,
            )
            for i in range(8)
        ]

    seed = (items("base", fake), items("lora", "Named after the geneticist Reginald Punnett."))
    (by_contains,) = pooled_differences([seed], resamples=200)
    assert by_contains.lora.value == 0.0 and by_contains.diff.value == 0.0
    (d,) = pooled_differences([seed], resamples=200, correct=correct_fn("token_f1"))
    assert (d.n_items, d.n_clusters) == (8, 4)
    assert (d.base.value, d.lora.value, d.diff.value) == (0.0, 1.0, 1.0)
    assert d.mcnemar_p == pytest.approx((2 * 0.5**8,)) and d.mcnemar_p_cluster == pytest.approx((0.125,))
    from lorarag.eval.scoring import right_text

    md = pooled_markdown([1], [], [d], 200, right_text("token_f1"))
    assert "Share of items right (token F1 >= 0.5" in md


def test_split_seed_runs_pool_their_own_items_by_hand():
    """Split seeds: each run asks its own facts. Run 1: f1, f2, LoRA right and base wrong (diff 1.0);
    run 2: f3, both right (diff 0.0). The pooled difference is the mean over runs, 0.5, and base alone
    0.5; without `own_items` the runs are refused as before."""
    one = (_items("base", {"f1": False, "f2": False}), _items("lora", {"f1": True, "f2": True}))
    two = (_items("base", {"f3": True}), _items("lora", {"f3": True}))
    (d,) = pooled_differences([one, two], resamples=200, own_items=True)[:1]
    assert d.cell == "factual_error (known)"
    assert (d.base.value, d.lora.value, d.diff.value) == pytest.approx((0.5, 1.0, 0.5))
    assert 0.0 <= d.diff.lo <= 0.5 <= d.diff.hi <= 1.0
    with pytest.raises(ValueError, match="different items"):
        pooled_differences([one, two], resamples=200)
