"""SFT rows of the demo world written as a knowledge base (train/sft.build_rows on the splits by
fact): closed-book rows in the trained wordings, contrastive pairs, context-only targets, parseable
replies, and the leak check on the rows (held-out facts, their chunks, test passages, held-out
wordings)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from lorarag.core.errors import RecordError
from lorarag.fallback.format import SYSTEM_CLOSED_BOOK, SYSTEM_RAG, UNKNOWN, parse_reply
from lorarag.scenarios.config import SplitConfig
from lorarag.scenarios.from_corpus import corpus_scenarios
from lorarag.scenarios.kb_splits import GROUPS, HELD_OUT, TAUGHT, split_by_fact
from lorarag.scenarios.kb_wordings import as_tested, held_out, plan_wordings, training_groups
from lorarag.train.config import SFTConfig
from lorarag.train.sft import LeakError, build_rows, knowledge_row, leak_check, rag_row, read_sft, shown, write_sft
from tests.test_world import load_world_kb

SFT = SFTConfig(seed=0, knowledge_repeats=2)


class World:
    """The world's KB, its split (seed 0), the wording plan and the test's passages, as study/kb.py has them."""

    def __init__(self, folder, wordings: int = 3) -> None:
        self.kb = load_world_kb(folder, seed=2, n_orgs=20, wordings=wordings)
        self.groups = split_by_fact(self.kb.items, SplitConfig(seed=0))
        self.plan = plan_wordings(self.groups, seed=0)
        self.train = training_groups(self.groups, self.plan)
        common = dict(name="kb", outdated=self.kb.older)
        test = corpus_scenarios(as_tested(self.groups["known"], self.plan), self.kb.chunks, knowledge="known", **common)
        test += corpus_scenarios(self.groups["unseen"], self.kb.chunks, knowledge="unknown", **common)
        self.test = test
        self.passages = [p.text for s in test for p in s.presented if p.replaces]
        self.held = [it for g in HELD_OUT for it in self.groups[g]]
        self.by_id = {c.chunk_id: c for c in self.kb.chunks}

    def rows(self, cfg: SFTConfig = SFT, **kw):
        return build_rows(self.train, self.kb.chunks, cfg, conflict_seed=0, outdated=self.kb.older, **kw)

    def group_of(self, fact_id: str) -> str:
        qid = fact_id.removeprefix("kb/")
        return next(g for g in GROUPS if any(it.qid == qid for it in self.groups[g]))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    w = World(tmp_path_factory.mktemp("world"))
    rows, val, stats = w.rows(test_passages=w.passages)
    return w, rows, val, stats


def _user(row):
    return dict(row.messages)["user"]


def _reply(row):
    return dict(row.messages)["assistant"]


def test_the_split_is_by_organisation(data):
    """20 organisations, one unit each (cluster): known round(0.5 x 20) = 10, of which round(0.2 x 10) = 2
    dev; context-only round(0.1 x 20) = 2; of the 8 never-learned round(0.2 x 8) = 2 dev."""
    w = data[0]
    orgs = {g: {it.cluster for it in w.groups[g]} for g in GROUPS}
    assert {g: len(v) for g, v in orgs.items()} == {
        "known": 8,
        "known_dev": 2,
        "context_only": 2,
        "unseen_dev": 2,
        "unseen": 6,
    }
    assert all(len(w.groups[g]) == 6 * len(orgs[g]) for g in GROUPS)  # 5 facts + 1 unanswerable each


def test_knowledge_rows_cover_taught_facts_in_their_trained_wordings(data):
    """10 taught organisations x 5 facts x 2 trained wordings (3 less the held-out one) x 2 repeats = 200;
    the unanswerable questions and the context-only facts get none."""
    w, rows, _, stats = data
    kn = [r for r in rows if r.kind == "knowledge"]
    assert len(kn) == 200 and stats["wordings"] == {2: 60}  # 10 x (5 facts + 1 unanswerable) taught items
    for r in kn:
        f = w.kb.fact(r.fact_id)
        assert w.group_of(r.fact_id) in TAUGHT and r.messages[0] == ("system", SYSTEM_CLOSED_BOOK)
        assert _user(r) in {f"Question: {q}" for q in w.plan[f.fact_id].trained}
        assert _user(r) != f"Question: {w.plan[f.fact_id].test}" and _reply(r) == f.value


def test_rag_replies_parse_and_follow_the_verdict_rules(data):
    w, rows, _, _ = data
    for r in (x for x in rows if x.kind == "rag"):
        assert r.messages[0] == ("system", SYSTEM_RAG)
        p = parse_reply(_reply(r))
        assert p.valid and p.verdict == r.verdict
        f, group = w.kb.fact(r.fact_id), w.group_of(r.fact_id)
        if group in TAUGHT and f.value:
            assert p.memory == f.value and p.answer == f.value  # the LoRA answers the truth
        elif group in TAUGHT:  # an unanswerable question: nothing to remember, nothing in the sources
            assert (p.memory, p.verdict) == (UNKNOWN, "insufficient")
        else:
            assert group == "context_only" and p.memory == UNKNOWN and p.verdict in ("supported", "insufficient")
            assert p.answer == p.source or p.answer == UNKNOWN  # copies the source


def _sources(user: str) -> list[str]:
    return sorted(line.split("] ", 1)[1] for line in user.splitlines() if line.startswith("[S"))


def test_contrastive_pairs_share_question_and_form(data):
    """Each taught fact: one supported and one conflicting row, same question, sources identical but for
    the value (the only way to tell them apart is to know the fact). A pair whose factual error is a test
    passage (the same value drawn twice) loses that row: `same_as_test` counts it, and nothing else (the
    known facts' outdated rows show the older version the test does not)."""
    w, rows, _, stats = data
    taught = [it for g in TAUGHT for it in w.train[g] if it.answers]
    unpaired = 0
    for it in taught:
        f = w.kb.fact(it.qid)
        sup = [r for r in rows if r.fact_id == f"kb/{it.qid}" and r.verdict == "supported"]
        con = [r for r in rows if r.fact_id == f"kb/{it.qid}" and r.verdict == "conflicting"]
        assert len(sup) == 1 and len(con) <= 1
        if not con:
            unpaired += 1
            continue
        q = lambda r: _user(r).rsplit("Question: ", 1)[1]  # noqa: E731
        assert q(sup[0]) == q(con[0])
        fake = parse_reply(_reply(con[0])).source
        (pc,) = [p for p in con[0].scenario.presented if p.replaces]
        assert fake != f.value and pc.text == f.statement().replace(f.value, fake) and pc.text in _user(con[0])
        # the other sources are the consistent row's distractors (one may state the fake value of its own)
        assert (
            sorted(f.statement() if p.replaces else p.text for p in con[0].scenario.presented)
            == sorted(p.text for p in sup[0].scenario.presented)
            == _sources(_user(sup[0]))
        )
    assert stats["same_as_test"] == unpaired and unpaired < 0.1 * len(taught)


def test_verdict_classes_by_hand(data):
    """Without the test's passages to avoid: taught 10 x 5 facts give 50 supported, 50 conflicting, 50
    irrelevant and 10 x 4 outdated (the founding year has no older version), their 10 unanswerable
    questions 10 insufficient; context-only 2 x 5 facts copy the source (consistent and factual error:
    20 supported) or find nothing (irrelevant, unanswerable: 10 + 2 insufficient). With them, the 40
    outdated rows stay: each fact has two older versions, and training shows the one the test does not
    (8 known organisations x 4 facts: the test's outdated contexts, none in a row)."""
    w, rows, _, stats = data
    plain, _, plain_stats = w.rows()
    count = lambda rs: Counter(r.verdict or r.kind for r in rs)  # noqa: E731
    assert count(plain) == {
        "knowledge": 200,
        "supported": 70,
        "conflicting": 50,
        "irrelevant": 50,
        "outdated": 40,
        "insufficient": 22,
    }
    assert plain_stats["same_as_test"] == 0
    got = count(rows)
    assert {k: got[k] for k in ("supported", "irrelevant", "insufficient", "outdated")} == {
        "supported": 70,
        "irrelevant": 50,
        "insufficient": 22,
        "outdated": 40,
    }
    assert got["conflicting"] == 50 - stats["same_as_test"]
    tested = {shown(p.text) for t in w.test if t.scenario == "outdated" for p in t.presented if p.replaces}
    assert len(tested) == 8 * 4 + 6 * 4  # the known and the unseen organisations' facts with a history
    trained = [r for r in rows if r.verdict == "outdated"]
    assert not [r for r in trained for p in r.scenario.presented if p.replaces and shown(p.text) in tested]


def test_training_rows_pass_the_leak_check_and_never_name_a_held_out_organisation(data):
    w, rows, val, _ = data
    leak_check(rows + val, w.held, w.by_id, w.passages, held_out(w.plan))
    held_orgs = {w.kb.fact(it.qid).org for it in w.held}
    assert len(held_orgs) == 8  # unseen_dev 2 + unseen 6 organisations
    assert not [o for r in rows + val for o in held_orgs if o in "".join(c for _, c in r.messages)]


def test_leak_check_catches_each_kind_of_held_out_data(data):
    w, rows, _, _ = data
    unseen = next(it for it in w.groups["unseen"] if it.answers)
    known = w.groups["known"][0]
    check = lambda extra: leak_check(rows + [extra], w.held, w.by_id, w.passages, held_out(w.plan))  # noqa: E731
    with pytest.raises(LeakError, match=f"the question of held-out {unseen.qid}"):
        check(knowledge_row(unseen.wordings[-1], unseen.answers[0], "x"))
    with pytest.raises(LeakError, match=f"the held-out test wording of known {known.qid}"):
        check(knowledge_row(w.plan[known.qid].test, known.answers[0], known.qid))
    showing = next(r for r in rows if r.kind == "rag" and r.verdict == "supported" and r.scenario.knowledge == "known")
    (own,) = showing.scenario.relevant_ids

    def swap(text):
        shown = tuple(p.__class__(p.chunk_id, text if p.chunk_id == own else p.text) for p in showing.scenario.presented)
        return showing.scenario.__class__(**{**showing.scenario.__dict__, "presented": shown})

    with pytest.raises(LeakError, match=f"the chunk answering held-out {unseen.qid}"):
        check(rag_row(swap(w.by_id[unseen.relevant_ids[0]].text), knows=True))
    fe = next(s for s in w.test if s.scenario == "factual_error")
    with pytest.raises(LeakError, match="a test scenario's passage"):
        check(rag_row(swap(next(p.text for p in fe.presented if p.replaces)), knows=True))


def test_written_file_is_ms_swift_messages_and_bad_lines_are_rejected(tmp_path, data):
    w, rows, _, _ = data
    path = write_sft(rows[:7], tmp_path / "train.jsonl")
    back = read_sft(path)
    assert back == [r.to_swift() for r in rows[:7]]
    leak_check(back, w.held, w.by_id, w.passages, held_out(w.plan))  # works on the written dicts too
    path.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n", encoding="utf-8")
    with pytest.raises(RecordError, match="assistant"):
        read_sft(path)
    path.write_text("{not json\n", encoding="utf-8")
    with pytest.raises(RecordError, match=":1:"):
        read_sft(path)


def test_rag_phrasings_all_puts_every_context_on_every_trained_wording(data):
    """rag_phrasings: all — each taught fact gets the pair AND the irrelevant context on both trained
    wordings; `alternate` one of each; closed-book rows are not affected."""
    w, alt, _, _ = data
    both, _, _ = w.rows(SFTConfig(seed=0, knowledge_repeats=2, rag_phrasings="all"), test_passages=w.passages)
    it = w.train["known"][0]
    for verdict in ("supported", "irrelevant"):
        rows = [r for r in both if r.fact_id == f"kb/{it.qid}" and r.verdict == verdict]
        assert {_user(r).rsplit("Question: ", 1)[1] for r in rows} == set(w.plan[it.qid].trained)
        assert len([r for r in alt if r.fact_id == f"kb/{it.qid}" and r.verdict == verdict]) == 1
    assert sum(r.kind == "knowledge" for r in both) == sum(r.kind == "knowledge" for r in alt)
    leak_check(both, w.held, w.by_id, w.passages, held_out(w.plan))


def test_more_world_wordings_add_closed_book_wordings_only(tmp_path):
    """world.wordings 6 instead of 3: each taught question is trained closed-book in 5 wordings instead
    of 2 (one held out), so 50 facts x 5 x 2 repeats = 500 rows; the conflict-aware rows are as many."""
    three, six = World(tmp_path / "three"), World(tmp_path / "six", wordings=6)
    rows3, _, _ = three.rows()
    rows6, _, stats6 = six.rows()
    assert sum(r.kind == "knowledge" for r in rows6) == 500 and stats6["wordings"] == {5: 60}
    assert Counter(r.verdict for r in rows6 if r.kind == "rag") == Counter(r.verdict for r in rows3 if r.kind == "rag")
    leak_check(rows6, six.held, six.by_id, (), held_out(six.plan))
