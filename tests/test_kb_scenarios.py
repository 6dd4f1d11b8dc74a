"""Scenarios over a user's corpus: consistent, type-aware factual error, the set's own conflict
passages, irrelevant, unanswerable and outdated, presented and retrieved + poisoned."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from lorarag.core.errors import RecordError
from lorarag.rag.config import ChunkerConfig
from lorarag.rag.records import Chunk, Retrieved
from lorarag.scenarios import from_corpus
from lorarag.scenarios.config import CorpusSource, QuestionSource
from lorarag.scenarios.from_corpus import OlderValue, corpus_scenarios, held_out_conflicts, load_outdated
from lorarag.scenarios.kb_labels import find_answer
from lorarag.scenarios.kb_records import Conflict, QAItem
from lorarag.scenarios.records import poison, validate_against_kb

TEXTS = {
    "c1": "The Elmira lighthouse was completed in 1911 by the harbour board.",
    "c2": "The Elmira harbour handles 12,400 tonnes of grain every year.",
    "c3": "The Elmira lighthouse keeper in its first decades was Ada Moss.",
    "c4": "Dunmore bridge spans the river Kell and is built of grey granite.",
    "c5": "Elmira lighthouse tours start at the harbour gate every morning.",
    "c6": "The Dunmore bridge was designed by Tom Reed, an engineer from Kelso.",
}
CHUNKS = [Chunk(cid, "d" + cid, "d" + cid, t, 0, len(t)) for cid, t in TEXTS.items()]
ITEMS = [
    QAItem("year", "When was the Elmira lighthouse completed?", ("1911",), ("c1",)),
    QAItem("num", "How much grain does the Elmira harbour handle a year?", ("12,400 tonnes",), ("c2",)),
    QAItem("who", "Who kept the Elmira lighthouse?", ("Ada Moss",), ("c3",)),
    QAItem(
        "eng",
        "Who designed the Dunmore bridge?",
        ("Tom Reed",),
        ("c6",),
        conflicts=tuple(
            Conflict(f"The Dunmore bridge was designed by {n}.", n) for n in ("Lena Park", "Ravi Shah", "Mia Cole")
        ),
    ),
    QAItem("none", "Who painted the Elmira lighthouse red?", (), (), unanswerable=True),
    QAItem("beir", "A query with qrels and no answer", (), ("c4",)),
]


def test_each_kind_over_a_corpus_with_type_aware_substitution_and_hard_distractors():
    sc = corpus_scenarios(ITEMS, CHUNKS, name="kb", knowledge="known", seed=0, distractors=1)
    validate_against_kb(sc, set(TEXTS))
    by = {s.qid: s for s in sc}
    assert not any(s.qid.startswith("kb/beir/") for s in sc)  # retrieval only: no answer to score
    cons = by["kb/year/consistent"]
    assert [p.chunk_id for p in cons.presented if p.chunk_id == "c1"] == ["c1"] and len(cons.presented) == 2
    assert all(not find_answer(p.text, ["1911"]) for p in cons.presented if p.chunk_id != "c1")
    fe = by["kb/year/factual_error"]
    (pc,) = [p for p in fe.presented if p.replaces]
    assert pc.replaces == "c1" and re.fullmatch(r"1[5-9]\d\d|20[0-2]\d", fe.context_answer)
    assert fe.context_answer != "1911"
    assert pc.text == TEXTS["c1"].replace("1911", fe.context_answer)
    num = by["kb/num/factual_error"].context_answer
    assert re.fullmatch(r"\d\d,\d\d\d tonnes", num) and num != "12,400 tonnes"  # the format kept
    assert by["kb/who/factual_error"].context_answer in {"Tom Reed"}  # a name from the other answers
    irr = by["kb/year/irrelevant"]
    assert irr.removes == ("c1",) and len(irr.presented) == 2 and all("1911" not in p.text for p in irr.presented)
    assert by["kb/none/unanswerable"].gold_answers == () and by["kb/none/unanswerable"].presented
    assert all(s.knowledge == "known" and s.source_set == "kb" for s in sc)
    assert sc == corpus_scenarios(ITEMS, CHUNKS, name="kb", knowledge="known", seed=0, distractors=1)


def test_the_sets_own_conflict_passages_are_split_between_test_and_training():
    eng = ITEMS[3]
    test = corpus_scenarios(
        [eng], CHUNKS, name="kb", seed=1, conflict_seed=5, conflicts="test", types=["factual_error"], pool=[]
    )
    train = corpus_scenarios(
        [eng],
        CHUNKS,
        name="kb",
        seed=2,
        conflict_seed=5,
        conflicts="train",
        train_conflicts=5,
        types=["factual_error"],
        pool=[],
    )
    (t,) = test
    (j,) = held_out_conflicts(eng, 5, 1)
    assert t.context_answer == eng.conflicts[j].answer and t.qid == "kb/eng/factual_error"
    assert {s.context_answer for s in train} == {c.answer for c in eng.conflicts} - {t.context_answer}
    assert len(train) == 2 and all(s.qid.startswith("kb/eng/factual_error/") for s in train)
    own = corpus_scenarios([eng], CHUNKS, name="kb", conflicts="none", types=["factual_error"], pool=["Ada Moss"])
    assert own[0].context_answer == "Ada Moss"  # no conflict passages asked for: our substitution


def test_retrieved_and_poisoned_context_puts_the_perturbed_chunk_in_the_gold_chunks_place():
    sc = corpus_scenarios(ITEMS[:1], CHUNKS, name="kb", distractors=1)
    fe = next(s for s in sc if s.scenario == "factual_error")
    ranked = [Retrieved(c, 1.0 / i, i) for i, c in enumerate(CHUNKS, 1)]
    got = poison(ranked, fe)
    assert got[0].chunk.chunk_id == "c1~fe" and got[0].chunk.text != TEXTS["c1"] and len(got) == len(CHUNKS)
    irr = next(s for s in sc if s.scenario == "irrelevant")
    assert [r.chunk.chunk_id for r in poison(ranked, irr)] == ["c2", "c3", "c4", "c5", "c6"]


def test_outdated_from_user_supplied_older_versions(tmp_path):
    path = tmp_path / "old.jsonl"
    path.write_text(
        json.dumps({"id": "year", "answer": "1908", "date": "1909 guide"})
        + "\n"
        + json.dumps({"id": "who", "answer": "Otto Lind", "date": "1890", "text": "In 1890 the keeper was Otto Lind."})
        + "\n"
    )
    old = load_outdated(str(path))
    sc = corpus_scenarios(ITEMS[:3], CHUNKS, name="kb", distractors=0, types=["outdated"], outdated=old)
    a, b = sc
    assert a.presented[0].text == TEXTS["c1"].replace("1911", "1908") and a.presented[0].date == "1909 guide"
    assert b.presented[0].text == "In 1890 the keeper was Otto Lind." and b.presented[0].replaces == "c3"
    assert [s.context_answer for s in sc] == ["1908", "Otto Lind"]
    path.write_text(json.dumps({"id": "year", "answer": "1908"}) + "\n")
    with pytest.raises(RecordError, match=r"old.jsonl:1: date: required field missing"):
        load_outdated(str(path))


def test_the_held_out_older_version_is_seeded_by_the_id_alone_and_any_position_can_be_it():
    """`held_out_older` reads the seed and the id only: the same call gives the same version, another
    tuple of the same length the same position; over 300 ids with three versions each position is
    drawn about 100 times (binomial sd 8.2: within 4 sd, 67..133); one version is always itself."""

    def versions(qid: str) -> tuple[OlderValue, ...]:
        return tuple(
            OlderValue(qid, f"{name} {qid}", year) for name, year in (("Ann", "2019"), ("Bo", "2020"), ("Cy", "2021"))
        )

    qids = [f"q{i}" for i in range(300)]
    picked = [from_corpus.held_out_older(versions(q), q, 4) for q in qids]
    assert picked == [from_corpus.held_out_older(versions(q), q, 4) for q in qids]
    pos = [versions(q).index(o) for q, o in zip(qids, picked)]
    other = [tuple(OlderValue(q, f"x{k}", "1999") for k in range(3)) for q in qids]
    assert [o.index(from_corpus.held_out_older(o, q, 4)) for q, o in zip(qids, other)] == pos
    assert all(67 <= pos.count(k) <= 133 for k in range(3)), [pos.count(k) for k in range(3)]
    assert [versions(q).index(from_corpus.held_out_older(versions(q), q, 5)) for q in qids] != pos  # the seed counts
    only = versions("q1")[0]
    assert all(from_corpus.held_out_older((only,), "q1", seed) is only for seed in range(10))


def test_the_test_shows_one_older_version_and_training_another():
    """Two older keepers of the Elmira lighthouse: the test's outdated scenario shows the seeded one,
    training (`conflicts="train"`, same conflict seed) the other, for every conflict seed; with one
    version training shows that one (the row builder then drops it: tests/test_kb_sft.py)."""
    who = ITEMS[2]
    two = {
        "who": (
            OlderValue("who", "Otto Lind", "1890", "In 1890 the keeper was Otto Lind."),
            OlderValue("who", "Ida Berg", "1902"),
        )
    }
    shown = set()
    for seed in range(8):
        (test,) = corpus_scenarios(
            [who], CHUNKS, name="kb", distractors=0, types=["outdated"], outdated=two, conflict_seed=seed
        )
        (train,) = corpus_scenarios(
            [who], CHUNKS, name="kb", distractors=0, types=["outdated"], outdated=two, conflict_seed=seed, conflicts="train"
        )
        assert test.context_answer == from_corpus.held_out_older(two["who"], "who", seed).answer
        assert {test.context_answer, train.context_answer} == {"Otto Lind", "Ida Berg"}
        texts = {s.context_answer: s.presented[0] for s in (test, train)}
        assert (texts["Otto Lind"].text, texts["Otto Lind"].date) == ("In 1890 the keeper was Otto Lind.", "1890")
        assert (texts["Ida Berg"].text, texts["Ida Berg"].date) == (TEXTS["c3"].replace("Ada Moss", "Ida Berg"), "1902")
        shown.add(test.context_answer)
    assert shown == {"Otto Lind", "Ida Berg"}  # either may be the test's
    one = {"who": two["who"][1:]}
    (test,) = corpus_scenarios([who], CHUNKS, name="kb", distractors=0, types=["outdated"], outdated=one)
    (train,) = corpus_scenarios([who], CHUNKS, name="kb", distractors=0, types=["outdated"], outdated=one, conflicts="train")
    assert test.context_answer == train.context_answer == "Ida Berg" and test.presented == train.presented


def test_a_substituted_factual_error_is_none_of_the_items_older_answers():
    """An item's own older answer in its current chunk would be an undated outdated context, not a
    fabricated one. The keeper (Ada Moss; pool Otto Lind, Tom Reed; older answer Otto Lind, any case
    and spacing): always Tom Reed, where 20 seeds without the older answer draw both; with Otto Lind the
    only substitute, no factual error. The year 1911 (older 1908 and 1910): a substitute is 1911 +- 1..30,
    so each is a 1-in-60 draw, about 3 of 200 seeds without them; never one with them, and every seed
    still gets a factual error."""
    who, year = ITEMS[2], ITEMS[0]
    pool = ["Ada Moss", "Otto Lind", "Tom Reed"]
    older = {
        "who": (OlderValue("who", "OTTO  lind", "1890"),),
        "year": (OlderValue("year", "1908", "1909"), OlderValue("year", "1910", "1910")),
    }

    def fakes(item, seeds, outdated=None, pool=pool):
        return [
            s.context_answer
            for seed in seeds
            for s in corpus_scenarios(
                [item], CHUNKS, name="kb", seed=seed, distractors=0, types=["factual_error"], pool=pool, outdated=outdated
            )
        ]

    assert set(fakes(who, range(20))) == {"Otto Lind", "Tom Reed"}
    assert fakes(who, range(20), older) == ["Tom Reed"] * 20
    assert fakes(who, range(20), older, pool=["Ada Moss", "Otto Lind"]) == []
    plain = Counter(fakes(year, range(200)))
    assert plain["1908"] and plain["1910"]
    kept = fakes(year, range(200), older)
    assert len(kept) == 200 and not {"1908", "1910"} & set(kept)


def test_real_conflictnq_uses_its_fabricated_passages_as_factual_errors():
    from lorarag.scenarios.kb_corpus import load_corpus
    from lorarag.scenarios.kb_labels import map_labels
    from lorarag.scenarios.kb_questions import load_questions
    from tests.conftest import shared_data

    path = str(shared_data("conflictnq") / "val.jsonl")
    corpus = load_corpus(CorpusSource(kind="conflictnq", path=path), ChunkerConfig(chunk_size=5000))
    items, _ = map_labels(load_questions(QuestionSource(kind="conflictnq", path=path))[:30], corpus)
    sc = corpus_scenarios(items, corpus.chunks, name="conflictnq", types=["consistent", "factual_error", "irrelevant"])
    validate_against_kb(sc, {c.chunk_id for c in corpus.chunks})
    fe = [s for s in sc if s.scenario == "factual_error"]
    assert len(fe) == 30 and all(s.context_answer == it.conflicts[0].answer for s, it in zip(fe, items))
    fakes = {c.text for it in items for c in it.conflicts}
    assert all(any(p.text in fakes for p in s.presented) for s in fe)
    assert sum(s.scenario == "irrelevant" for s in sc) == 30


def test_a_document_label_presents_the_chunk_with_most_answer_words():
    """No answer is a span of the document (a paraphrased answer): the relevant chunk sharing
    most of its words is the gold chunk, not the document's first chunk."""
    from lorarag.scenarios.from_corpus import gold_of

    a = Chunk("d#0", "d", "d", "Kell bridge history begins with the river crossing.", 0, 50)
    b = Chunk("d#1", "d", "d", "Tom Reed from Kelso designed it in granite.", 50, 93)
    item = QAItem("q", "Who designed the Kell bridge?", ("It was designed by Tom Reed of Kelso",), ("d#0", "d#1"))
    gold, span = gold_of(item, {"d#0": a, "d#1": b})
    assert gold.chunk_id == "d#1" and span is None
    # a tie keeps the first relevant chunk, and an answer that is a span still picks the chunk holding it
    tie = QAItem("t", "Q?", ("zebra",), ("d#0", "d#1"))
    assert gold_of(tie, {"d#0": a, "d#1": b})[0].chunk_id == "d#0"
    span_item = QAItem("s", "Q?", ("river crossing",), ("d#1", "d#0"))
    assert gold_of(span_item, {"d#0": a, "d#1": b}) == (a, "river crossing")


