"""Scenario generation on the demo world written as a knowledge base (read through the KB loaders,
as a run reads it): identical-form perturbations, dated older versions in the gold chunk's place,
hard distractors, determinism, no flawed test context that the SFT rows show, and validation of
bad records and unknown chunk ids."""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from pathlib import Path

import pytest

from lorarag.core.errors import RecordError
from lorarag.rag.records import Chunk
from lorarag.scenarios import from_corpus
from lorarag.scenarios.from_corpus import corpus_scenarios, substitute_span
from lorarag.scenarios.kb_records import QAItem
from lorarag.scenarios.perturb import PerturbationError, answer_type, substitute_value
from lorarag.scenarios.records import Scenario, load_scenarios, save_scenarios, validate_against_kb
from tests.test_world import load_world_kb, world_run_config


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    kb = load_world_kb(tmp_path_factory.mktemp("world"), seed=1, n_orgs=16)
    return kb, corpus_scenarios(kb.items, kb.chunks, name="kb", knowledge="known", seed=5, outdated=kb.older)


def test_every_fact_gets_each_type(built):
    kb, sc = built
    kinds = {(s.fact_id, s.scenario) for s in sc}
    for f in kb.world.facts:
        for t in ("consistent", "factual_error", "irrelevant"):
            assert (f"kb/{f.fact_id}", t) in kinds
        assert ((f"kb/{f.fact_id}", "outdated") in kinds) == bool(f.history)
    assert {s.fact_id for s in sc if s.scenario == "unanswerable"} == {f"kb/{u.fact_id}" for u in kb.world.unanswerable}
    assert all(s.cluster == kb.fact(s.fact_id).org_id for s in sc)  # the organisation, for resampling


def test_factual_error_is_the_gold_chunk_with_only_the_value_swapped(built):
    kb, sc = built
    by_id = {c.chunk_id: c for c in kb.chunks}
    fes = [x for x in sc if x.scenario == "factual_error"]
    assert len(fes) == len(kb.world.facts)  # 16 x 5: every fact's value is a span of its paragraph
    for s in fes:
        f = kb.fact(s.fact_id)
        (pc,) = [p for p in s.presented if p.replaces]
        gold = by_id[pc.replaces]
        assert pc.replaces == s.relevant_ids[0] and gold.text == f.statement()
        assert s.context_answer != f.value and s.context_answer not in f.gold_answers
        # nor any older version the KB holds (older.jsonl): that would be an undated outdated context
        assert s.context_answer not in {value for value, _ in f.history}
        assert pc.text == gold.text.replace(f.value, s.context_answer)
        assert answer_type(s.context_answer) == answer_type(f.value)


def test_outdated_is_the_dated_archive_sentence_in_the_gold_chunks_place(built):
    """The world's older versions (older.jsonl) as the archive wrote them: of a fact's two (2021 and
    2023) the test shows the seeded one (`held_out_older`, conflict seed 0), dated by its archive year,
    standing in for the current profile paragraph (which is not removed: in retrieved mode it is
    swapped). The archive is no chunk of the KB. Over 64 facts each archive year is shown."""
    kb, sc = built
    kb_texts = {c.text for c in kb.chunks}
    out = [s for s in sc if s.scenario == "outdated"]
    assert len(out) == 16 * 4  # every attribute but the founding year has a history
    years = Counter()
    for s in out:
        f = kb.fact(s.fact_id)
        (pc,) = [p for p in s.presented if p.replaces]
        shown = from_corpus.held_out_older(kb.older[f.fact_id], f.fact_id, 0)
        assert (s.context_answer, pc.date) == (shown.answer, shown.date) in f.history and shown.answer != f.value
        assert pc.text == f.statement(shown.answer) and pc.date not in pc.text and pc.text not in kb_texts
        assert pc.replaces == s.relevant_ids[0] and not s.removes
        years[pc.date] += 1
    assert set(years) == {"2021", "2023"}


