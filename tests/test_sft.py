"""SFT data: contrastive pairs, context-only targets, parseable replies, split by fact, leak check."""

from __future__ import annotations

import json

import pytest

from lorarag.core.errors import RecordError
from lorarag.fallback.format import SYSTEM_CLOSED_BOOK, SYSTEM_RAG, parse_reply
from lorarag.scenarios.config import WorldConfig
from lorarag.scenarios.world import build_world
from lorarag.train.config import SFTConfig
from lorarag.train.sft import (
    LeakError,
    build_demo_data,
    build_rows,
    knowledge_row,
    leak_check,
    read_sft,
    write_sft,
)


@pytest.fixture(scope="module")
def data():
    world = build_world(WorldConfig(seed=2, n_orgs=20))
    rows, val = build_rows(world, SFTConfig(seed=0, knowledge_repeats=2))
    return world, rows, val


def _user(row):
    return dict(row.messages)["user"]


def _reply(row):
    return dict(row.messages)["assistant"]


def test_knowledge_rows_cover_known_facts_with_training_phrasings(data):
    world, rows, _ = data
    kn = [r for r in rows if r.kind == "knowledge"]
    assert len(kn) == len(world.by_group("known")) * 2 * 2  # 2 phrasings x knowledge_repeats 2
    facts = {f.fact_id: f for f in world.facts}
    for r in kn:
        f = facts[r.fact_id]
        assert f.group == "known" and r.messages[0] == ("system", SYSTEM_CLOSED_BOOK)
        assert _user(r) in (f"Question: {f.questions[0]}", f"Question: {f.questions[1]}")
        assert _reply(r) == f.value


def test_rag_replies_parse_and_follow_the_verdict_rules(data):
    world, rows, _ = data
    facts = {f.fact_id: f for f in world.facts + world.unanswerable}
    for r in (x for x in rows if x.kind == "rag"):
        assert r.messages[0] == ("system", SYSTEM_RAG)
        p = parse_reply(_reply(r))
        assert p.valid and p.verdict == r.verdict
        f = facts[r.fact_id]
        if f.group == "known" and f.value:
            assert p.memory == f.value and p.answer == f.value  # the LoRA answers the truth
        elif f.group == "context_only":
            assert p.memory == "unknown" and p.verdict in ("supported", "insufficient")
            assert p.answer == p.source or p.answer == "unknown"  # copies the source


def _sources(user: str) -> list[str]:
    return sorted(line.split("] ", 1)[1] for line in user.splitlines() if line.startswith("[S"))


def test_contrastive_pairs_share_question_and_form(data):
    """Each known fact: one supported and one conflicting row, same question, sources identical
    but for the value (the only way to tell them apart is to know the fact)."""
    world, rows, _ = data
    for f in world.by_group("known"):
        sup = [r for r in rows if r.fact_id == f.fact_id and r.verdict == "supported"]
        con = [r for r in rows if r.fact_id == f.fact_id and r.verdict == "conflicting"]
        assert len(sup) == len(con) == 1
        q = lambda r: _user(r).rsplit("Question: ", 1)[1]  # noqa: E731
        assert q(sup[0]) == q(con[0])
        fake = parse_reply(_reply(con[0])).source
        assert fake != f.value
        assert sorted(x.replace(fake, f.value) for x in _sources(_user(con[0]))) == _sources(_user(sup[0]))


def test_verdict_classes_are_balanced(data):
    _, rows, _ = data
    counts = {}
    for r in (x for x in rows if x.kind == "rag"):
        counts[r.verdict] = counts.get(r.verdict, 0) + 1
    assert set(counts) == {"supported", "conflicting", "outdated", "irrelevant", "insufficient"}
    assert max(counts.values()) <= 2.5 * min(counts.values())


def test_training_rows_pass_the_leak_check(data):
    world, rows, val = data
    leak_check(rows, world)
    held_out_orgs = {f.org for f in world.by_group("unknown", "unknown_dev")}
    assert not any(o in "".join(c for _, c in r.messages) for r in rows for o in held_out_orgs)
    with pytest.raises(LeakError):  # the val rows use the dev phrasing: the check must see it
        leak_check(val, world)


def test_leak_check_catches_a_held_out_phrasing_and_an_unknown_org(data):
    world, rows, _ = data
    known = world.by_group("known")[0]
    with pytest.raises(LeakError, match="held-out phrasing"):
        leak_check(rows + [knowledge_row(known.questions[3], known.value, known.fact_id)], world)
    unknown = world.by_group("unknown")[0]
    with pytest.raises(LeakError, match=unknown.org):
        leak_check(rows[:5] + [knowledge_row(unknown.questions[0], unknown.value, unknown.fact_id)], world)


