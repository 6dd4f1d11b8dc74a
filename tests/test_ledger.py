"""The test-split ledger (study/ledger.py): every read of a test split recorded, counted per recipe,
and a read under a recipe other than the split's first refused without --reread-test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lorarag.core.config import load_config
from lorarag.core.errors import UserError
from lorarag.scenarios.kb_records import QAItem
from lorarag.study.ledger import (
    LEDGER,
    Reads,
    Split,
    SplitLedger,
    eval_ledger,
    is_test_file,
    note_reads,
    reads_note,
    recipe_hash,
    split_hash,
)
from lorarag.trained.config import RunConfig

REPO = Path(__file__).resolve().parent.parent


def _cfg() -> RunConfig:
    return load_config(REPO / "configs/run/ci-tiny.yaml", RunConfig)


def test_the_recipe_leaves_out_names_paths_and_seeds_but_not_settings():
    cfg = _cfg()
    h = recipe_hash(cfg)
    renamed = cfg.model_copy(
        update={
            "name": "ci-tiny-seed43",
            "runs_dir": "elsewhere",
            "seed": 5,
            "train": cfg.train.model_copy(update={"seed": 43, "run_name": "x-seed43", "dataset": "other/train.jsonl"}),
            "eval": cfg.eval.model_copy(update={"seed": 9}),
        }
    )
    assert recipe_hash(renamed) == h  # `lorarag seeds` reads the split under one recipe
    changed = cfg.model_copy(update={"eval": cfg.eval.model_copy(update={"max_per_cell": 3})})
    assert recipe_hash(changed) != h
    lr = cfg.model_copy(update={"train": cfg.train.model_copy(update={"swift": {**cfg.train.swift, "learning_rate": 5e-4}})})
    assert recipe_hash(lr) != h


def test_the_split_key_is_its_facts_in_any_order():
    a = QAItem(qid="q1", question="Who runs Acme?", answers=("Ann",))
    b = QAItem(qid="q2", question="Where is Acme?", answers=("Oslo",))
    key = split_hash({"known": [a], "unseen": [b]})
    assert split_hash({"known": [b], "unseen": [a], "train": [a]}) == key  # other groups are not the test split
    assert split_hash({"known": [a], "unseen": [QAItem(qid="q2", question="Where is Acme?", answers=("Bergen",))]}) != key


def test_reads_are_counted_and_another_recipe_needs_reread_test(tmp_path):
    path = tmp_path / LEDGER
    split = [Split("abc", "the KB's test facts")]
    first = SplitLedger(path, "recipe-1", split)
    first.check()  # nothing recorded yet
    assert first.record(tmp_path / "run-a") == [Reads("the KB's test facts", 1, 1)]
    assert first.record(tmp_path / "run-a") == [Reads("the KB's test facts", 1, 1)]  # a resume: the same read
    SplitLedger(path, "recipe-1", split).check()  # the same recipe again (another seed, a resume): allowed
    assert SplitLedger(path, "recipe-1", split).record(tmp_path / "run-b")[0].reads == 2
    other = SplitLedger(path, "recipe-2", split)
    with pytest.raises(UserError, match=r"first read under another recipe \(run .*run-a.*pass --reread-test"):
        other.check()
    other.check(reread=True)
    reads = other.record(tmp_path / "run-c")
    assert reads[0].text() == "the KB's test facts: test split read 3 times under 2 recipes"
    assert Reads("x", 1, 1).text() == "x: test split read 1 time under 1 recipe"
    # another split in the same ledger is counted apart
    assert SplitLedger(path, "recipe-2", [Split("def", "conflictnq test.jsonl")]).counts()[0].reads == 0
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [x["recipe"] for x in lines] == ["recipe-1", "recipe-1", "recipe-2"]
    assert set(lines[0]) == {"data", "split", "recipe", "git_sha", "time", "run", "command"}
    path.write_text(path.read_text() + "not json\n")
    with pytest.raises(UserError, match=r"\.test-ledger\.jsonl:4: not a JSON line"):
        other.counts()


def test_the_commit_stamped_is_the_one_the_process_started_from(tmp_path):
    """A commit made while a long job runs is not the code it imported: the stamp (run.json, every
    ledger line) stays the first one read, and a clean tree stays clean."""
    import subprocess

    from lorarag.core.runinfo import git_sha

    def git(*args: str) -> str:
        cmd = ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args]
        return subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, check=True).stdout.strip()

    git("init", "-q")
    (tmp_path / "a.txt").write_text("1")
    git("add", "a.txt")
    git("commit", "-qm", "one")
    first = git("rev-parse", "HEAD")
    assert git_sha(tmp_path) == first
    (tmp_path / "a.txt").write_text("2")
    git("commit", "-qam", "two")
    assert git("rev-parse", "HEAD") != first and git_sha(tmp_path) == first


def test_the_headline_note_comes_from_the_run_summary(tmp_path):
    root = tmp_path / "run"
    (root / "data").mkdir(parents=True)
    (root / "data" / "summary.json").write_text(json.dumps({"documents": 3}))
    note_reads(root, [Reads("the KB's test facts", 4, 2)])
    from lorarag.study.kb import read_summary

    summary = read_summary(root)
    assert summary["documents"] == 3
    assert reads_note(summary) == [
        "the KB's test facts: test split read 4 times under 2 recipes (the test ledger, study/ledger.py)."
    ]
    assert reads_note({}) == []
    from lorarag.study.headline import headline_markdown

    assert "- the KB's test facts: test split read 4 times under 2 recipes" in headline_markdown(_cfg(), {}, summary)
    note_reads(tmp_path / "no-summary", [Reads("x", 1, 1)])  # a run without a summary gets none written
    assert not (tmp_path / "no-summary").exists()


def test_eval_reads_a_scenario_file_named_test_into_the_ledger_beside_its_run_folder(tmp_path):
    from lorarag.eval.config import EvalConfig

    assert is_test_file("runs/x/scenarios/test.jsonl") and is_test_file("conflictnq-test.jsonl")
    assert not is_test_file("dev.jsonl") and not is_test_file("latest.jsonl") and not is_test_file("contest.jsonl")
    scen = tmp_path / "test.jsonl"
    scen.write_text('{"qid": "q1"}\n')
    cfg = EvalConfig(scenarios=str(scen), system={"kind": "base_rag"}, out_dir=str(tmp_path / "runs" / "e1"))
    led = eval_ledger(cfg)
    assert led is not None and led.path == tmp_path / "runs" / LEDGER
    moved = cfg.model_copy(update={"out_dir": str(tmp_path / "runs" / "e2"), "seed": 3})
    assert eval_ledger(moved).recipe == led.recipe  # another output folder and seed: the same recipe
    dev = tmp_path / "dev.jsonl"
    dev.write_text("")
    assert eval_ledger(cfg.model_copy(update={"scenarios": str(dev)})) is None


@pytest.mark.slow
def test_a_run_under_another_recipe_is_refused_before_training(tmp_path, monkeypatch):
    """`lorarag run` checks the ledger once the split is built, before any training: refused under a
    recipe other than the split's first, let through with --reread-test."""
    from lorarag.study import pipeline
    from lorarag.study.kb_source import KBSource
    from lorarag.study.run_folder import Paths
    from tests.test_run_kb_e2e import _in_tmp

    cfg = _in_tmp(tmp_path)
    key = split_hash(KBSource(cfg, Paths(Path(cfg.runs_dir) / cfg.name)).kb.groups)
    ledger = Path(cfg.runs_dir) / LEDGER
    ledger.write_text(json.dumps({"data": key, "recipe": "another", "run": "runs/old", "time": "then"}) + "\n")

    class Trained(Exception):
        pass

    def train(*args, **kwargs):
        raise Trained

    monkeypatch.setattr(pipeline, "train_or_reuse", train)
    with pytest.raises(UserError, match="pass --reread-test"):
        pipeline.run(cfg, echo=lambda _: None)
    with pytest.raises(Trained):
        pipeline.run(cfg, echo=lambda _: None, reread_test=True)
    assert len(ledger.read_text().splitlines()) == 1  # recorded when the evaluation starts, not before


