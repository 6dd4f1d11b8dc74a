"""No shortcut: a classifier that sees only the presented context cannot tell a factual error
from a consistent context in the demo world (AUROC <= 0.6); it can when the perturbation is marked."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import GroupShuffleSplit

from lorarag.scenarios.config import WorldConfig
from lorarag.scenarios.from_world import index_world, world_scenarios
from lorarag.scenarios.world import build_world


@pytest.fixture(scope="module")
def pairs():
    world = build_world(WorldConfig(seed=0, n_orgs=40))
    sc = world_scenarios(world, index_world(world), ("known", "context_only", "unknown", "unknown_dev"),
                         "train", seed=0, types=("consistent", "factual_error"))
    texts = [" ".join(p.text for p in s.presented) for s in sc]
    y = np.array([s.scenario == "factual_error" for s in sc], dtype=int)
    groups = [s.fact_id for s in sc]  # split by fact: the classifier must not memorise values
    return texts, y, groups


def context_auroc(texts, y, groups, seed=0) -> float:
    """TF-IDF (word 1-2 grams and char 2-4 grams) + logistic regression; AUROC on held-out facts."""
    tr, te = next(GroupShuffleSplit(n_splits=1, test_size=0.5, random_state=seed).split(texts, y, groups))
    vec_w = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True)
    vec_c = TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 4), sublinear_tf=True)
    from scipy.sparse import hstack

    xtr = hstack([vec_w.fit_transform([texts[i] for i in tr]), vec_c.fit_transform([texts[i] for i in tr])])
    xte = hstack([vec_w.transform([texts[i] for i in te]), vec_c.transform([texts[i] for i in te])])
    clf = LogisticRegression(C=10.0, max_iter=2000).fit(xtr, y[tr])
    return roc_auc_score(y[te], clf.predict_proba(xte)[:, 1])


def test_context_alone_does_not_separate_factual_errors(pairs):
    texts, y, groups = pairs
    assert 0.5 * len(y) == y.sum()  # one factual error per consistent context
    aucs = [context_auroc(texts, y, groups, seed) for seed in range(3)]
    assert max(aucs) <= 0.6, aucs


def test_the_probe_catches_a_marked_perturbation(pairs):
    """Sanity: the same classifier separates them at once when perturbed chunks carry a cue."""
    texts, y, groups = pairs
    marked = [t + " (updated)" if label else t for t, label in zip(texts, y)]
    assert context_auroc(marked, y, groups) > 0.95


def test_the_probe_catches_an_out_of_distribution_value(pairs):
    """Sanity: substitutes drawn from another distribution (here: round numbers) are caught too."""
    import re

    texts, y, groups = pairs
    shifted = [re.sub(r"\d+\.\d", "100.0", t) if label else t for t, label in zip(texts, y)]
    assert context_auroc(shifted, y, groups) > 0.7