class _Ranked:
    """A retriever with a fixed ranking (the code under test is the Searcher built on it)."""

    def __init__(self, chunks, order):
        self.chunks, self.order, self.asked = chunks, order, []

    def rank(self, queries, k):
        import numpy as np

        self.asked.append(k)
        return [(np.array(self.order[:k]), np.zeros(min(k, len(self.order)))) for _ in queries]


def test_retriever_searcher_keeps_the_ranking_and_only_the_allowed_chunks():
    from lorarag.scenarios.perturb import retriever_searcher

    r = _Ranked(CHUNKS, [5, 0, 3, 1, 4, 2])  # c6, c1, c4, c2, c5, c3
    assert retriever_searcher(r)(["q"], 3) == [["c6", "c1", "c4"]]
    pool = retriever_searcher(r, {"c1", "c2", "c3"})
    assert pool(["q"], 2) == [["c1", "c2"]]
    assert r.asked[-1] == 5  # depth 2 + the 3 chunks left out: enough to fill 2 from the pool


def test_dense_distractors_come_from_the_runs_retriever(tiny_models, tmp_path):
    """data.distractors: retrieval, on a real dense index: an irrelevant context is the best
    dense-ranked chunks that are not relevant and hold no answer, in the retriever's order."""
    import torch

    torch.set_num_threads(1)
    from lorarag.rag.config import BM25Config, DenseIndexConfig, EmbedderConfig, IndexConfig, RetrievalConfig
    from lorarag.rag.index.store import build_from_chunks
    from lorarag.rag.retrieve import load_retriever
    from lorarag.scenarios.perturb import retriever_searcher

    ecfg = EmbedderConfig(kind="transformers", model=str(tiny_models["embedder"]), batch_size=2, query_instruction=None)
    icfg = IndexConfig(dir=str(tmp_path / "idx"), bm25=BM25Config(), dense=DenseIndexConfig(kind="flat"))
    from lorarag.rag.embed import make_embedder

    emb = make_embedder(ecfg)
    build_from_chunks(CHUNKS, icfg, embedder=emb, embedder_cfg=ecfg)
    r = load_retriever(icfg, RetrievalConfig(mode="dense"), ecfg, embedder=emb)
    item = ITEMS[0]  # the lighthouse year, relevant c1
    sc = corpus_scenarios(
        [item], CHUNKS, name="kb", seed=0, distractors=1, types=("irrelevant",), search=retriever_searcher(r)
    )
    rows, _ = r.rank([item.question], len(CHUNKS))[0]
    expect = [
        CHUNKS[i].chunk_id
        for i in rows.tolist()
        if CHUNKS[i].chunk_id not in item.relevant_ids and "1911" not in CHUNKS[i].text
    ][:2]
    assert [p.chunk_id for p in sc[0].presented] == expect