def test_written_file_is_ms_swift_messages_and_bad_lines_are_rejected(tmp_path, data):
    world, rows, _ = data
    path = write_sft(rows[:7], tmp_path / "train.jsonl")
    back = read_sft(path)
    assert back == [r.to_swift() for r in rows[:7]]
    leak_check(back, world)  # works on the written dicts too
    path.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n", encoding="utf-8")
    with pytest.raises(RecordError, match="assistant"):
        read_sft(path)
    path.write_text("{not json\n", encoding="utf-8")
    with pytest.raises(RecordError, match=":1:"):
        read_sft(path)


def test_build_demo_data_writes_everything(tmp_path):
    paths = build_demo_data(WorldConfig(seed=0, n_orgs=8), SFTConfig(), tmp_path / "demo",
                            tmp_path / "demo/sft/train.jsonl", tmp_path / "demo/sft/val.jsonl")
    for key in ("corpus", "chunks", "scenarios_train", "scenarios_dev", "scenarios_test", "train", "val"):
        assert paths[key].exists(), key


def test_rag_phrasings_all_puts_every_type_on_both_phrasings():
    """rag_phrasings: all — each known fact gets the pair AND outdated/irrelevant on both phrasings."""
    world = build_world(WorldConfig(seed=2, n_orgs=20))
    alt, _ = build_rows(world, SFTConfig(seed=0, knowledge_repeats=2))
    both, _ = build_rows(world, SFTConfig(seed=0, knowledge_repeats=2, rag_phrasings="all"))
    f = world.by_group("known")[0]
    for verdict in ("supported", "conflicting", "irrelevant"):
        rows = [r for r in both if r.fact_id == f.fact_id and r.verdict == verdict]
        qs = {_user(r).rsplit("Question: ", 1)[1] for r in rows}
        assert qs == {f.questions[0], f.questions[1]}  # one row per training phrasing
        assert len([r for r in alt if r.fact_id == f.fact_id and r.verdict == verdict]) == 1
    # knowledge rows and unanswerable rows are not affected; leak check still holds
    assert [r for r in both if r.kind == "knowledge"].__len__() == [r for r in alt if r.kind == "knowledge"].__len__()
    leak_check(both, world)


def test_knowledge_phrasings_4_adds_closed_book_paraphrases_only():
    """knowledge_phrasings: 4 — closed-book rows also on phrasings 4 and 5; conflict rows unchanged."""
    world = build_world(WorldConfig(seed=2, n_orgs=20))
    two, _ = build_rows(world, SFTConfig(seed=0, knowledge_repeats=1))
    four, _ = build_rows(world, SFTConfig(seed=0, knowledge_repeats=1, knowledge_phrasings=4))
    f = world.by_group("known")[0]
    asked = {_user(r) for r in four if r.kind == "knowledge" and r.fact_id == f.fact_id}
    assert asked == {f"Question: {f.questions[i]}" for i in (0, 1, 4, 5)}
    assert len([r for r in four if r.kind == "knowledge"]) == 2 * len([r for r in two if r.kind == "knowledge"])
    assert sorted(_reply(r) for r in four if r.kind == "rag") == sorted(_reply(r) for r in two if r.kind == "rag")
    leak_check(four, world)  # dev (2) and test (3) phrasings stay out


def test_knowledge_phrasings_8_adds_four_more_closed_book_paraphrases():
    """knowledge_phrasings: 8 — closed-book rows on 0, 1, 4-9; conflict rows unchanged; with one
    repeat it has as many closed-book rows as 4 phrasings x 2 repeats (same compute, more wordings)."""
    world = build_world(WorldConfig(seed=2, n_orgs=20))
    four, _ = build_rows(world, SFTConfig(seed=0, knowledge_repeats=2, knowledge_phrasings=4))
    eight, _ = build_rows(world, SFTConfig(seed=0, knowledge_repeats=1, knowledge_phrasings=8))
    f = world.by_group("known")[0]
    asked = [_user(r) for r in eight if r.kind == "knowledge" and r.fact_id == f.fact_id]
    assert sorted(asked) == sorted(f"Question: {f.questions[i]}" for i in (0, 1, 4, 5, 6, 7, 8, 9))
    assert len([r for r in eight if r.kind == "knowledge"]) == len([r for r in four if r.kind == "knowledge"])
    assert sorted(_reply(r) for r in eight if r.kind == "rag") == sorted(_reply(r) for r in four if r.kind == "rag")
    leak_check(eight, world)


