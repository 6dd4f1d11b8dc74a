"""The overlap check between the train step and the gate: a run whose flawed test context is in an
SFT row on disk stops with one line naming the item; the table goes to run.json and data/."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from lorarag.core.errors import ConfigError
from lorarag.fallback.format import SYSTEM_RAG, SourceText, rag_user_turn
from lorarag.scenarios.records import PresentedChunk, Scenario
from lorarag.study.leaks import check_test_contexts, read_overlap
from lorarag.study.run_folder import Paths
from lorarag.train.config import PreferenceConfig

OLD = "In 2021, Vesova Dynamics had its headquarters in Tallinn, on the harbour front."
GOLD = "Vesova Dynamics has its headquarters in Tartu, where most of its engineering staff work."


def _rows(path, *contexts):
    with path.open("w", encoding="utf-8") as f:
        for q, texts in contexts:
            user = rag_user_turn(q, [SourceText(t) for t in texts])
            f.write(
                json.dumps(
                    {
                        "messages": [
                            {"role": "system", "content": SYSTEM_RAG},
                            {"role": "user", "content": user},
                            {"role": "assistant", "content": "memory: Tartu | answer: Tartu"},
                        ]
                    }
                )
                + "\n"
            )


def _setup(tmp_path, trained_texts):
    train, val = tmp_path / "train.jsonl", tmp_path / "val.jsonl"
    _rows(train, ("Where is Vesova Dynamics based?", trained_texts))
    _rows(val, ("Where is Vesova Dynamics based?", (GOLD,)))
    cfg = SimpleNamespace(
        train=SimpleNamespace(dataset=str(train), val_dataset=str(val), preference=PreferenceConfig()), systems=[]
    )
    paths = Paths(tmp_path / "run")
    paths.root.mkdir(parents=True)
    (paths.root / "run.json").write_text(json.dumps({"git_sha": "x"}))
    test = [
        Scenario(
            qid="org1/hq/p3/outdated",
            fact_id="org1/hq",
            question="Which city is Vesova Dynamics in?",
            gold_answers=("Tartu",),
            relevant_ids=("gold",),
            scenario="outdated",
            presented=(PresentedChunk("gold~old2021", OLD, replaces="gold"),),
            context_answer="Tallinn",
            cluster="org1",
        ),
        Scenario(
            qid="org1/hq/p3/consistent",
            fact_id="org1/hq",
            question="Which city is Vesova Dynamics in?",
            gold_answers=("Tartu",),
            relevant_ids=("gold",),
            scenario="consistent",
            presented=(PresentedChunk("gold", GOLD),),
            context_answer="Tartu",
            cluster="org1",
        ),
    ]
    owners = {
        "Where is Vesova Dynamics based?": ("org1/hq", "org1"),
        "Which city is Vesova Dynamics in?": ("org1/hq", "org1"),
    }
    return cfg, paths, test, owners


def test_a_flawed_test_context_in_a_training_row_stops_the_run(tmp_path):
    cfg, paths, test, owners = _setup(tmp_path, (OLD, GOLD))
    with pytest.raises(
        ConfigError,
        match=r"test item org1/hq/p3/outdated: its outdated context is one the SFT rows "
        r"show, verbatim or as an edited twin \(1 of 1 outdated \(known\) "
        r"items; verbatim 1\)",
    ):
        check_test_contexts(cfg, paths, test, owners, {"gold": GOLD}, lambda _: None)
    # the table is on disk all the same, for the report and for the user
    assert [(c.scenario, c.verbatim) for c in read_overlap(paths.root)] == [("consistent", 1), ("outdated", 1)]


def test_a_clean_run_records_the_table_in_run_json_and_says_what_consistent_means(tmp_path):
    cfg, paths, test, owners = _setup(tmp_path, (GOLD,))
    lines: list[str] = []
    table = check_test_contexts(cfg, paths, test, owners, {"gold": GOLD}, lines.append)
    assert {(c.scenario, c.edited) for c in table} == {("consistent", 1), ("outdated", 0)}
    info = json.loads((paths.root / "run.json").read_text())
    assert info["git_sha"] == "x" and [r["scenario"] for r in info["test_context_overlap"]] == ["consistent", "outdated"]
    assert "consistent 1 (the KB itself), flawed: verbatim 0, edited twins 0" in lines[0]


def test_a_wrong_value_training_labelled_for_the_same_fact_stops_the_run_in_any_passage(tmp_path):
    """Another passage (no twin of the test's) stating the test's older value under an `outdated` verdict
    for the same fact is a leak of the label; the same value labelled for another fact is not."""
    cfg, paths, test, owners = _setup(tmp_path, (GOLD,))
    other = "Tallinn was where the firm kept its first offices, long ago."
    owners["Where did Orbis Freight start?"] = ("org2/hq", "org2")

    def write(question):
        user = rag_user_turn(question, [SourceText(other)])
        reply = "memory: Tartu | source: Tallinn | verdict: outdated | answer: Tartu"
        with open(cfg.train.dataset, "a", encoding="utf-8") as f:
            f.write(
                json.dumps(
                    {
                        "messages": [
                            {"role": "system", "content": SYSTEM_RAG},
                            {"role": "user", "content": user},
                            {"role": "assistant", "content": reply},
                        ]
                    }
                )
                + "\n"
            )

    write("Where did Orbis Freight start?")
    table = check_test_contexts(cfg, paths, test, owners, {"gold": GOLD}, lambda _: None)
    assert {(c.scenario, c.edited, c.claim) for c in table} == {("consistent", 1, 0), ("outdated", 0, 0)}
    write("Where is Vesova Dynamics based?")
    with pytest.raises(
        ConfigError,
        match=r"test item org1/hq/p3/outdated: the wrong value its outdated context "
        r"asserts is one an SFT row of the same fact labels outdated \(1 of 1",
    ):
        check_test_contexts(cfg, paths, test, owners, {"gold": GOLD}, lambda _: None)
    assert [(c.scenario, c.edited, c.claim) for c in read_overlap(paths.root)] == [("consistent", 1, 0), ("outdated", 0, 1)]
