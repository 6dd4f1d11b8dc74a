"""Held-out wordings on the KB path (scenarios/kb_wordings.py): a known test item with a wording to
spare is asked in one no SFT row uses; a single-wording set trains generated paraphrases and tests
its own wording; otherwise the test asks a trained wording and the tables say so. The gate's known
dev facts are planned alike and asked at dev in their held-out wording. A known test item's held-out
wording in a training row (train or val, as written) or a dev question stops the run."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from lorarag.rag.records import Chunk
from lorarag.scenarios.config import SplitConfig
from lorarag.scenarios.from_corpus import corpus_scenarios
from lorarag.scenarios.kb_records import QAItem
from lorarag.scenarios.kb_splits import HELD_OUT, split_by_fact
from lorarag.scenarios.kb_wordings import as_tested, held_out, plan_wordings, training_groups, wording_summary
from lorarag.scenarios.records import PresentedChunk, Scenario
from lorarag.study.leaks import check_dev_wordings, check_written_wordings
from lorarag.study.paraphrase import Paraphrase, single_wording, with_paraphrases
from lorarag.train.config import SFTConfig
from lorarag.train.sft import LeakError, build_rows, knowledge_row, leak_check, write_sft

TOWNS = ["Elmira", "Dunmore", "Kelso", "Arden", "Brill", "Corfe", "Dover", "Eske", "Flint", "Garth", "Holt", "Ivel"]
SPLIT = SplitConfig(seed=0, known_fraction=0.5, context_only_fraction=0.2)


def _kb(two_wordings: bool) -> tuple[list[Chunk], list[QAItem]]:
    chunks, items = [], []
    for i, town in enumerate(TOWNS):
        year = 1901 + 7 * i
        chunks.append(Chunk(f"c{i}", f"d{i}", f"{town}.md", f"The {town} lighthouse was first lit in {year}.", 0, 40))
        chunks.append(Chunk(f"x{i}", f"d{i}", f"{town}.md", f"The {town} market opens on Mondays.", 0, 30))
        items.append(
            QAItem(
                f"q{i:02d}",
                f"When was the {town} lighthouse first lit?",
                (str(year),),
                (f"c{i}",),
                wordings=(f"In which year did the {town} light start?",) if two_wordings else (),
            )
        )
    return chunks, items


def _asked(rows) -> list[str]:
    """The question of every user turn of `rows` (SFTRow or the JSON rows read back)."""
    msgs = [m for r in rows for m in (r.to_swift()["messages"] if hasattr(r, "to_swift") else r["messages"])]
    return [m["content"].rsplit("Question: ", 1)[-1] for m in msgs if m["role"] == "user"]


def test_two_wordings_hold_one_out_of_every_training_row_and_the_test_asks_it():
    chunks, items = _kb(two_wordings=True)
    groups = split_by_fact(items, SPLIT)
    plan = plan_wordings(groups, seed=3)
    known, dev = groups["known"], groups["known_dev"]
    assert set(plan) == {it.qid for it in known + dev} and len(known) >= 3 and dev
    for it in known + dev:
        p = plan[it.qid]
        assert p.how == "set" and p.held_out and p.test in it.all_wordings
        assert p.trained == tuple(w for w in it.all_wordings if w != p.test)
    # seeded and stable per item: the order of the file and the other items do not move it ...
    alone = plan_wordings({"known": list(reversed(known))}, seed=3)
    assert {q: p.test for q, p in alone.items()} == {it.qid: plan[it.qid].test for it in known}
    # ... the seed does, and over seeds either wording of an item can be the held-out one
    for it in known:
        assert {plan_wordings(groups, seed=s)[it.qid].test for s in range(12)} == set(it.all_wordings)

    rows, val, stats = build_rows(
        training_groups(groups, plan), chunks, SFTConfig(knowledge_repeats=2, rag_phrasings="all"), conflict_seed=0
    )
    asked = _asked(rows + val)
    assert not {p.test for p in plan.values()} & set(asked)
    for it in known + dev:  # the other wording is still taught closed-book, knowledge_repeats times
        assert sum(r.kind == "knowledge" and r.messages[1][1] == f"Question: {plan[it.qid].trained[0]}" for r in rows) == 2
    assert stats["wordings"] == {1: len(known) + len(dev)}  # the gate's dev facts hold one out as well
    test = corpus_scenarios(as_tested(known, plan), chunks, name="kb", knowledge="known")
    assert test and all(s.question == plan[s.fact_id.removeprefix("kb/")].test for s in test)
    held = [it for g in HELD_OUT for it in groups[g]]
    by_id = {c.chunk_id: c for c in chunks}
    passages = [p.text for s in test for p in s.presented if p.replaces]
    leak_check(rows + val, held, by_id, passages, held_out(plan))
    # trained in every wording (what the KB path did before): the check names the item
    every, _, _ = build_rows(groups, chunks, SFTConfig(), conflict_seed=0)
    with pytest.raises(LeakError, match=r"the held-out test wording of known q\d\d"):
        leak_check(every, held, by_id, passages, held_out(plan))


def test_a_wording_another_question_shares_is_never_the_held_out_one():
    a = QAItem("a", "Who built the Elmira pier?", ("Ada Moss",), ("c1",), wordings=("Who made the Elmira pier?",))
    b = QAItem("b", "who MADE the  Elmira pier?", ("Ada Moss",), ("c2",))  # a's second wording, case and spacing aside
    c = QAItem("c", "When did the pier open?", ("1911",), ("c3",), wordings=("When was the pier opened?",))
    d = QAItem("d", "When was the pier opened?", ("1912",), ("c4",), wordings=("When did the pier open?",))
    groups = {"known": [a, c], "known_dev": [b], "context_only": [], "unseen_dev": [], "unseen": [d]}
    for seed in range(8):
        plan = plan_wordings(groups, seed)
        assert plan["a"].test == a.question and plan["a"].trained == a.wordings  # b trains the other
        assert plan["c"].how == "trained" and plan["c"].trained == c.all_wordings  # d asks both of c's
        assert held_out(plan) == {a.question: "a"}


def test_a_single_wording_set_with_paraphrases_trains_them_and_tests_the_sets_own():
    chunks, items = _kb(two_wordings=False)
    groups = split_by_fact(items, SPLIT)
    known, dev = groups["known"], groups["known_dev"]
    rejected = known[0].qid  # every reply for it refused: it stays in its one, trained wording
    rows = [
        Paraphrase(
            it.qid,
            0,
            f"What year was the {it.question.split()[3]} lighthouse first lit?",
            "length" if it.qid == rejected else "",
        )
        for it in known + dev
    ]
    para = with_paraphrases(groups, rows)
    plan = plan_wordings(para, seed=0, generated={it.qid for it in single_wording(groups)})
    for it in known:
        p = plan[it.qid]
        assert p.test == it.question  # the set's own wording
        if it.qid == rejected:
            assert p.how == "trained" and p.trained == (it.question,)
        else:
            assert p.how == "paraphrase" and p.trained == (next(r.text for r in rows if r.qid == it.qid),)
    sft, val, _ = build_rows(training_groups(para, plan), chunks, SFTConfig(), conflict_seed=0)
    asked = set(_asked(sft + val))
    # the gate's dev facts are planned alike: the set's own wording held out, the generated one trained
    assert not set(held_out(plan)) & asked and set(held_out(plan)) == {it.question for it in known[1:] + dev}
    assert known[0].question in asked and all(plan[q].trained[0] in asked for q in held_out(plan).values())
    assert all(plan[it.qid].how == "paraphrase" and set(it.wordings) <= asked for it in para["known_dev"])
    assert wording_summary(plan, [it.qid for it in known]) == {
        "items": len(known),
        "held_out": len(known) - 1,
        "by": {"set": 0, "paraphrase": len(known) - 1, "trained": 1},
        "trained_wording": [rejected],
    }


def _results(names, qids):
    from tests.eval_fixtures import make_item

    gold, fake = "Reginald Punnett", "a district in Mozambique"
    return {
        n: [
            make_item(
                system=n,
                qid=f"kb/{q}/{s}/{k}",
                fact_id=f"kb/{q}",
                scenario=s,
                knowledge=k,
                gold_answers=(gold,),
                context_answer=gold if s == "consistent" else fake,
                answer=gold,
                verdict="supported" if n == "lora_rag" else None,
            )
            for q in qids
            for s in ("consistent", "factual_error")
            for k in ("known", "unknown")
        ]
        for n in names
    }


def test_without_a_second_wording_the_test_asks_a_trained_one_and_the_tables_say_so():
    from pathlib import Path

    from lorarag.core.config import load_config
    from lorarag.study.headline import headline_markdown
    from lorarag.trained.config import RunConfig

    _, items = _kb(two_wordings=False)
    groups = split_by_fact(items, SPLIT)
    plan = plan_wordings(groups, seed=0)
    known = [it.qid for it in groups["known"]]
    assert {p.how for p in plan.values()} == {"trained"} and held_out(plan) == {}
    assert training_groups(groups, plan) == groups
    record = wording_summary(plan, known)
    assert record["held_out"] == 0 and record["by"]["trained"] == len(known) and record["trained_wording"] == known

    cfg = load_config(Path(__file__).resolve().parent.parent / "configs/run/conflictnq-kb.yaml", RunConfig)
    results = _results(("base_rag", "lora_rag", "closed_book_lora", "memory_or_context"), known)
    md = headline_markdown(cfg, results, {"sft": {"wordings": {"1": len(known)}}, "test_wordings": record})
    lines = md.splitlines()
    base_vs_lora = [ln for ln in lines if ln.startswith("| factual_error | known")]
    assert len(base_vs_lora) == 2  # the base-vs-LoRA table and the table of every baseline
    assert all(ln.startswith("| factual_error | known (trained wording) |") for ln in base_vs_lora)
    assert any(ln.startswith("| consistent | unknown |") for ln in lines)  # never-learned cells: no label
    assert f"asked in a wording training used: {len(known)} (their cells say `trained wording`)" in md
    det = next(ln for ln in lines if ln.startswith("| factual_error | 0/"))
    assert det.split("|")[2].strip().endswith("(trained wording)") and "wording" not in det.split("|")[3]
    # some items held out, some not: the cell says how many of its items were trained in their wording
    part = {**record, "trained_wording": known[:2]}
    md = headline_markdown(cfg, results, {"sft": {}, "test_wordings": part})
    assert f"| factual_error | known (trained wording: 2 of {len(known)}) |" in md
    # none: no label
    md = headline_markdown(cfg, results, {"sft": {}, "test_wordings": {**record, "trained_wording": []}})
    assert "| factual_error | known |" in md and "trained wording)" not in md


def test_a_held_out_wording_in_a_written_row_or_a_dev_question_stops_the_run(tmp_path):
    wordings = {"In which year did the Kelso light start?": "q02"}
    clean = [knowledge_row("When was the Kelso lighthouse first lit?", "1915", "kb/q02")]
    leak = [knowledge_row("in which YEAR did the Kelso   light start?", "1915", "kb/q02")]
    leak_check(clean, (), {}, (), wordings)
    with pytest.raises(LeakError, match=r"row 0: the held-out test wording of known q02$"):
        leak_check(leak, (), {}, (), wordings)
    # as written: the val file holds the leak, the train file does not
    train, val = write_sft(clean, tmp_path / "train.jsonl"), write_sft(leak, tmp_path / "val.jsonl")
    cfg = SimpleNamespace(train=SimpleNamespace(dataset=str(train), val_dataset=str(val)))
    with pytest.raises(LeakError) as e:
        check_written_wordings(cfg, wordings)
    assert str(e.value).startswith(f"{val}: 1 leak(s)") and str(e.value).endswith("known q02")
    assert "\n" not in str(e.value)
    check_written_wordings(SimpleNamespace(train=SimpleNamespace(dataset=str(train), val_dataset=None)), wordings)
    dev = [
        Scenario(
            qid="kb/q07/consistent/w1",
            fact_id="kb/q07",
            question="In which year did the Kelso light start?",
            gold_answers=("1950",),
            relevant_ids=("c7",),
            scenario="consistent",
            presented=(PresentedChunk("c7", "text"),),
            context_answer="1950",
        )
    ]
    with pytest.raises(LeakError, match="dev item kb/q07/consistent/w1 asks the held-out test wording of known q02"):
        check_dev_wordings(dev, wordings)
    check_dev_wordings(dev, {})


def test_the_kb_stages_hold_out_wordings_and_record_how_many(tmp_path):
    """study/kb.py through KBSource on a small written set (half the lighthouse questions carry a
    paraphrase, the market questions one wording): no SFT row on disk and no dev question asks a
    held-out test wording, the test asks it, and the summary counts both kinds."""
    from lorarag.rag.records import read_jsonl
    from lorarag.scenarios.records import load_scenarios
    from lorarag.study.kb import read_summary
    from lorarag.study.kb_source import KBSource
    from lorarag.study.run_folder import Paths
    from lorarag.train.sft import read_sft
    from tests.test_run_kb_e2e import _in_tmp

    cfg = _in_tmp(tmp_path)
    # splits.seed 1: two known items hold out their second wording, one its first
    cfg = cfg.model_copy(
        update={
            "data": cfg.data.model_copy(update={"splits": SplitConfig(seed=1)}),
            "eval": cfg.eval.model_copy(update={"max_per_cell": None}),
        }
    )
    root = tmp_path / "runs" / cfg.name
    lines: list[str] = []
    src = KBSource(cfg, Paths(root))
    test, dev_known, dev_unseen = src.scenarios(lines.append, None)
    known = {it.qid: it for it in read_jsonl(root / "data/splits/known.jsonl", QAItem)}
    asked_known = {s.fact_id.removeprefix("kb/") for s in test if s.knowledge == "known"}
    two = sorted(q for q in asked_known if known[q].wordings)
    one = sorted(q for q in asked_known if not known[q].wordings)
    assert two and one
    record = read_summary(root)["test_wordings"]
    assert record == {
        "items": len(asked_known),
        "held_out": len(two),
        "by": {"set": len(two), "paraphrase": 0, "trained": len(one)},
        "trained_wording": one,
    }
    tested = {
        s.fact_id.removeprefix("kb/"): s.question
        for s in load_scenarios(root / "scenarios/test.jsonl")
        if s.knowledge == "known"
    }
    held = {tested[q] for q in two}
    assert all(tested[q] in known[q].all_wordings for q in two) and all(tested[q] == known[q].question for q in one)
    assert sum(tested[q] != known[q].question for q in two) == 2
    on_disk = [r for f in (cfg.train.dataset, cfg.train.val_dataset) for r in read_sft(f)]
    asked = set(_asked(on_disk))
    assert not held & asked and {tested[q] for q in one} <= asked
    assert all(set(known[q].all_wordings) - {tested[q]} <= asked for q in two)
    assert not held & {s.question for s in dev_known + dev_unseen}
    assert any(
        f"in a wording training never used: {len(two)} of {len(asked_known)}" in ln
        and ln.endswith(f"in a trained wording: {len(one)}")
        for ln in lines
    ), lines
    assert json.loads((root / "data/summary.json").read_text())["test_wordings"] == record


def test_real_conflictnq_holds_one_wording_of_every_known_fact_out():
    from lorarag.rag.config import ChunkerConfig
    from lorarag.scenarios.config import CorpusSource, QuestionSource
    from lorarag.scenarios.kb_corpus import load_corpus
    from lorarag.scenarios.kb_labels import map_labels
    from lorarag.scenarios.kb_questions import load_questions
    from tests.conftest import shared_data

    path = str(shared_data("conflictnq") / "val.jsonl")
    corpus = load_corpus(CorpusSource(kind="conflictnq", path=path), ChunkerConfig(chunk_size=5000))
    items, _ = map_labels(load_questions(QuestionSource(kind="conflictnq", path=path)), corpus)
    groups = split_by_fact(items, SplitConfig())
    plan = plan_wordings(groups, seed=0)
    known = groups["known"]
    assert all(len(it.all_wordings) == 2 for it in known) and {p.how for p in plan.values()} == {"set"}
    firsts = sum(plan[it.qid].test == it.question for it in known)
    assert 0 < firsts < len(known)  # the cleaned question for some, the raw NQ question for others
    rows, val, _ = build_rows(
        training_groups(groups, plan), corpus.chunks, SFTConfig(knowledge_repeats=1, distractors=0), conflict_seed=0
    )
    # one closed-book row per taught item: the known and the known-dev ones each keep a wording out
    assert sum(r.kind == "knowledge" for r in rows) == len(known) + len(groups["known_dev"])
    leak_check(
        rows + val, [it for g in HELD_OUT for it in groups[g]], {c.chunk_id: c for c in corpus.chunks}, (), held_out(plan)
    )


def test_a_known_dev_fact_is_asked_at_dev_only_in_the_wording_its_rows_leave_out(tmp_path):
    """The gate reads the memory in the test's condition. Unit: a `known_dev` item with two wordings is
    planned like a known one. Stages (study/kb.py through KBSource on ci-tiny's world, 8 organisations in 3
    wordings): every known-dev fact's held-out wording is in no SFT row on disk, its dev scenario asks
    that wording alone; a never-learned dev fact is asked in all 3."""
    from pathlib import Path

    from lorarag.study.kb_source import KBSource
    from lorarag.study.run_folder import Paths
    from lorarag.train.sft import read_sft
    from tests.test_world import world_run_config

    a = QAItem("a", "When was the Kelso light first lit?", ("1915",), ("c1",), wordings=("Kelso light: which year?",))
    plan = plan_wordings({"known_dev": [a]}, seed=0)
    assert plan["a"].how == "set" and plan["a"].test in a.all_wordings and held_out(plan) == {plan["a"].test: "a"}
    assert training_groups({"known_dev": [a]}, plan)["known_dev"][0].all_wordings == plan["a"].trained

    cfg = world_run_config(tmp_path)
    cfg = cfg.model_copy(update={"calibration": cfg.calibration.model_copy(update={"max_items": 100})})
    src = KBSource(cfg, Paths(Path(cfg.runs_dir) / cfg.name))
    _, dev_known, dev_unseen = src.scenarios(lambda _: None, None)
    plan = plan_wordings(src.kb.groups, cfg.data.splits.seed)
    dev = [it for it in src.kb.groups["known_dev"] if it.answers]
    assert dev and all(plan[it.qid].how == "set" and len(it.all_wordings) == 3 for it in dev)
    assert sorted((s.fact_id, s.question) for s in dev_known) == sorted((f"kb/{it.qid}", plan[it.qid].test) for it in dev)
    assert any(plan[it.qid].test != it.question for it in dev)  # seeded: not always the set's first wording
    on_disk = set(_asked([r for f in (cfg.train.dataset, cfg.train.val_dataset) for r in read_sft(f)]))
    assert not {plan[it.qid].test for it in dev} & on_disk
    assert all(set(plan[it.qid].trained) <= on_disk for it in dev)  # the other two are trained
    unseen = [it for it in src.kb.groups["unseen_dev"] if it.answers]
    assert sorted((s.fact_id, s.question) for s in dev_unseen) == sorted(
        (f"kb/{it.qid}", w) for it in unseen for w in it.all_wordings
    )