def test_lorarag_eval_refuses_a_test_file_first_read_under_another_recipe(tmp_path, cli):
    from lorarag.scenarios.records import PresentedChunk, Scenario, save_scenarios

    scen = tmp_path / "data" / "test.jsonl"
    save_scenarios(
        scen,
        [
            Scenario(
                "q1", "f1", "Limit?", ("50",), ("kb1",), "consistent", (PresentedChunk("kb1", "The limit is 50."),), "50"
            )
        ],
    )
    run = tmp_path / "run.yaml"
    run.write_text(f"base: {REPO / 'configs/run/ci-tiny.yaml'}\nruns_dir: {tmp_path / 'runs'}\n", encoding="utf-8")
    cfg = tmp_path / "eval.yaml"
    cfg.write_text(
        f"scenarios: {scen}\ncomponents: {run}\nsystem: {{kind: base_rag, name: b}}\nout_dir: {tmp_path / 'runs' / 'e'}\n"
    )
    (tmp_path / "runs").mkdir()
    first = {"data": eval_ledger_key(scen), "recipe": "another", "run": "runs/old", "time": "then"}
    (tmp_path / "runs" / LEDGER).write_text(json.dumps(first) + "\n")
    code, _, err = cli("eval", cfg)
    assert code == 2 and err.strip().splitlines()[-1].startswith("error: ") and "pass --reread-test" in err
    assert not (tmp_path / "runs" / "e" / "results.jsonl").exists()  # refused before any model or write


def eval_ledger_key(path: Path) -> str:
    from lorarag.study.ledger import file_hash

    return file_hash(path)
