"""The seeds' baselines table (study/pooled_baseline_table.py): hand-computed cells, and its intervals
against study/pooled_targets.py's (the reference draw) where both read LoRA-RAG minus base RAG."""

from __future__ import annotations

import numpy as np
import pytest

from lorarag.eval.answer_metrics import is_correct
from lorarag.study.baseline_tables import captured
from lorarag.study.pooled_baseline_table import ROUTER, baselines_markdown, pooled_baselines
from lorarag.study.pooled_targets import pooled_differences
from tests.eval_fixtures import make_item


def _items(system: str, right: dict[str, bool], scenario: str = "factual_error", knowledge: str = "known"):
    """Two wordings per fact of one cell; `right[fact]`: answered with the gold value."""
    return [
        make_item(
            system=system,
            qid=f"{f}/p{w}/{scenario}/{knowledge}",
            fact_id=f,
            scenario=scenario,
            knowledge=knowledge,
            answer="50 km/h" if ok else "80 km/h",
        )
        for f, ok in sorted(right.items())
        for w in range(2)
    ]


def test_cells_hand_computed_with_the_router_and_the_best_system():
    """4 facts x 2 wordings of factual error (known), two seeds.
    LoRA-RAG: right on f0-f2 at seed 1 (0.75), on f0-f3 at seed 2 (1.0): pooled 0.875.
    Closed-book LoRA: right on f0, f1 at seed 1 (0.5), on all at seed 2 (1.0): 0.75; LoRA − it +0.125.
    Base RAG (no adapter, both seeds): right on f3 only (0.25); LoRA − it +0.625.
    Router (closed-book right, else base): seed 1 f0, f1, f3 (0.75), seed 2 all (1.0): 0.875."""
    facts = ["f0", "f1", "f2", "f3"]
    base = _items("base", {f: f == "f3" for f in facts})
    seeds = [
        {
            "lora": _items("lora", {f: f != "f3" for f in facts}),
            "cb": _items("cb", {f: f in ("f0", "f1") for f in facts}),
            "base": base,
        },
        {"lora": _items("lora", dict.fromkeys(facts, True)), "cb": _items("cb", dict.fromkeys(facts, True)), "base": base},
    ]
    (c,) = pooled_baselines(seeds, "lora", ["cb", "base"], ["cb", "base"], is_correct, router=("cb", "base"), resamples=300)
    assert (c.cell, c.n_items, c.n_clusters) == ("factual_error (known)", 8, 4)
    assert c.lora.value == pytest.approx(0.875)
    got = {n: (a.value, d.value) for n, a, d in c.others}
    want = {"cb": (0.75, 0.125), "base": (0.25, 0.625), ROUTER: (0.875, 0.0)}
    assert got.keys() == want.keys() and all(got[n] == pytest.approx(want[n]) for n in want)
    assert c.best == "lora"  # the router is not deployable
    # router 0.875 gains 0.125 over the better pure strategy (closed-book 0.75); LoRA-RAG realises all of it
    assert c.captured == "1.00"
    for _, a, d in c.others:
        assert a.lo <= a.value <= a.hi and d.lo <= d.value <= d.hi
    md = baselines_markdown([1, 2], "lora", [c], 300)
    assert "| factual_error (known) | 8 (4) | 0.88 [" in md
    assert md.rstrip().endswith("| lora | 1.00 |")
    assert "| 0.25 (+0.62 [" in md or "| 0.25 (+0.63 [" in md


def test_a_tie_for_best_names_both():
    right = {"f0": True, "f1": False}
    seeds = [{"lora": _items("lora", right), "cb": _items("cb", right)}]
    (c,) = pooled_baselines(seeds, "lora", ["cb"], ["cb"], is_correct, resamples=50)
    assert c.best == "tie: lora, cb"