def test_a_further_test_wording_is_held_out_by_the_leak_check():
    """eval.test_phrasings [3, 7] with knowledge_phrasings 8 would train on phrasing 7: the leak
    check told of the run's test wordings refuses those rows; with 4 phrasings it passes."""
    world = build_world(WorldConfig(seed=2, n_orgs=20))
    eight, _ = build_rows(world, SFTConfig(seed=0, knowledge_repeats=1, knowledge_phrasings=8))
    with pytest.raises(LeakError, match="held-out phrasing"):
        leak_check(eight, world, (7,))
    four, _ = build_rows(world, SFTConfig(seed=0, knowledge_repeats=1, knowledge_phrasings=4))
    leak_check(four, world, (3, 7, 6, 8, 9))


def test_unknown_repeats_adds_closed_book_refusals_for_context_only_facts_only():
    """unknown_repeats: 1 — one closed-book "unknown" row per (context-only fact, closed-book
    phrasing); known facts' rows and the conflict-aware rows are the same multiset as without."""
    world = build_world(WorldConfig(seed=2, n_orgs=20))
    base, _ = build_rows(world, SFTConfig(seed=0, knowledge_repeats=1, knowledge_phrasings=4))
    refuse, _ = build_rows(world, SFTConfig(seed=0, knowledge_repeats=1, knowledge_phrasings=4, unknown_repeats=1))
    ctx = world.by_group("context_only")
    assert ctx, "the test world needs context-only facts"
    ref = [r for r in refuse if r.kind == "refusal"]
    assert len(ref) == len(ctx) * 4
    assert {r.fact_id for r in ref} == {f.fact_id for f in ctx}
    f = ctx[0]
    assert sorted(_user(r) for r in ref if r.fact_id == f.fact_id) == sorted(
        f"Question: {f.questions[i]}" for i in (0, 1, 4, 5))
    assert all(r.messages[0] == ("system", SYSTEM_CLOSED_BOOK) and _reply(r) == "unknown" for r in ref)
    rest = sorted(r.messages for r in refuse if r.kind != "refusal")
    assert rest == sorted(r.messages for r in base)
    leak_check(refuse, world)
    assert not [r for r in base if r.kind == "refusal"]


def test_phantom_orgs_are_refused_and_share_no_stem_with_any_world_organisation():
    """phantom_orgs: n — closed-book "unknown" rows for n organisations that exist nowhere: every
    attribute in every closed-book phrasing; no English stem prefix or Chinese character in common
    with a world organisation (so none resembles a held-out one); the other rows unchanged."""
    from lorarag.scenarios.world import phantom_questions

    world = build_world(WorldConfig(seed=0, n_orgs=30))
    base, _ = build_rows(world, SFTConfig(seed=0, knowledge_repeats=1, knowledge_phrasings=4))
    ph, _ = build_rows(world, SFTConfig(seed=0, knowledge_repeats=1, knowledge_phrasings=4, phantom_orgs=10))
    ref = [r for r in ph if r.kind == "refusal"]
    assert len(ref) == 10 * 5 * 4 and all(_reply(r) == "unknown" for r in ref)
    assert sorted(r.messages for r in ph if r.kind != "refusal") == sorted(r.messages for r in base)
    names = sorted({n for n, _ in phantom_questions(world, 10, 0)})
    assert len(names) == 10 and sum(not n.isascii() for n in names) == 2  # zh_fraction 0.2
    world_names = {f.org for f in world.facts}
    for n in names:
        if n.isascii():
            assert all(n[:3] != w[:3] for w in world_names if w.isascii())
        else:
            assert not set(n[:2]) & {c for w in world_names if not w.isascii() for c in w[:2]}
    assert all(any(n in _user(r) for n in names) for r in ref)
    leak_check(ph, world)


def test_too_many_phantom_orgs_is_a_one_line_config_error():
    """More phantom organisations than the vocabulary can name (up to ~150 with the 30 of the demo
    world) names the option, no traceback."""
    from lorarag.core.errors import ConfigError

    world = build_world(WorldConfig(seed=0, n_orgs=30))
    with pytest.raises(ConfigError, match=r"^sft\.phantom_orgs: 400 is too many for this world \(cannot name "):
        build_rows(world, SFTConfig(seed=0, phantom_orgs=400))
