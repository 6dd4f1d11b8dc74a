"""The runner resumes after SIGKILL with every qid exactly once (a real subprocess is killed)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lorarag.core.errors import RecordError
from lorarag.eval.records import load_results
from lorarag.eval.runner import run_eval
from lorarag.rag.records import Answer, Chunk, Retrieved, Trace
from lorarag.scenarios.records import PresentedChunk, Scenario, save_scenarios

REPO = Path(__file__).resolve().parent.parent

# The child: a fake system (the system is not the code under test) that is slow per batch, so
# the parent can kill the run mid-way.
CHILD = r"""
import sys, time
sys.path.insert(0, sys.argv[3])
from lorarag.scenarios.records import load_scenarios
from lorarag.eval.runner import run_eval
from tests.test_runner_resume import EchoSystem
run_eval(EchoSystem(delay=float(sys.argv[4])), load_scenarios(sys.argv[1]), sys.argv[2],
         batch_size=3, progress=False)
"""


class EchoSystem:
    """Answers each scenario with its context's value (stands in for a model)."""

    name = "echo"

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.calls = 0

    def answer_scenarios(self, items):
        self.calls += len(items)
        time.sleep(self.delay)
        out = []
        for s in items:
            ret = tuple(
                Retrieved(Chunk(p.chunk_id, "d", "d", p.text, 0, len(p.text)), 1.0, i) for i, p in enumerate(s.presented, 1)
            )
            tr = Trace(
                question=s.question,
                retrieved=ret,
                verdict="supported",
                verdict_score=0.9,
                verdict_probs=(("supported", 0.9), ("conflicting", 0.1)),
                route="context",
                timings_s=(("generate", 0.01),),
            )
            out.append(Answer(s.question, s.context_answer or "", cited=("S1",), trace=tr))
        return out


def scenarios(n: int) -> list[Scenario]:
    """n consistent scenarios with one presented chunk each."""
    return [
        Scenario(
            qid=f"q{i:03d}",
            fact_id=f"f{i}",
            question=f"Value of fact {i}?",
            gold_answers=(f"v{i}",),
            relevant_ids=(f"kb{i}",),
            scenario="consistent",
            presented=(PresentedChunk(f"kb{i}", f"Fact {i} is v{i}."),),
            context_answer=f"v{i}",
        )
        for i in range(n)
    ]


def _rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def test_sigkill_mid_run_then_resume(tmp_path):
    items = scenarios(60)
    spath = tmp_path / "scen.jsonl"
    save_scenarios(spath, items)
    out = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(spath), str(out), str(REPO), "0.2"], cwd=REPO, env=env, start_new_session=True
    )
    res = out / "results.jsonl"
    deadline = time.time() + 60
    while time.time() < deadline and (not res.exists() or len(_rows(res)) < 9):
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    done_before = len(res.read_text().splitlines())
    assert 9 <= done_before < 60, "the kill must land mid-run"
    assert (out / "run.json").exists()

    system = EchoSystem()
    got = run_eval(system, items, out, batch_size=7, progress=False)
    rows = _rows(res)
    qids = [r["qid"] for r in rows]
    assert sorted(qids) == [s.qid for s in items]  # nothing lost, no duplicates
    assert system.calls == 60 - done_before  # only the missing ones were answered
    assert [r.qid for r in got] == [s.qid for s in items]
    assert (out / "resumes.jsonl").exists()
    # A second resume has nothing to do.
    again = EchoSystem()
    run_eval(again, items, out, batch_size=7, progress=False)
    assert again.calls == 0 and len(_rows(res)) == 60


def test_torn_tail_is_cut_and_redone(tmp_path):
    items = scenarios(10)
    out = tmp_path / "run"
    run_eval(EchoSystem(), items[:4], out, batch_size=2, progress=False)
    res = out / "results.jsonl"
    with res.open("a") as fh:  # what SIGKILL inside a write leaves behind
        fh.write('{"system": "echo", "qid": "q004", "fact')
    system = EchoSystem()
    run_eval(system, items, out, batch_size=4, progress=False)
    assert system.calls == 6
    rows = load_results(out)
    assert sorted(r.qid for r in rows) == [s.qid for s in items]
    r0 = rows[0]
    assert r0.flag_score == pytest.approx(0.1) and r0.route == "context" and r0.final_ids == ("kb0",)
    assert r0.retrieved_ids == ("kb0",) and r0.target_ids == ("kb0",) and r0.latency_s == pytest.approx(0.01)


