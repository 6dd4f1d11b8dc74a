"""Policy variants of LoRA-RAG: routes replayed from recorded verdicts (eval/reroute.py), their
config rules, their stamp and their headline table (hand-computed cells). The replay against the
same policy evaluated through the model is in tests/test_run_e2e.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from lorarag.core.errors import RecordError
from lorarag.eval.reroute import reroute
from lorarag.eval.runner import load_results, write_results
from lorarag.fallback.config import FallbackConfig, PolicyConfig
from lorarag.study.baseline_tables import variant_table
from lorarag.trained.config import SystemConfig
from tests.eval_fixtures import make_item


def _lora(qid: str, verdict: str, doubt: float | None, memory: str | None, source: str | None, route: str, **over) -> object:
    probs = () if doubt is None else (("supported", 1.0 - doubt), ("conflicting", doubt))
    answer = {"context": source or "", "fallback": memory or "", "abstain": ""}[route]
    return make_item(
        system="lora_rag",
        qid=qid,
        fact_id=qid,
        verdict=verdict,
        flag_score=doubt,
        verdict_probs=probs,
        route=route,
        memory_answer=memory,
        context_answer_model=source,
        answer=answer,
        abstained=route == "abstain",
        **over,
    )


# records routed by the verdict where the gate rejected the memory (the replays below route the same way)
VERDICT = PolicyConfig(no_memory="verdict")

# (qid, verdict, doubt, memory after the gate, source value, route under the verdict policy)
ITEMS = [
    ("doubt-no-memory", "conflicting", 0.9, None, "90 km/h", "context"),  # unknown_conflict: context
    ("doubt-memory", "outdated", 0.8, "50 km/h", "70 km/h", "fallback"),
    ("weak-doubt", "conflicting", 0.3, None, "90 km/h", "context"),  # below flag_threshold 0.5
    ("supported", "supported", 0.01, "50 km/h", "50 km/h", "context"),
    ("empty-no-memory", "irrelevant", 0.99, None, "none", "abstain"),
    ("invalid", "invalid", None, None, None, "abstain"),
]


def test_a_replay_under_the_default_policy_gives_back_the_recorded_routes_and_answers():
    items = [_lora(*x) for x in ITEMS]
    again = reroute(items, VERDICT, "lora_rag")
    assert [(r.route, r.answer, r.abstained) for r in again] == [(r.route, r.answer, r.abstained) for r in items]


def test_abstaining_on_doubt_without_memory_changes_only_those_items():
    """unknown_conflict: abstain moves the one item with doubt >= 0.5 and a gated-out memory."""
    items = [_lora(*x) for x in ITEMS]
    out = reroute(items, PolicyConfig(no_memory="verdict", unknown_conflict="abstain"), "lora_rag_abstain")
    assert [r.route for r in out] == ["abstain", "fallback", "context", "context", "abstain", "abstain"]
    assert (out[0].answer, out[0].abstained) == ("", True)
    assert [r.answer for r in out[1:4]] == ["50 km/h", "90 km/h", "50 km/h"]
    assert {r.system for r in out} == {"lora_rag_abstain"}
    assert out[0].notes[-1] == "route replayed from lora_rag: context -> abstain"
    # a lower doubt threshold acts on the weak doubt too; an unreadable reply read as the context
    # gives its empty source value (the reply had none), as the model path would
    low = reroute(
        items, PolicyConfig(no_memory="verdict", flag_threshold=0.2, unknown_conflict="abstain", on_invalid="context"), "v"
    )
    assert [r.route for r in low] == ["abstain", "fallback", "abstain", "context", "abstain", "context"]
    assert (low[5].answer, low[5].abstained) == ("", False)


def test_a_result_without_a_verdict_is_not_replayed():
    with pytest.raises(RecordError, match="no verdict or route to replay"):
        reroute([make_item(system="base_rag")], PolicyConfig(), "v")


def test_policy_belongs_to_lora_rag_and_leaves_other_stamps_as_they_were():
    from lorarag.study.evaluate import replay_source

    with pytest.raises(ValueError, match="policy: routes lora_rag's verdicts"):
        SystemConfig(name="b", kind="base_rag", policy=PolicyConfig())
    plain = SystemConfig(name="lora_rag", kind="lora_rag", context="presented")
    variant = SystemConfig(
        name="abstain", kind="lora_rag", context="presented", policy=PolicyConfig(unknown_conflict="abstain")
    )
    retrieved = SystemConfig(name="lora_rag_retrieved", kind="lora_rag")
    assert not plain.is_variant and variant.is_variant
    done = {"lora_rag_retrieved": None, "lora_rag": None}
    assert replay_source(variant, done, [retrieved, plain, variant]) is plain  # same context, no own policy
    assert replay_source(variant, {"lora_rag_retrieved": None}, [retrieved, plain, variant]) is None
    assert replay_source(plain, done, [plain]) is None
    # results stamped before `policy` existed keep their stamp: the field is left out when unset
    assert "policy" not in plain.model_dump(exclude={"policy"} if plain.policy is None else None)


def test_replayed_results_are_written_under_their_stamp_and_read_back(tmp_path):
    items = reroute([_lora(*x) for x in ITEMS], PolicyConfig(no_memory="verdict", unknown_conflict="abstain"), "v")
    out = tmp_path / "v"
    write_results(items, out, stamp={"policy": "abstain"})
    assert [r.route for r in load_results(out)] == [r.route for r in items]
    assert (out / "run.json").is_file()
    # the same stamp reads them back; another clears and rewrites them
    again = write_results(items, out, stamp={"policy": "abstain"})
    assert [r.qid for r in again] == [r.qid for r in items]
    other = reroute([_lora(*x) for x in ITEMS], VERDICT, "v")
    write_results(other, out, stamp={"policy": "context"})
    assert [r.route for r in load_results(out)] == [x[5] for x in ITEMS]


def test_variant_table_gives_the_paired_difference_and_the_moved_routes():
    """4 factual-error known items. LoRA-RAG right on 1, 2, 3 (0.75); the variant abstains on 3, so
    right on 1, 2 (0.50): −0.25, one item answered otherwise."""
    fe = {"scenario": "factual_error"}
    lora = [
        _lora("q1", "conflicting", 0.9, "50 km/h", "90 km/h", "fallback", **fe),
        _lora("q2", "outdated", 0.8, "50 km/h", "90 km/h", "fallback", **fe),
        _lora("q3", "conflicting", 0.9, None, "50 km/h", "context", **fe),  # doubt, memory gated out
        _lora("q4", "supported", 0.1, "50 km/h", "90 km/h", "context", **fe),
    ]
    variant = reroute(lora, PolicyConfig(no_memory="verdict", unknown_conflict="abstain"), "abstain")
    cfg = SimpleNamespace(
        eval=SimpleNamespace(bootstrap=1000, seed=0),
        fallback=FallbackConfig(),
        systems=[
            SystemConfig(name="lora_rag", kind="lora_rag", context="presented"),
            SystemConfig(
                name="abstain", kind="lora_rag", context="presented", policy=PolicyConfig(unknown_conflict="abstain")
            ),
        ],
    )
    lines = variant_table(
        cfg, {"lora_rag": lora, "abstain": variant}, "presented", "lora_rag", lambda r: float(r.answer == "50 km/h")
    )
    assert "abstain: unknown_conflict=abstain." in lines[2]
    row = next(ln for ln in lines if ln.startswith("| factual_error | known |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[:5] == ["factual_error", "known", "4", "0.75", "0.50"]
    assert cells[5].startswith("-0.25 [") and cells[6] == "1"
    assert variant_table(cfg, {"lora_rag": lora}, "presented", "lora_rag", lambda r: 0.0) == []


def test_a_variants_policy_is_its_delta_over_the_runs_policy_and_reloads_the_same(tmp_path):
    """fallback.policy sets flag_threshold 0.6; the variant names unknown_conflict only, so it keeps
    0.6 (not PolicyConfig's default 0.5), and a dumped config reads back to the same policy."""
    from lorarag.core.config import dump_config, load_config
    from lorarag.trained.config import RunConfig

    repo = __import__("pathlib").Path(__file__).resolve().parent.parent
    path = tmp_path / "variant.yaml"
    path.write_text(
        f"base: {repo / 'configs/run/ci-tiny.yaml'}\n"
        "fallback: {policy: {flag_threshold: 0.6}}\n"
        "systems:\n"
        "  - {name: base_rag, kind: base_rag}\n"
        "  - {name: lora_rag, kind: lora_rag}\n"
        "  - {name: abstain, kind: lora_rag, policy: {unknown_conflict: abstain}}\n"
    )
    cfg = load_config(path, RunConfig)
    policy = cfg.systems[2].policy
    assert (policy.flag_threshold, policy.unknown_conflict, policy.on_invalid) == (0.6, "abstain", "abstain")
    again = tmp_path / "again.yaml"
    again.write_text(dump_config(cfg))
    assert load_config(again, RunConfig).systems[2].policy == policy


def test_the_replys_own_answer_field_replaces_the_routes_where_it_holds_a_value():
    """`answer: reply`: the model said `supported` yet answered its memory; the reply's answer field
    is taken over the source value the route names. Where that field says unknown, the route's field
    stays; an abstention stays empty."""
    from lorarag.fallback.policy import final_answer

    reply = PolicyConfig(answer="reply")
    assert final_answer("context", "New Zealand", "French Polynesia", "New Zealand", reply) == "New Zealand"
    assert final_answer("context", "New Zealand", "French Polynesia", "New Zealand", PolicyConfig()) == "French Polynesia"
    assert final_answer("fallback", "1966", "1970", "unknown", reply) == "1966"
    assert final_answer("abstain", "1966", "1970", "1966", reply) == ""
    raw = "memory: New Zealand | source: French Polynesia | verdict: supported | answer: New Zealand"
    item = _lora("nz", "supported", 0.02, "New Zealand", "French Polynesia", "context", raw_output=raw)
    (out,) = reroute([item], reply, "reply")
    assert (out.route, out.answer) == ("context", "New Zealand") and item.answer == "French Polynesia"


def test_read_records_replay_to_the_verdict_routing_and_back_never_from_verdict_records():
    """Under `no_memory: read` the items with a valid verdict and no memory (doubt-no-memory,
    weak-doubt, empty-no-memory) were answered by the base model's reading. Routed by the verdict,
    they take the source field (90 km/h twice) and abstain on the irrelevant one, with the reading's
    citations gone; the items with a memory and the invalid one keep their routes. A `read` replay
    keeps the reading; it cannot be replayed from records that were routed by the verdict."""
    from lorarag.fallback.policy import READ_NOTE

    read_qids = {"doubt-no-memory", "weak-doubt", "empty-no-memory"}
    items = [_lora(*x) for x in ITEMS]
    items = [
        r
        if r.qid not in read_qids
        else r.__class__(
            **{
                **r.__dict__,
                "answer": "read: 90 km/h [S1]",
                "abstained": False,
                "route": "context",
                "cited": ("S1",),
                "notes": (*r.notes, READ_NOTE),
            }
        )
        for r in items
    ]
    by_verdict = reroute(items, VERDICT, "lora_rag_verdict")
    assert [(r.route, r.answer, r.abstained) for r in by_verdict] == [
        (x[5], {"context": x[4] or "", "fallback": x[3] or "", "abstain": ""}[x[5]], x[5] == "abstain") for x in ITEMS
    ]
    assert all(r.cited == () and READ_NOTE not in r.notes for r in by_verdict if r.qid in read_qids)
    read = PolicyConfig(no_memory="read")
    same = reroute(items, read, "lora_rag_again")
    assert [(r.route, r.answer, r.cited) for r in same] == [(r.route, r.answer, r.cited) for r in items]
    with pytest.raises(RecordError, match="doubt-no-memory: the variant reads the sources"):
        reroute([_lora(*x) for x in ITEMS], read, "v")
    # verdict_read (the default) keeps the reading only where the verdict abstains without a memory
    routed = reroute(items, PolicyConfig(), "lora_rag_routed")
    assert [(r.qid, r.route, r.answer) for r in routed if r.qid in read_qids] == [
        ("doubt-no-memory", "context", "90 km/h"),
        ("weak-doubt", "context", "90 km/h"),
        ("empty-no-memory", "context", "read: 90 km/h [S1]"),
    ]


def test_a_reading_variant_takes_base_rags_answer_where_the_record_holds_no_reading():
    """Records routed by the verdict, replayed under `read`: the three valid items without a memory
    take base RAG's answer on the same item (its citations too), under `verdict_read` only the one
    the verdict abstained on; the items with a memory and the invalid one keep their routes. An item
    to read with no base RAG answer given refuses."""
    items = [_lora(*x) for x in ITEMS]
    base = {
        x[0]: make_item(system="base_rag", qid=x[0], fact_id=x[0], answer=f"base {x[0]} [S2]", cited=("S2",)) for x in ITEMS
    }
    read = reroute(items, PolicyConfig(no_memory="read"), "lora_rag_read", base)
    want = {
        "doubt-no-memory": "base doubt-no-memory [S2]",
        "weak-doubt": "base weak-doubt [S2]",
        "empty-no-memory": "base empty-no-memory [S2]",
    }
    assert [(r.route, r.answer, r.abstained) for r in read] == [
        ("context", want[x[0]], False) if x[0] in want else (x[5], r0.answer, x[5] == "abstain")
        for x, r0 in zip(ITEMS, items)
    ]
    assert all(r.cited == ("S2",) for r in read if r.qid in want)
    routed = reroute(items, PolicyConfig(), "lora_rag_routed", base)
    assert [r.answer for r in routed] == [
        "base empty-no-memory [S2]" if r0.qid == "empty-no-memory" else r0.answer for r0 in items
    ]
    with pytest.raises(RecordError, match="empty-no-memory: the variant reads the sources"):
        reroute(items, PolicyConfig(), "v", {k: v for k, v in base.items() if k != "empty-no-memory"})


def test_a_reading_is_kept_only_where_its_own_words_are_in_the_sources():
    """Hand-counted: the words of the answer less the question's and function words must occur in the
    sources at `read_support`; an answer with no word of its own (a restatement) is unsupported."""
    from lorarag.fallback.policy import supported

    q, src = "When was the Kelso lighthouse first lit?", ["The Kelso lighthouse was first lit in 1901."]
    assert supported(q, "It was first lit in 1901.", src, 1.0)  # own words: {1901}: in the sources
    assert not supported(q, "The Kelso lighthouse has 40 keepers.", src, 1.0)  # {40, keepers}: 0 of 2
    assert supported(q, "The Kelso lighthouse was lit in 1901 by keepers.", src, 0.5)  # {1901, keepers}: 1 of 2
    assert not supported(q, "The Kelso lighthouse was lit in 1901 by keepers.", src, 0.6)
    assert not supported(q, "The Kelso lighthouse was first lit.", src, 0.0)  # nothing of its own
    assert supported(q, "anything", src, None)  # no check
    assert supported("青石古塔建成于哪一年？", "1750年", ["青石古塔建成于1750年。"], 1.0)  # {1750}: CJK-aware
    assert not supported("青石古塔每年接待多少游客？", "三万人", ["青石古塔建成于1750年。"], 1.0)


def test_read_support_turns_an_unsupported_reading_into_an_abstention_in_a_replay():
    """Records routed by the verdict; under verdict_read the irrelevant-verdict item is read from base
    RAG. With read_support 1.0 a reading whose own words are not in the item's sources abstains, one
    that the sources hold is kept; without read_support both readings stand."""
    from lorarag.fallback.policy import UNSUPPORTED_NOTE

    texts = ("The Kelso lighthouse was first lit in 1901.",)
    items = [_lora(*x, question="When was the Kelso lighthouse first lit?", final_texts=texts) for x in ITEMS]
    base = {x[0]: make_item(system="base_rag", qid=x[0], answer="In 1901.") for x in ITEMS}
    invented = {**base, "empty-no-memory": make_item(system="base_rag", qid="empty-no-memory", answer="In 1887.")}
    kept = reroute(items, PolicyConfig(read_support=1.0), "v", base)
    (r,) = [x for x in kept if x.qid == "empty-no-memory"]
    assert (r.route, r.answer, r.abstained) == ("context", "In 1901.", False)
    withheld = reroute(items, PolicyConfig(read_support=1.0), "v", invented)
    (r,) = [x for x in withheld if x.qid == "empty-no-memory"]
    assert (r.route, r.answer, r.abstained) == ("abstain", "", True) and UNSUPPORTED_NOTE in r.notes
    # the withheld record replayed without the check reads again (its own answer is gone)
    (again,) = [x for x in reroute(withheld, PolicyConfig(), "w", invented) if x.qid == "empty-no-memory"]
    assert (again.answer, again.abstained) == ("In 1887.", False) and UNSUPPORTED_NOTE not in again.notes
    assert [x.answer for x in reroute(items, PolicyConfig(), "v", invented)] == [
        "In 1887." if x.qid == "empty-no-memory" else x.answer for x in items
    ]


def test_a_replay_keeps_the_override_of_a_confident_memory_unless_the_variant_turns_it_off():
    """Rule 5 in a replay: the record's CONFIDENT_NOTE says the gate was sure of the memory; a variant
    whose route is `context` takes the memory where it differs from the sources, `override: false`
    leaves the sources' answer."""
    from lorarag.fallback.policy import CONFIDENT_NOTE, OVERRIDE_NOTE

    sure = _lora("sure", "supported", 0.1, "50 km/h", "90 km/h", "fallback", notes=(CONFIDENT_NOTE, OVERRIDE_NOTE))
    agree = _lora("agree", "supported", 0.1, "50 km/h", "50 km/h", "context", notes=(CONFIDENT_NOTE,))
    unsure = _lora("unsure", "supported", 0.1, "50 km/h", "90 km/h", "context")
    on = reroute([sure, agree, unsure], VERDICT, "v")
    assert [(r.route, r.answer) for r in on] == [("fallback", "50 km/h"), ("context", "50 km/h"), ("context", "90 km/h")]
    assert OVERRIDE_NOTE in on[0].notes and OVERRIDE_NOTE not in on[1].notes
    off = reroute([sure, agree, unsure], VERDICT.model_copy(update={"override": False}), "v")
    assert [(r.route, r.answer) for r in off] == [("context", "90 km/h"), ("context", "50 km/h"), ("context", "90 km/h")]
    assert all(OVERRIDE_NOTE not in r.notes for r in off)


def test_a_memory_the_reply_calls_insufficient_is_disowned_and_read_unless_the_config_keeps_it():
    """The LoRA is taught `insufficient` only where it has no memory: a kept memory under that verdict is
    one it does not stand by. By default the item is routed as a gated one (base RAG's reading, kept only
    where the sources hold it: an invented count abstains); `insufficient: kept` answers from the memory
    as before. An `irrelevant` verdict keeps its memory either way."""
    from lorarag.fallback.policy import DISOWNED_NOTE, memory_in_use

    assert not memory_in_use("insufficient", True, PolicyConfig())
    assert memory_in_use("insufficient", True, PolicyConfig(insufficient="kept"))
    assert memory_in_use("irrelevant", True, PolicyConfig()) and not memory_in_use("irrelevant", False, PolicyConfig())
    texts = ("The Kelso tower was built in 1750.",)
    q = "How many visitors does the Kelso tower receive each year?"
    items = [
        _lora("unanswerable", "insufficient", 0.95, "40,000", "none", "fallback", question=q, final_texts=texts),
        _lora("known-irrelevant", "irrelevant", 0.97, "1750", "none", "fallback", question=q, final_texts=texts),
    ]
    base = {x.qid: make_item(system="base_rag", qid=x.qid, answer="About 20,000 a year.") for x in items}
    disowned, irrelevant = reroute(items, PolicyConfig(read_support=1.0), "v", base)
    assert (disowned.route, disowned.answer, disowned.abstained) == ("abstain", "", True)
    assert DISOWNED_NOTE in disowned.notes and disowned.memory_answer == "40,000"  # the record keeps the memory
    assert (irrelevant.route, irrelevant.answer) == ("fallback", "1750") and DISOWNED_NOTE not in irrelevant.notes
    kept = reroute(items, PolicyConfig(read_support=1.0, insufficient="kept"), "k", base)
    assert [(r.route, r.answer) for r in kept] == [("fallback", "40,000"), ("fallback", "1750")]
    # without read_support the disowned item takes the reading, as a gated memory would
    (read, _) = reroute(items, PolicyConfig(), "r", base)
    assert (read.route, read.answer) == ("context", "About 20,000 a year.")
