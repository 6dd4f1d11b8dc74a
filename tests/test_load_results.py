"""`lorarag.load_results(run)`: a run's items as a pandas DataFrame, one row per (system, item), with
`correct` by the headline's own rule and the attribution class; checked by hand on a tiny run."""

from __future__ import annotations

import pytest

import lorarag
from tests.eval_fixtures import make_item
from tests.tiny_run import ci_config, report_run

G, W = "50 km/h", "70 km/h"


def _items(system: str, fixed: bool) -> list:
    """Five items, each with an answer whose verdict is plain by hand (see the test)."""
    return [
        make_item(system=system, qid="q1", cluster="orgA", answer=G),
        make_item(
            system=system,
            qid="q2",
            cluster="orgA",
            scenario="factual_error",
            context_answer=W,
            answer=G if fixed else W,
            route="fallback" if fixed else "context",
        ),
        make_item(system=system, qid="q3", cluster="orgB", knowledge="unknown", answer="", abstained=True),
        make_item(
            system=system,
            qid="q4",
            cluster="orgB",
            knowledge="unknown",
            gold_answers=(),
            answer="",
            abstained=True,
            context_answer=None,
        ),
        make_item(
            system=system, qid="q5", cluster="orgC", gold_answers=("Ada Moss",), answer="Moss", context_answer="Ada Moss"
        ),
    ]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("load")
    results = {"base_rag": _items("base_rag", False), "lora_rag": _items("lora_rag", True)}
    report_run(tmp / "contains", results)
    report_run(tmp / "f1", results, cfg=ci_config(answer_metric="token_f1"))
    return tmp


def test_a_tiny_run_loads_into_pandas_with_correct_and_attribution(runs):
    df = lorarag.load_results(runs / "contains")
    assert {
        "system",
        "qid",
        "scenario",
        "knowledge",
        "cluster",
        "correct",
        "attribution",
        "answer",
        "gold",
        "route",
        "verdict",
    } <= set(df.columns)
    assert len(df) == 10 and set(df.system) == {"base_rag", "lora_rag"}
    got = {(r.system, r.qid): (r.correct, r.attribution) for r in df.itertuples()}
    # by hand: the gold answer given; the source's wrong value repeated; an abstention on an
    # answerable item; an abstention on an unanswerable one; half the gold name (not contained)
    assert got[("base_rag", "q1")] == (True, "correct")
    assert got[("base_rag", "q2")] == (False, "conflict_missed")
    assert got[("lora_rag", "q2")] == (True, "correct")
    assert got[("base_rag", "q3")] == (False, "abstained_wrongly")
    assert got[("base_rag", "q4")] == (True, "abstained_correctly")
    assert got[("base_rag", "q5")] == (False, "generation_failure")
    assert df.loc[(df.system == "base_rag") & (df.qid == "q2"), "cluster"].item() == "orgA"
    assert df.loc[df.qid == "q4", "gold"].map(list).tolist() == [[], []]
    # the table a user makes first: accuracy per system and cell
    acc = df.groupby(["system", "scenario"])["correct"].mean()
    assert acc[("lora_rag", "factual_error")] == 1.0 and acc[("base_rag", "factual_error")] == 0.0
    # the report folder and the file itself load the same
    assert lorarag.load_results(runs / "contains/report").equals(df)
    assert lorarag.load_results(runs / "contains/report/items.jsonl").equals(df)


def test_correct_follows_the_runs_answer_metric(runs):
    """Scored by token F1, "Moss" for "Ada Moss" (F1 = 2·1·0.5/1.5 = 0.67 >= 0.5) is right, where the
    contains rule says wrong: items.jsonl counts as the run's headline does."""
    df = lorarag.load_results(runs / "f1")
    q5 = df[df.qid == "q5"]
    assert q5.correct.tolist() == [True, True] and set(q5.attribution) == {"correct"}


def test_a_run_without_a_report_is_a_clear_error(tmp_path):
    from lorarag.core.errors import UserError

    with pytest.raises(UserError, match="no items.jsonl .*the report step writes it"):
        lorarag.load_results(tmp_path)