def test_no_flawed_test_context_is_one_the_sft_rows_show(tmp_path):
    """The world's KB stages (study/kb.py through KBSource: ci-tiny's recipe on a 30-organisation
    world) against the SFT rows as written to disk (train and val): no factual-error, outdated,
    irrelevant or update context verbatim or as an edited twin; the consistent ones are the KB's own
    chunks, which training shows."""
    from lorarag.fallback.format import inert_question
    from lorarag.rag.prompt import prompt_passages
    from lorarag.scenarios.kb_wordings import plan_wordings, training_groups
    from lorarag.study.kb_source import KBSource
    from lorarag.study.run_folder import Paths
    from lorarag.train.overlap import TrainingSources, leaking, overlap_table
    from lorarag.train.sft import build_rows, read_sft, shown

    cfg = world_run_config(tmp_path, seed=0, n_orgs=30)
    src = KBSource(cfg, Paths(Path(cfg.runs_dir) / cfg.name))
    test, _, _ = src.scenarios(lambda _: None, None)
    disk = read_sft(cfg.train.dataset) + read_sft(cfg.train.val_dataset)
    owners = {" ".join(inert_question(q).split()): o for q, o in src.owners().items()}

    def owner(q: str):
        return owners.get(" ".join(q.split()), (None, None))

    kb = {c.chunk_id: c.text for c in src.chunks}
    table = overlap_table(test, TrainingSources(disk, owner), kb)
    assert not leaking(table), [c for c in table if c.edited]
    assert {c.scenario for c in table} >= {"factual_error", "outdated", "irrelevant", "update"}
    cons = next(c for c in table if (c.scenario, c.knowledge) == ("consistent", "known"))
    assert cons.n and cons.verbatim == cons.n  # the gold chunks are the KB training shows
    # a known fact the test shows an archive year of is trained on neither: the other archive year is the
    # same sentence with the year and value changed, an edited twin of the test's passage
    k = src.kb
    on_disk = {t for r in disk for m in r["messages"] if m["role"] == "user" for t in prompt_passages(m["content"])}
    tested_old = [s for s in test if (s.scenario, s.knowledge) == ("outdated", "known")]
    assert tested_old
    for s in tested_old:
        qid = s.fact_id.removeprefix("kb/")
        (pc,) = [p for p in s.presented if p.replaces]
        (other,) = [o for o in k.outdated[qid] if o.answer != s.context_answer]
        assert shown(pc.text) not in on_disk and shown(other.text) not in on_disk
    # rows built with one older version a fact (the test's) and without the test's passages show the
    # known facts' older versions the test presents: the check is not vacuous
    one = {q: (from_corpus.held_out_older(v, q, cfg.data.splits.seed),) for q, v in k.outdated.items()}
    naive, val, _ = build_rows(
        training_groups(k.groups, plan_wordings(k.groups, cfg.data.splits.seed)),
        k.chunks,
        cfg.train.sft,
        conflict_seed=cfg.data.splits.seed,
        outdated=one,
        stale=k.stale,
    )
    trained = TrainingSources([r.to_swift() for r in naive + val], owner)
    assert ("outdated", "known") in {(c.scenario, c.knowledge) for c in leaking(overlap_table(test, trained, kb))}


def test_irrelevant_contexts_never_contain_the_answer(built):
    _, sc = built
    for s in (x for x in sc if x.scenario in ("irrelevant", "unanswerable")):
        assert s.presented
        for p in s.presented:
            assert all(a.lower() not in p.text.lower() for a in s.gold_answers)
            assert p.chunk_id not in s.relevant_ids


def test_irrelevant_distractors_are_hard(built):
    """Each distractor is BM25-close to the question: another paragraph of the organisation it names, or
    the same attribute of another organisation (the template's words); never an unrelated paragraph."""
    kb, sc = built
    doc = {c.chunk_id: c.doc_id for c in kb.chunks}  # orgs/<org>/profile#<attribute>
    kinds = set()
    for s in (x for x in sc if x.scenario == "irrelevant"):
        f = kb.fact(s.fact_id)
        for p in s.presented:
            org, attr = doc[p.chunk_id].split("/")[1], doc[p.chunk_id].split("#")[1]
            assert (org == f.org_id) != (attr == f.attribute), (s.question, p.text)
            kinds.add((s.language, org == f.org_id))
    assert kinds == {("en", True), ("en", False), ("zh", True), ("zh", False)}


def test_deterministic_by_seed(built):
    kb, sc = built
    assert corpus_scenarios(kb.items, kb.chunks, name="kb", knowledge="known", seed=5, outdated=kb.older) == sc
    other = corpus_scenarios(kb.items, kb.chunks, name="kb", knowledge="known", seed=6, outdated=kb.older)
    assert [s.context_answer for s in other] != [s.context_answer for s in sc]


def test_validation_lists_unknown_chunk_ids(built):
    world_kb, sc = built
    kb = {c.chunk_id for c in world_kb.chunks}
    validate_against_kb(sc, kb)
    bad = sc[0].__class__(**{**sc[0].__dict__, "relevant_ids": ("nope#1", "nope#2")})
    with pytest.raises(RecordError, match="nope#1, nope#2"):
        validate_against_kb(sc[:3] + [bad], kb)


def test_bad_records_are_rejected(tmp_path, built):
    _, sc = built
    path = tmp_path / "s.jsonl"
    save_scenarios(path, sc[:2])
    assert load_scenarios(path) == sc[:2]
    row = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
    row["scenario"] = "contradiction"
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    with pytest.raises(RecordError, match="contradiction"):
        load_scenarios(path)
    with pytest.raises(RecordError, match="no gold answer"):
        Scenario("q", "f", "?", (), (), "consistent", (), None)


