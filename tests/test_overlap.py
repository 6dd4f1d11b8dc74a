"""Test contexts that training showed: verbatim, edited twins (token alignment) and, for
irrelevant contexts, the (question's fact, chunk) pair; counted on rows as written to disk."""

from __future__ import annotations

from lorarag.fallback.format import SYSTEM_RAG, SourceText, rag_user_turn
from lorarag.scenarios.records import PresentedChunk, Scenario
from lorarag.train.overlap import TrainingSources, context_passages, leaking, overlap_markdown, overlap_table

OLD = (
    "In 2019 the Vesova Dynamics board moved the company headquarters from the harbour district "
    "of Tallinn to a new campus in Tartu, where it has stayed since."
)
NEW = OLD.replace("2019", "2021")  # word 2 of 27 changed
OTHER = "Brask Logistics runs forty warehouses along the Baltic coast and employs about two thousand people."


def row(question: str, *texts: str) -> dict:
    user = rag_user_turn(question, [SourceText(t) for t in texts])
    return {
        "messages": [
            {"role": "system", "content": SYSTEM_RAG},
            {"role": "user", "content": user},
            {"role": "assistant", "content": "memory: x | source: y | verdict: supported | answer: x"},
        ]
    }


FACT_OF = {
    "Where is Vesova Dynamics based?": "vesova/hq",
    "Where does Vesova Dynamics have its head office?": "vesova/hq",
    "How many warehouses does Brask run?": "brask/warehouses",
}


def owner(question: str):
    fact = FACT_OF.get(question)
    return fact, fact and fact.split("/")[0]


def item(qid: str, scenario: str, question: str, texts: tuple[str, ...], value: str | None, fact: str) -> Scenario:
    return Scenario(
        qid=qid,
        fact_id=fact,
        question=question,
        gold_answers=("Tartu",),
        relevant_ids=("c",),
        scenario=scenario,
        presented=tuple(PresentedChunk(f"c{i}", t) for i, t in enumerate(texts)),
        context_answer=value,
        cluster=fact.split("/")[0],
    )


def test_verbatim_near_and_pair_overlaps_are_counted_per_cell():
    rows = [row("Where is Vesova Dynamics based?", OLD, OTHER)]
    src = TrainingSources(rows, owner)
    test = [
        # the outdated passage shown verbatim in training
        item("a", "outdated", "Where does Vesova Dynamics have its head office?", (OLD,), "Tartu", "vesova/hq"),
        # a copy with the year changed: 27 of its 28 tokens kept in order (0.96 >= 0.8): a near copy,
        # never verbatim
        item("b", "factual_error", "Where does Vesova Dynamics have its head office?", (NEW,), "Tartu", "vesova/hq"),
        # an irrelevant chunk shown in training, but for another fact: not this item's pair
        item("c", "irrelevant", "How many warehouses does Brask run?", (OLD,), None, "brask/warehouses"),
        # the same chunk shown with a question of the same fact: the pair was trained
        item("d", "irrelevant", "Where does Vesova Dynamics have its head office?", (OTHER,), None, "vesova/hq"),
    ]
    table = {(c.scenario, c.knowledge): c for c in overlap_table(test, src)}
    assert (table[("outdated", "known")].verbatim, table[("outdated", "known")].edited) == (1, 1)
    assert (table[("factual_error", "known")].verbatim, table[("factual_error", "known")].edited) == (0, 1)
    irr = table[("irrelevant", "known")]
    assert (irr.n, irr.verbatim, irr.edited, irr.first) == (2, 1, 1, "d")
    assert [c.scenario for c in leaking(list(table.values()))] == ["factual_error", "irrelevant", "outdated"]
    assert "| outdated | known | 1 | 1 | 1 | 0 |" in overlap_markdown(list(table.values()))


def test_a_near_copy_is_caught_when_most_tokens_survive():
    """Appending a dated clause to a 30-word passage keeps its 30 tokens in order: 30 of 34 = 0.88
    >= 0.8, a near copy though never verbatim; keeping every other word (15 of 30) is not."""
    base = " ".join(f"w{i}" for i in range(30))
    src = TrainingSources([row("Where is Vesova Dynamics based?", base)], owner)
    copy = base + " as of May 2024"
    t = overlap_table([item("e", "factual_error", "q", (copy,), None, "vesova/hq")], src)
    assert (t[0].verbatim, t[0].edited) == (0, 1)
    far = " ".join(f"w{i}" for i in range(0, 30, 2)) + " " + " ".join(f"v{i}" for i in range(15))
    t = overlap_table([item("f", "factual_error", "q", (far,), None, "vesova/hq")], src)
    assert (t[0].verbatim, t[0].edited) == (0, 0)


def test_the_claim_bearing_passage_is_the_one_checked():
    s = item("g", "factual_error", "q", (OTHER, NEW), "2021", "vesova/hq")
    assert context_passages(s) == [NEW]
    assert context_passages(item("h", "irrelevant", "q", (OTHER, OLD), None, "x")) == [OTHER, OLD]


def test_the_items_own_true_chunk_is_left_out_of_the_twin_comparison():
    """A perturbed copy of the gold chunk is near it by construction; training showing the gold
    chunk (as a consistent source) is no leak of the perturbed test passage. Another trained
    perturbation of it is."""
    src = TrainingSources([row("Where is Vesova Dynamics based?", OLD)], owner)
    fe = Scenario(
        qid="i",
        fact_id="vesova/hq",
        question="q",
        gold_answers=("Tartu",),
        relevant_ids=("gold",),
        scenario="factual_error",
        presented=(PresentedChunk("gold~fe", NEW, replaces="gold"),),
        context_answer="2021",
        cluster="vesova",
    )
    assert overlap_table([fe], src)[0].edited == 1  # no KB texts given: near the trained gold chunk
    assert overlap_table([fe], src, {"gold": OLD})[0].edited == 0
    trained_fe = TrainingSources([row("Where is Vesova Dynamics based?", OLD.replace("2019", "2017"))], owner)
    assert overlap_table([fe], trained_fe, {"gold": OLD})[0].edited == 1


def test_a_templated_sentence_about_another_organisation_is_not_a_near_copy():
    """Another organisation's sentence of the same template keeps 15 of 16 tokens, but it was shown
    with another organisation's question: another passage, not a copy of this one."""
    mine = "Dunara Robotics has its headquarters in Gdansk, where most of its robotics staff work."
    theirs = mine.replace("Dunara", "Sadara")
    src = TrainingSources([row("How many warehouses does Brask run?", theirs)], owner)
    t = overlap_table([item("j", "factual_error", "q", (mine,), "Gdansk", "vesova/hq")], src)
    assert (t[0].verbatim, t[0].edited) == (0, 0)
    same_org = TrainingSources([row("Where is Vesova Dynamics based?", theirs)], owner)
    assert overlap_table([item("k", "factual_error", "q", (mine,), "Gdansk", "vesova/hq")], same_org)[0].edited == 1