def test_intervals_are_the_pooled_tables_own_draw():
    """LoRA-RAG minus base RAG, three seeds, three cells, 12 facts: the same point and the same CI as
    study/pooled_targets.py's (its tests are hand-computed), since both resample seeds and facts from one rng
    in the same order."""
    rng = np.random.default_rng(3)
    facts = [f"f{i}" for i in range(12)]
    cells = [("consistent", "known"), ("factual_error", "known"), ("consistent", "unknown")]

    def system(name: str, p: float) -> list:
        return [r for s, k in cells for r in _items(name, {f: bool(rng.random() < p) for f in facts}, s, k)]

    base = system("base", 0.4)
    seeds = [{"base": base, "lora": system("lora", 0.7)} for _ in range(3)]
    ours = pooled_baselines(seeds, "lora", ["base"], ["base"], is_correct, resamples=400, seed=7)
    ref = pooled_differences([(s["base"], s["lora"]) for s in seeds], resamples=400, seed=7)
    ref_by = {d.cell: d for d in ref}
    assert [c.cell for c in ours] == ["consistent (known)", "consistent (unknown)", "factual_error (known)"]
    for c in ours:
        (_, acc, diff), d = c.others[0], ref_by[c.cell]
        assert (acc.value, acc.lo, acc.hi) == pytest.approx((d.base.value, d.base.lo, d.base.hi))
        assert (c.lora.value, c.lora.lo, c.lora.hi) == pytest.approx((d.lora.value, d.lora.lo, d.lora.hi))
        assert (diff.value, diff.lo, diff.hi) == pytest.approx((d.diff.value, d.diff.lo, d.diff.hi))


def test_a_seed_without_the_items_is_refused():
    right = {"f0": True, "f1": True}
    one = {"lora": _items("lora", right), "cb": _items("cb", right)}
    short = {"lora": _items("lora", right), "cb": _items("cb", {"f0": True})}
    with pytest.raises(ValueError, match="seed 2 lacks items"):
        pooled_baselines([one, short], "lora", ["cb"], ["cb"], is_correct, resamples=10)


def test_captured_over_seeds_says_when_lora_rag_reads_past_the_router():
    """4 facts, one seed: closed-book LoRA right on f0, base RAG on f1 (router 0.50); LoRA-RAG right on
    every fact (1.00) is a better reader than base RAG, not a router: '> router (+0.50)'. Without
    the router's two systems the column is '–'."""
    facts = ["f0", "f1", "f2", "f3"]
    seeds = [
        {
            "lora": _items("lora", dict.fromkeys(facts, True)),
            "cb": _items("cb", {f: f == "f0" for f in facts}),
            "base": _items("base", {f: f == "f1" for f in facts}),
        }
    ]
    (c,) = pooled_baselines(seeds, "lora", ["cb", "base"], ["cb", "base"], is_correct, router=("cb", "base"), resamples=50)
    assert c.captured == "> router (+0.50)"
    (c,) = pooled_baselines(seeds, "lora", ["cb", "base"], ["cb", "base"], is_correct, resamples=50)
    assert c.captured == "–"


def test_captured_hand_computed_edges():
    """study/baseline_tables.captured on pooled means. LoRA-RAG 0.9917 against a router of 0.99 that gains
    nothing over closed-book LoRA (0.99): a lead of 0.0017 prints as +0.00, so no '> router' and no
    share ('–'). 0.55 against router 0.52 over base 0.50: '> router (+0.03)'. 0.60 against router
    0.80 over pure 0.40: (0.60 − 0.40) / (0.80 − 0.40) = 0.50."""
    assert captured(0.9917, 0.99, [0.99, 0.58]) == "–"
    assert captured(0.55, 0.52, [0.04, 0.50]) == "> router (+0.03)"
    assert captured(0.60, 0.80, [0.40, 0.30]) == "0.50"
    assert captured(0.60, 0.80, []) == "–"


def test_the_caption_states_the_threshold_the_sentence_scorer_applies():
    """Sentence answers count as right at token F1 >= 0.5 (eval.scoring.correct_fn), and the seeds'
    tables say so, since their shares differ from the headline's mean F1. Gold 'red fort delhi':
    'red' has P 1, R 1/3, F1 2(1/3)/(4/3) = 0.5 (right); 'red gate' has P 1/2, R 1/3, F1 0.4 (not);
    the full answer given while abstaining is not right either."""
    from lorarag.eval.scoring import correct_fn, right_text

    correct = correct_fn("token_f1")

    def item(answer: str, abstained: bool = False):
        return make_item(
            system="lora", gold_answers=("red fort delhi",), context_answer=None, answer=answer, abstained=abstained
        )

    assert [correct(item("red")), correct(item("red gate")), correct(item("red fort delhi", True))] == [True, False, False]
    right = right_text("token_f1")
    assert "token F1 >= 0.5" in right and "abstention" in right
    (c,) = pooled_baselines(
        [{"lora": [item("red")], "cb": [item("red gate")]}], "lora", ["cb"], ["cb"], correct, resamples=20
    )
    md = baselines_markdown([1], "lora", [c], 20, right)
    assert f"accuracy (right: {right})" in md
    assert "| consistent (known) | 1 (1) | 1.00 [1.00, 1.00] | 0.00 (+1.00 [+1.00, +1.00]) |" in md
    assert "right:" not in baselines_markdown([1], "lora", [c], 20)