def test_the_fabricated_cell_is_a_new_passage_of_another_form_and_never_trained():
    """Beside factual_error (an edit of the gold chunk): a question-and-answer note stating a type-kept
    fake in the gold chunk's place, or for an item with conflict passages of its own the next one in
    the seeded order after the factual-error cell's; none when the item has no other. Scenarios built
    for training (the default types) have no fabricated cell."""
    types = ("consistent", "factual_error", "fabricated")
    sc = {s.qid: s for s in corpus_scenarios(ITEMS, CHUNKS, name="kb", seed=0, distractors=0, types=types)}
    year = sc["kb/year/fabricated"]
    (pc,) = year.presented
    assert pc.replaces == "c1" and pc.chunk_id == "c1~new" and year.scenario == "fabricated"
    assert pc.text == f"FAQ. When was the Elmira lighthouse completed? Answer: {year.context_answer}."
    assert re.fullmatch(r"1[5-9]\d\d|20[0-2]\d", year.context_answer) and year.context_answer != "1911"
    assert sc["kb/who/fabricated"].context_answer == "Tom Reed"  # a person, the other who-question's answer
    order = list(range(3))
    import random

    random.Random("0/conflicts/eng").shuffle(order)
    (fe,) = [p for p in sc["kb/eng/factual_error"].presented if p.replaces]
    (new,) = [p for p in sc["kb/eng/fabricated"].presented if p.replaces]
    assert fe.text == ITEMS[3].conflicts[order[0]].text and new.text == ITEMS[3].conflicts[order[1]].text
    one = QAItem(
        "eng1",
        "Who designed the Dunmore bridge?",
        ("Tom Reed",),
        ("c6",),
        conflicts=(Conflict("The Dunmore bridge was designed by Lena Park.", "Lena Park"),),
    )
    assert not [s for s in corpus_scenarios([one], CHUNKS, name="kb", types=types) if s.scenario == "fabricated"]
    assert not [s for s in corpus_scenarios(ITEMS, CHUNKS, name="kb") if s.scenario == "fabricated"]
    zh = QAItem("zh", "青石古塔建成于哪一年？", ("1750",), ("z1",), language="zh")
    zchunks = [Chunk("z1", "dz", "dz", "青石古塔建成于1750年。", 0, 12)]
    (z,) = [s for s in corpus_scenarios([zh], zchunks, name="kb", types=types) if s.scenario == "fabricated"]
    assert z.presented[0].text == f"常见问题：青石古塔建成于哪一年？答：{z.context_answer}。"
