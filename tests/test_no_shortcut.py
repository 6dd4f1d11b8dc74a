"""No shortcut: a classifier that sees only the presented context cannot tell a factual error
from a consistent context in the demo world written as a knowledge base (AUROC <= 0.6); it can
when the perturbation is marked."""

from __future__ import annotations

import numpy as np
import pytest

from lorarag.eval.shortcut import text_auroc
from lorarag.scenarios.from_corpus import corpus_scenarios
from tests.test_world import load_world_kb


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    kb = load_world_kb(tmp_path_factory.mktemp("world"), seed=0, n_orgs=40)
    sc = corpus_scenarios(kb.items, kb.chunks, name="kb", seed=0, outdated=kb.older, types=("consistent", "factual_error"))
    texts = [" ".join(p.text for p in s.presented) for s in sc]
    y = np.array([s.scenario == "factual_error" for s in sc], dtype=int)
    groups = [s.fact_id for s in sc]  # split by fact: the classifier must not memorise values
    return texts, y, groups


def test_context_alone_does_not_separate_factual_errors(pairs):
    texts, y, groups = pairs
    assert len(y) == 2 * 40 * 5 and 0.5 * len(y) == y.sum()  # one factual error per consistent context
    aucs = [text_auroc(texts, y, groups, seed) for seed in range(3)]
    assert max(aucs) <= 0.6, aucs


def test_the_probe_catches_a_marked_perturbation(pairs):
    """Sanity: the same classifier separates them at once when perturbed chunks carry a cue."""
    texts, y, groups = pairs
    marked = [t + " (updated)" if label else t for t, label in zip(texts, y)]
    assert text_auroc(marked, y, groups) > 0.95


def test_the_probe_catches_an_out_of_distribution_value(pairs):
    """Sanity: substitutes drawn from another distribution (here: round numbers) are caught too."""
    import re

    texts, y, groups = pairs
    shifted = [re.sub(r"\d+\.\d", "100.0", t) if label else t for t, label in zip(texts, y)]
    assert text_auroc(shifted, y, groups) > 0.7