def test_substitution_keeps_the_type_and_format():
    rng = random.Random(0)
    for _ in range(20):
        y = substitute_value("1987", rng)
        assert re.fullmatch(r"(19|20)\d\d", y) and y != "1987" and 1957 <= int(y) <= 2017
        m = substitute_value("$12.4 million", rng)
        assert re.fullmatch(r"\$[1-9]\d\.\d million", m) and m != "$12.4 million"
        z = substitute_value("58.9亿元", rng)
        assert re.fullmatch(r"[1-9]\d\.\d亿元", z) and z != "58.9亿元"
    pool = ["Marie Curie", "Lyon", "42", "Alan Turing"]
    assert substitute_value("Ada Lovelace", rng, pool) in {"Marie Curie", "Lyon", "Alan Turing"}
    assert substitute_value("周磊", rng, ["王芳", "Lyon"]) == "王芳"
    with pytest.raises(PerturbationError):
        substitute_value("周磊", rng, ["Lyon"])
    assert (
        substitute_span("The CEO is Ada  Moss; ada moss says so.", ("Ada Moss",), "Bo Li")
        == "The CEO is Bo Li; Bo Li says so."
    )  # every occurrence, any spacing and case
    with pytest.raises(PerturbationError, match="no gold answer 'Bob'"):
        substitute_span("The CEO is Ada.", ("Bob",), "Carl")


def test_any_corpus_and_qa_set():
    chunks = [
        Chunk("c1", "d", "d", "The Eiffel Tower was completed in 1889 in Paris.", 0, 48),
        Chunk("c2", "d", "d", "The Colosseum stands in Rome and opened in 80 AD.", 0, 50),
        Chunk("c3", "d", "d", "The Eiffel Tower is made of wrought iron.", 0, 41),
    ]
    items = [
        QAItem("q1", "When was the Eiffel Tower completed?", ("1889",), ("c1",)),
        QAItem("q2", "How tall is the Eiffel Tower's flagpole?", (), (), unanswerable=True),
    ]
    sc = corpus_scenarios(items, chunks, name="toy", seed=0, distractors=0)
    kinds = [s.scenario for s in sc]
    assert kinds == ["consistent", "factual_error", "irrelevant", "unanswerable"]
    fe = sc[1].presented[0]
    assert fe.replaces == "c1" and fe.text == chunks[0].text.replace("1889", sc[1].context_answer)
    assert sc[2].presented[0].chunk_id == "c3"  # the best-scoring chunk without the answer
    validate_against_kb(sc, {"c1", "c2", "c3"})
    with pytest.raises(RecordError, match="c9"):
        corpus_scenarios([QAItem("q3", "?", ("x",), ("c9",))], chunks, name="toy")


def _row(qid: str, **kw) -> dict:
    row = {
        "qid": qid,
        "fact_id": "f",
        "question": "Capital of France?",
        "gold_answers": ["Paris"],
        "relevant_ids": ["kb1"],
        "scenario": "consistent",
        "presented": [{"chunk_id": "kb1", "text": "Paris is the capital."}],
        "context_answer": "Paris",
    }
    return {**row, **kw}


def test_a_string_gold_answer_is_an_error_not_five_letters(tmp_path):
    """`gold_answers: "Paris"` would be split into characters: any answer with an "a" would score."""
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps(_row("q1")) + "\n" + json.dumps(_row("q2", gold_answers="Paris")) + "\n")
    with pytest.raises(RecordError, match=r"s.jsonl:2: gold_answers: expected a list of strings, got a string"):
        load_scenarios(path)
    path.write_text(json.dumps(_row("q1", presented=[{"chunk_id": "kb1", "text": ["Paris"]}])) + "\n")
    with pytest.raises(RecordError, match=r"s.jsonl:1: presented\[0\]\.text: expected a string, got a list"):
        load_scenarios(path)
    path.write_text(json.dumps(_row("q1", relevant_ids="kb1")) + "\n")
    with pytest.raises(RecordError, match=r"relevant_ids: expected a list of strings, got a string"):
        load_scenarios(path)


def test_duplicate_qids_are_refused_on_read_and_write(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(_row(q)) + "\n" for q in ("q1", "q2", "q1")))
    with pytest.raises(RecordError, match=r"s.jsonl:3: duplicate qid 'q1' \(first at line 1\)"):
        load_scenarios(path)
    item = Scenario("q1", "f", "?", ("a",), ("kb1",), "consistent", (), "a")
    with pytest.raises(RecordError, match="duplicate qid 'q1'; nothing written"):
        save_scenarios(tmp_path / "out.jsonl", [item, item])
    assert not (tmp_path / "out.jsonl").exists()
