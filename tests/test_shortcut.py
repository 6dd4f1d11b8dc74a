"""The context-only shortcut probe (eval/shortcut.py): hand-computed AUROCs, and on ConflictNQ
(when ../shared/data has it) the length shortcut a 500-character chunker removes and the style
shortcut it cannot."""

from __future__ import annotations

from pathlib import Path

import pytest

from lorarag.eval.shortcut import auroc, context_probe
from lorarag.scenarios.records import PresentedChunk, Scenario

CNQ = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "conflictnq" / "val.jsonl"


def _sc(i: int, kind: str, text: str) -> Scenario:
    return Scenario(
        qid=f"q{i}/{kind}",
        fact_id=f"f{i}",
        question="Q?",
        gold_answers=("a",),
        relevant_ids=("c",),
        scenario=kind,
        presented=(PresentedChunk(f"c{i}", text, "s"),),
        context_answer="a",
    )


def test_auroc_by_hand():
    # positives score 3, 1; negatives 2, 4: of the 4 pairs one has the positive higher -> 1/4
    assert auroc([3, 1, 2, 4], [1, 1, 0, 0]) == pytest.approx(0.25)
    assert auroc([1, 2, 2, 3], [0, 1, 0, 1]) == pytest.approx(0.875)  # the tie counts 1/2: (1 + 0.5 + 1 + 1) / 4


def test_length_probe_reads_either_direction_and_ignores_other_scenarios():
    sc = [_sc(i, "factual_error", "x" * (10 + i)) for i in range(4)]
    sc += [_sc(i, "consistent", "x" * (100 + i)) for i in range(4)]
    sc.append(_sc(9, "irrelevant", "x"))  # not a factual-error / consistent pair: left out
    p = context_probe(sc, splits=0)
    assert (p.n_pos, p.n_neg) == (4, 4)
    assert p.length_auroc == pytest.approx(1.0)  # shorter = factual error, read the other way round
    assert p.flagged
    same = [_sc(i, k, f"the bridge of {i} was built by someone") for i in range(6) for k in ("factual_error", "consistent")]
    q = context_probe(same, splits=0)
    assert q.length_auroc == pytest.approx(0.5) and not q.flagged
    assert context_probe([_sc(0, "consistent", "x")]) is None


@pytest.mark.skipif(not CNQ.is_file(), reason="../shared/data/conflictnq is not here")
@pytest.mark.parametrize("chunk_size, length_shortcut", [(5000, True), (500, False)])
def test_conflictnq_length_shortcut_goes_with_500_char_chunks(chunk_size, length_shortcut):
    from lorarag.rag.config import ChunkerConfig
    from lorarag.scenarios.config import CorpusSource, QuestionSource
    from lorarag.scenarios.from_corpus import corpus_scenarios
    from lorarag.scenarios.kb_corpus import load_corpus
    from lorarag.scenarios.kb_labels import map_labels
    from lorarag.scenarios.kb_questions import load_questions

    corpus = load_corpus(CorpusSource(kind="conflictnq", path=str(CNQ)), ChunkerConfig(chunk_size=chunk_size))
    items, _ = map_labels(load_questions(QuestionSource(kind="conflictnq", path=str(CNQ))), corpus)
    sc = corpus_scenarios(
        items,
        corpus.chunks,
        name="kb",
        seed=0,
        distractors=0,
        types=("consistent", "factual_error"),
        conflicts_per_item=1,
        conflict_seed=0,
    )
    p = context_probe(sc, splits=1)
    assert p.n_pos == p.n_neg == 225
    assert (p.length_auroc > 0.75) if length_shortcut else (p.length_auroc < 0.6), p
    # the fabricated passages' style gives them away whatever the chunking: the report must say so
    assert p.auroc > 0.9 and p.flagged, p


@pytest.mark.parametrize("name", ["piaf-fr", "lecoqa"])
def test_scenarios_over_piaf_and_lecoqa(name):
    """PIAF (fr, answer spans): every question gets a consistent, a type-aware factual-error and an
    irrelevant context, and the probe cannot tell the substituted chunks (AUROC <= 0.6). LeCoQA (zh):
    its answers are lawyers' replies, not spans of the statutes, so no factual error can be made by
    substitution (it needs conflict passages or an older-version file); consistent and irrelevant
    contexts are built for all 309 questions."""
    from collections import Counter

    from lorarag.rag.config import ChunkerConfig
    from lorarag.scenarios.config import CorpusSource, QuestionSource
    from lorarag.scenarios.from_corpus import corpus_scenarios
    from lorarag.scenarios.kb_corpus import load_corpus
    from lorarag.scenarios.kb_labels import map_labels
    from lorarag.scenarios.kb_questions import load_questions
    from tests.conftest import shared_data

    folder = shared_data(name)
    corpus = load_corpus(CorpusSource(kind="beir", path=str(folder)), ChunkerConfig())
    items, _ = map_labels(load_questions(QuestionSource(kind="beir", path=str(folder), split="test")), corpus)
    sc = corpus_scenarios(
        items, corpus.chunks, name="kb", seed=0, distractors=1, types=("consistent", "factual_error", "irrelevant")
    )
    counts = Counter(s.scenario for s in sc)
    if name == "piaf-fr":
        assert counts == {"consistent": 105, "factual_error": 105, "irrelevant": 105}
        p = context_probe(sc)
        assert p.auroc <= 0.6 and p.length_auroc <= 0.6 and not p.flagged, p
    else:
        assert counts["consistent"] == counts["irrelevant"] == 309 and counts["factual_error"] <= 3


def test_every_flawed_cell_is_probed_and_a_form_shortcut_is_named_per_cell():
    """Outdated contexts in an archive template ("As of ...") are told by their length alone (each 20
    characters longer: AUROC 1.0), factual errors of the same form as the consistent ones are not
    (0.5); each cell gets its own line, and only the outdated one says it can be told by form."""
    from dataclasses import asdict

    from lorarag.eval.shortcut import context_probes, probe_lines

    sc = [_sc(i, "consistent", f"the bridge of town{i} was built by mason{i + 30}") for i in range(6)]
    sc += [_sc(i, "factual_error", f"the bridge of town{i} was built by mason{i + 40}") for i in range(6)]
    sc += [_sc(i, "outdated", f"As of 1900, the bridge of town{i} was built by mason{i + 50}") for i in range(6)]
    probes = context_probes(sc, splits=0)
    assert set(probes) == {"factual_error", "outdated"}  # no irrelevant or unanswerable contexts here
    assert probes["outdated"].length_auroc == pytest.approx(1.0) and probes["outdated"].flagged
    assert probes["factual_error"].length_auroc == pytest.approx(0.5) and not probes["factual_error"].flagged
    lines = probe_lines({c: {**asdict(p), "auroc": None} for c, p in probes.items()})
    assert len(lines) == 2 and lines[0].startswith("Context-only probe, factual error (")
    assert "can be told by their form" in lines[1] and "can be told by their form" not in lines[0]