def test_refuses_mixed_systems_and_duplicate_qids(tmp_path):
    items = scenarios(3)
    run_eval(EchoSystem(), items, tmp_path, progress=False)

    class Other(EchoSystem):
        name = "other"

    with pytest.raises(RecordError, match="other"):
        run_eval(Other(), items, tmp_path, progress=False)
    with pytest.raises(RecordError, match="duplicate qid"):
        run_eval(EchoSystem(), items + items[:1], tmp_path / "b", progress=False)


def test_a_changed_stamp_is_refused_naming_the_keys_or_restarted(tmp_path):
    from lorarag.eval.runner import ResumeMismatch

    items = scenarios(4)
    out = tmp_path / "run"
    stamp = {"generator": {"model": "m", "max_new_tokens": 64}, "items": "abc"}
    run_eval(EchoSystem(), items[:2], out, progress=False, stamp=stamp)
    assert json.loads((out / "stamp.json").read_text()) == stamp
    before = (out / "results.jsonl").read_text()
    changed = {"generator": {"model": "m", "max_new_tokens": 32}, "items": "abc"}
    with pytest.raises(ResumeMismatch, match=r"generator.max_new_tokens differ\); start over with --fresh") as ei:
        run_eval(EchoSystem(), items, out, progress=False, stamp=changed)
    assert "\n" not in str(ei.value)
    assert (out / "results.jsonl").read_text() == before  # nothing of the user's run touched
    # the same stamp resumes: only the two missing items are answered
    same = EchoSystem()
    run_eval(same, items, out, progress=False, stamp=stamp)
    assert same.calls == 2
    # `lorarag run`'s rule: a changed stamp starts that system over, keeping files not the runner's
    (out / "notes.txt").write_text("mine")
    again = EchoSystem()
    got = run_eval(again, items, out, progress=False, stamp=changed, on_change="restart")
    assert again.calls == 4 and len(got) == 4 and (out / "notes.txt").read_text() == "mine"
    assert json.loads((out / "stamp.json").read_text()) == changed
    assert not (out / "resumes.jsonl").exists()  # a fresh start, not a resume


def test_results_without_a_stamp_are_not_resumed_onto(tmp_path):
    from lorarag.eval.runner import ResumeMismatch, claim_run_dir, clear_run_dir

    run_eval(EchoSystem(), scenarios(2), tmp_path, progress=False)  # an older run: no stamp.json
    with pytest.raises(ResumeMismatch, match="no stamp.json: results from an older version"):
        claim_run_dir(tmp_path, {"a": 1})
    assert sorted(clear_run_dir(tmp_path)) == ["results.jsonl", "run.json"]  # no config was given
    assert claim_run_dir(tmp_path, {"a": 1}) is False  # nothing left to resume onto: accepted
    with pytest.raises(ResumeMismatch, match="is a file"):
        run_eval(EchoSystem(), scenarios(2), tmp_path / "stamp.json", progress=False)


def test_results_reader_refuses_other_systems_and_duplicates(tmp_path):
    from lorarag.eval.records import save_results

    run_eval(EchoSystem(), scenarios(3), tmp_path, progress=False)
    rows = load_results(tmp_path)
    save_results(tmp_path / "dup.jsonl", [rows[0], rows[1], rows[0]])
    with pytest.raises(RecordError, match=r"dup.jsonl:3: duplicate result for qid 'q000' \(first at line 1\)"):
        load_results(tmp_path / "dup.jsonl")
    from dataclasses import replace

    save_results(tmp_path / "mixed.jsonl", [rows[0], replace(rows[1], system="other")])
    with pytest.raises(RecordError, match=r"mixed.jsonl:2: a result of system 'other' in a file of 'echo'"):
        load_results(tmp_path / "mixed.jsonl")
    line = json.loads((tmp_path / "results.jsonl").read_text().splitlines()[0])
    (tmp_path / "typed.jsonl").write_text(json.dumps({**line, "gold_answers": "v0"}) + "\n")
    with pytest.raises(RecordError, match=r"typed.jsonl:1: gold_answers: expected a list of strings"):
        load_results(tmp_path / "typed.jsonl")
