"""Retrieval metrics against trec_eval (pytrec_eval) and hand-computed values."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from lorarag.eval import retrieval_metrics as rm

KS = (1, 3, 5, 10)
VEC = {
    "P": rm.precision_at_k,
    "recall": rm.recall_at_k,
    "ndcg_cut": rm.ndcg_at_k,
    "map_cut": rm.map_at_k,
    "success": rm.hit_at_k,
}
ITEM = {
    "P": rm.item_precision,
    "recall": rm.item_recall,
    "ndcg_cut": rm.item_ndcg,
    "map_cut": rm.item_map,
    "success": rm.item_hit,
}


def _random_case(seed: int, n_queries: int = 60):
    rnd = random.Random(seed)
    docs = [f"d{i:02d}" for i in range(30)]
    runs, qrels = [], []
    for q in range(n_queries):
        rel = {d: rnd.choice([0, 1, 1, 2, 3]) for d in rnd.sample(docs, rnd.randint(1, 8))}
        if q % 7 == 0:  # judged, nothing relevant
            rel = {d: 0 for d in rel}
        runs.append(rnd.sample(docs, rnd.randint(0, 14)))  # often fewer than K results
        qrels.append(rel)
    return runs, qrels


def test_matches_pytrec_eval_on_random_runs():
    pytrec_eval = pytest.importorskip("pytrec_eval")
    runs, qrels = _random_case(0)
    qmap = {f"q{i}": r for i, r in enumerate(qrels)}
    # Distinct, decreasing scores: trec_eval ranks exactly as our lists.
    rmap = {f"q{i}": {d: float(100 - j) for j, d in enumerate(r)} for i, r in enumerate(runs)}
    measures = {f"{m}_{k}" for m in VEC for k in KS} | {"recip_rank"}
    ref = pytrec_eval.RelevanceEvaluator(qmap, measures).evaluate(rmap)
    m = rm.relevance_matrix(runs, qrels, 14)
    for name, fn in VEC.items():
        for k in KS:
            ours = fn(m, k, no_relevant="zero")
            for i in range(len(runs)):
                want = ref[f"q{i}"][f"{name}_{k}"] if f"q{i}" in ref else 0.0
                assert ours[i] == pytest.approx(want, abs=1e-12), (name, k, i)
                item = ITEM[name](runs[i], qrels[i], k)
                if any(g > 0 for g in qrels[i].values()):
                    assert item == pytest.approx(want, abs=1e-12), (name, k, i)
                else:
                    assert math.isnan(item)
    rr = rm.mrr(m, no_relevant="zero")
    for i in range(len(runs)):
        want = ref[f"q{i}"]["recip_rank"] if f"q{i}" in ref else 0.0
        assert rr[i] == pytest.approx(want, abs=1e-12)


def test_tie_order_matches_trec_eval():
    pytrec_eval = pytest.importorskip("pytrec_eval")
    scores = {"a": 1.0, "b": 1.0, "c": 1.0, "z": 0.5, "y": 2.0}
    ranked = rm.rank_by_score(scores)
    assert ranked == ["y", "c", "b", "a", "z"]  # score desc, then id desc
    qrels = {"b": 1, "z": 1}
    ref = pytrec_eval.RelevanceEvaluator({"q": qrels}, {"recip_rank", "P_5", "map_cut_5"}).evaluate({"q": scores})["q"]
    assert rm.item_mrr(ranked, qrels) == pytest.approx(ref["recip_rank"])  # 1/3
    assert rm.item_map(ranked, qrels, 5) == pytest.approx(ref["map_cut_5"])
    assert ref["recip_rank"] == pytest.approx(1 / 3)


def test_hand_computed_values():
    ranked = ["a", "b", "c", "d", "e"]
    qrels = {"a": 1, "b": 1, "d": 1, "x": 1}  # relevance at ranks: 1,1,0,1,0 ; one never retrieved
    # P@5 = 3/5; R@5 = 3/4; AP@5 = (1/1 + 2/2 + 3/4) / 4; nDCG@5 = (1 + 1/log2 3 + 1/log2 5) / IDCG(4 rel)
    assert rm.item_precision(ranked, qrels, 5) == pytest.approx(0.6)
    assert rm.item_recall(ranked, qrels, 5) == pytest.approx(0.75)
    assert rm.item_map(ranked, qrels, 5) == pytest.approx(2.75 / 4)
    idcg = 1 + 1 / math.log2(3) + 1 / math.log2(4) + 1 / math.log2(5)
    assert rm.item_ndcg(ranked, qrels, 5) == pytest.approx((1 + 1 / math.log2(3) + 1 / math.log2(5)) / idcg)
    # P@10 with only 5 results divides by 10 (trec_eval P_10), not by 5.
    assert rm.item_precision(ranked, qrels, 10) == pytest.approx(0.3)


def test_context_precision_definition_not_the_writeup_example():
    # Relevance 1,1,0,1,0: (P@1*1 + P@2*1 + P@4*1) / 3 = (1 + 1 + 0.75) / 3 = 0.91667, not 0.75.
    ranked = ["a", "b", "c", "d", "e"]
    qrels = {"a": 1, "b": 1, "d": 1}
    want = (1 + 1 + 3 / 4) / 3
    assert rm.item_context_precision(ranked, qrels, 5) == pytest.approx(want)
    m = rm.relevance_matrix([ranked], [qrels], 5)
    assert rm.context_precision_at_k(m, 5)[0] == pytest.approx(want)
    assert want != pytest.approx(0.75)
    # Nothing relevant in the top K -> 0; Context Recall = share of relevant ids given.
    assert rm.item_context_precision(["c", "e"], qrels, 2) == 0.0
    assert rm.item_context_recall(["d", "c"], qrels) == pytest.approx(1 / 3)


def test_no_relevant_is_nan_and_skipped_in_means():
    m = rm.relevance_matrix([["a"], ["a"]], [{"a": 1}, {}], 3)
    assert rm.recall_at_k(m, 3).tolist()[0] == 1.0
    assert math.isnan(rm.recall_at_k(m, 3)[1])
    assert rm.recall_at_k(m, 3, no_relevant="zero")[1] == 0.0
    s = rm.retrieval_summary([["a"], ["a"]], [{"a": 1}, {}], ks=(1,))
    assert s["n"] == 1 and s["recall@1"] == 1.0


def test_duplicates_count_once_and_bad_k_raises():
    assert rm.item_precision(["a", "a", "b"], {"a": 1}, 2) == pytest.approx(0.5)
    m = rm.relevance_matrix([["a", "a", "b"]], [{"a": 1}], 2)
    assert rm.precision_at_k(m, 2)[0] == pytest.approx(0.5)
    with pytest.raises(ValueError):
        rm.precision_at_k(m, 3)


def test_vectorised_equals_per_item_on_large_random_set():
    runs, qrels = _random_case(1, n_queries=300)
    m = rm.relevance_matrix(runs, qrels, 10)
    got = rm.context_precision_at_k(m, 10)
    want = np.array([rm.item_context_precision(r, q, 10) for r, q in zip(runs, qrels)])
    assert np.allclose(got, want, equal_nan=True)


@pytest.mark.slow  # ranx compiles numba kernels on first use (~10-40 s)
def test_matches_ranx_on_random_runs():
    ranx = pytest.importorskip("ranx")
    runs, qrels = _random_case(2)
    keep = [i for i, (r, q) in enumerate(zip(runs, qrels)) if r and any(g > 0 for g in q.values())]
    qrels_r = ranx.Qrels({f"q{i:03d}": {d: g for d, g in qrels[i].items() if g > 0} for i in keep})
    run_r = ranx.Run({f"q{i:03d}": {d: float(100 - j) for j, d in enumerate(runs[i])} for i in keep})
    names = {
        "precision": rm.precision_at_k,
        "recall": rm.recall_at_k,
        "ndcg": rm.ndcg_at_k,
        "map": rm.map_at_k,
        "hit_rate": rm.hit_at_k,
    }
    metrics = [f"{n}@{k}" for n in names for k in KS] + ["mrr"]
    ref = ranx.evaluate(qrels_r, run_r, metrics, return_mean=False, make_comparable=True)
    m = rm.relevance_matrix([runs[i] for i in keep], [qrels[i] for i in keep], 14)
    for n, fn in names.items():
        for k in KS:
            assert np.allclose(fn(m, k), ref[f"{n}@{k}"], atol=1e-12), (n, k)
    assert np.allclose(rm.mrr(m), ref["mrr"], atol=1e-12)
