"""Baselines that know what the LoRA knows: memory-or-context routing, adapter variants of the
prompt baselines, and the headline table against them (hand-computed cells)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from lorarag.core.config import load_config
from lorarag.eval.systems import DateRule, MemoryOrContext, source_year
from lorarag.fallback.format import SYSTEM_CLOSED_BOOK
from lorarag.rag.config import RetrievalConfig
from lorarag.rag.generators.base import Generation
from lorarag.rag.records import Answer, Trace
from lorarag.scenarios.records import PresentedChunk, Scenario
from lorarag.study.baseline_tables import baseline_table
from lorarag.trained.config import RunConfig, SystemConfig
from lorarag.trained.contexts import ScenarioContexts
from tests.eval_fixtures import make_item


class ClosedBookScript:
    """Stands in for the model (outside the code under test): scripted closed-book answers and
    token logprobs per question; records which adapter each call used."""

    def __init__(self, closed):
        self.closed, self.calls, self.questions = closed, [], []

    def generate(self, convs, *, adapter=None, max_new_tokens=None, top_logprobs=0, prefixes=None):
        assert all(c[0].content == SYSTEM_CLOSED_BOOK for c in convs)
        self.calls.append(adapter)
        qs = [c[-1].content.rsplit("Question: ", 1)[-1].strip() for c in convs]
        self.questions += qs
        out = []
        for q in qs:
            key = next(k for k in self.closed if k in q)
            out.append(Generation(text=self.closed[key][0], logprobs=self.closed[key][1], prompt=q))
        return out


class ContextReader:
    """Stands in for the base RAG system: answers every question 'from the context'."""

    def __init__(self):
        self.asked, self.read, self.readers = [], {}, []

    def answer_with_context(self, questions, contexts, adapter=None, *, candidates=None, max_new_tokens=None):
        self.asked += list(questions)
        self.readers.append(adapter)
        self.read.update({q: [r.chunk.chunk_id for r in c] for q, c in zip(questions, contexts)})
        return [Answer(question=q, text=f"context says {q}", trace=Trace(question=q)) for q in questions]


def _scenario(q: str) -> Scenario:
    return Scenario(
        qid=q,
        fact_id=q,
        question=q,
        gold_answers=("7",),
        relevant_ids=("c",),
        scenario="consistent",
        presented=(PresentedChunk("c", "The value is 7."),),
        context_answer="7",
    )


def test_memory_or_context_keeps_confident_memories_and_reads_the_context_otherwise():
    closed = {
        "q-known": ("7", (-0.01, -0.03)),  # mean NLL 0.02 nats/token: kept under 0.5
        "q-unsure": ("5", (-1.2, -0.6)),  # 0.9: rejected
        "q-declined": ("unknown", (-0.001,)),
    }  # no memory to keep, however confident
    gen, rag = ClosedBookScript(closed), ContextReader()
    ctx = ScenarioContexts(None, None, RetrievalConfig(), {})
    sys_ = MemoryOrContext("moc", rag, gen, "lora", 0.5, ctx, "presented", 16)
    known, unsure, declined = sys_.answer_scenarios([_scenario(q) for q in closed])
    assert gen.calls == ["lora"]  # the LoRA's memory, one closed-book pass
    assert rag.asked == ["q-unsure", "q-declined"]  # the context is read only where memory was rejected
    assert (known.text, known.trace.route, known.trace.memory_answer) == ("7", "fallback", "7")
    assert (unsure.text, unsure.trace.route) == ("context says q-unsure", "context")
    assert declined.trace.route == "context" and "rejected" in declined.trace.notes[0]
    assert "gate doubt=0.0200" in known.trace.notes[0] and len(known.trace.reranked) == 1
    # without a threshold (gate off) every memory that is not "unknown" is kept
    every = MemoryOrContext("moc", ContextReader(), gen, "lora", None, ctx, "presented", 16)
    assert [a.trace.route for a in every.answer_scenarios([_scenario(q) for q in closed])] == [
        "fallback",
        "fallback",
        "context",
    ]


def test_source_year_reads_the_first_four_digit_year():
    assert [source_year(d) for d in ("2021", "2019-05-01", "rev. 3 of 2026", "v3", "12345", "", None)] == [
        2021,
        2019,
        2026,
        None,
        None,
        None,
        None,
    ]


def _dated(q: str, *chunks: tuple[str, str | None]) -> Scenario:
    return Scenario(
        qid=q,
        fact_id=q,
        question=q,
        gold_answers=("7",),
        relevant_ids=("c",),
        scenario="update",
        presented=tuple(PresentedChunk(c, f"text of {c}", date=d) for c, d in chunks),
        context_answer="7",
        superseded=("5",),
    )


def test_date_rule_reads_newer_sources_drops_older_ones_and_routes_the_rest_on_the_gate():
    """Snapshot 2024. q-new: a 2026 source beside an undated one: base RAG reads the 2026 one
    alone, whatever the memory. q-old-kept: a 2021 source and an undated distractor, memory kept:
    the memory. q-old-rejected: a 2024 source alone (dated by the snapshot: superseded), memory
    rejected: base RAG is asked with no source left, which RAGSystem answers by abstaining.
    q-undated-rejected: memory_or_context over the undated source."""
    closed = {
        "q-new": ("5", (-0.01,)),
        "q-old-kept": ("5", (-0.01,)),
        "q-old-rejected": ("5", (-2.0,)),
        "q-undated-rejected": ("5", (-2.0,)),
    }
    items = [
        _dated("q-new", ("d", None), ("u", "2026")),
        _dated("q-old-kept", ("o", "2021"), ("d", None)),
        _dated("q-old-rejected", ("o", "dated 2024-03")),
        _dated("q-undated-rejected", ("c", None)),
    ]
    gen, rag = ClosedBookScript(closed), ContextReader()
    moc = MemoryOrContext(
        "rule", rag, gen, "lora", 0.5, ScenarioContexts(None, None, RetrievalConfig(), {}), "presented", 16
    )
    new, kept, rejected, undated = DateRule("rule", moc, 2024).answer_scenarios(items)
    assert rag.read == {"q-new": ["u"], "q-old-rejected": [], "q-undated-rejected": ["c"]}
    assert gen.calls == ["lora"]  # one closed-book pass, for the three without a newer source
    assert gen.questions == ["q-old-kept", "q-old-rejected", "q-undated-rejected"]
    assert (new.text, new.trace.route) == ("context says q-new", "context")
    assert [r.chunk.chunk_id for r in new.trace.reranked] == ["d", "u"]  # the trace shows what the rule saw
    assert "1 source(s) dated after 2024" in new.trace.notes[0]
    assert (kept.text, kept.trace.route, kept.trace.memory_answer) == ("5", "fallback", "5")
    assert "1 source(s) dated by 2024 dropped" in kept.trace.notes[1]
    assert rejected.trace.route == "context" and "rejected" in rejected.trace.notes[0]
    assert undated.trace.route == "context" and "0 source(s) dated by 2024 dropped" in undated.trace.notes[1]
    assert rag.readers == [None, None]  # the newer sources, then the rest: the base model reads both


def test_a_rule_with_an_adapter_reads_its_sources_with_it_and_keeps_the_loras_memory():
    """`adapter: rag_sft` on date_rule: both RAG passes (the newer source; the undated rest where
    the memory was rejected) go to the RAG-SFT adapter; the closed-book memory stays the LoRA's."""
    closed = {"q-new": ("5", (-0.01,)), "q-undated-rejected": ("5", (-2.0,))}
    gen, rag = ClosedBookScript(closed), ContextReader()
    moc = MemoryOrContext(
        "rule", rag, gen, "lora", 0.5, ScenarioContexts(None, None, RetrievalConfig(), {}), "presented", 16, reader="rag_sft"
    )
    DateRule("rule", moc, 2024).answer_scenarios([_dated("q-new", ("u", "2026")), _dated("q-undated-rejected", ("c", None))])
    assert gen.calls == ["lora"] and rag.readers == ["rag_sft", "rag_sft"]
    assert rag.read == {"q-new": ["u"], "q-undated-rejected": ["c"]}


def test_a_reader_adapter_trains_and_stamps_the_rag_sft_adapter(tmp_path):
    """A system reading with `rag_sft` makes the run train the RAG-SFT adapter, reserves its
    name, and is stamped with both adapters' content (a retrained reader redoes it)."""
    import hashlib

    from lorarag.study.evaluate import system_stamp
    from lorarag.trained.adapters import needs_rag_sft

    raw = load_config(Path(__file__).resolve().parent.parent / "configs/run/ci-tiny.yaml", RunConfig).model_dump()
    only = [
        {"name": "lora_rag", "kind": "lora_rag"},
        {"name": "moc_rag_sft", "kind": "memory_or_context", "adapter": "rag_sft"},
    ]
    cfg = RunConfig.model_validate({**raw, "systems": only})
    assert needs_rag_sft(cfg) and cfg.systems[1].uses_rag_sft and not cfg.systems[0].uses_rag_sft
    assert not needs_rag_sft(RunConfig.model_validate({**raw, "systems": only[:1]}))
    with pytest.raises(ValueError, match="adapter name rag_sft: set by the run"):
        RunConfig.model_validate(
            {
                **raw,
                "systems": only,
                "rag": {**raw["rag"], "generator": {**raw["rag"]["generator"], "adapters": {"rag_sft": "x"}}},
            }
        )
    lora, reader = tmp_path / "lora", tmp_path / "reader"
    for d, w in ((lora, b"l"), (reader, b"r")):
        d.mkdir()
        (d / "adapter_config.json").write_bytes(b"{}")
        (d / "adapter_model.safetensors").write_bytes(w)
    stamp = system_stamp(cfg, cfg.systems[1], [], lora, 0.5, reader)
    sha = hashlib.sha256(
        (
            "adapter_config.json:" + hashlib.sha256(b"{}").hexdigest() + "\n"
            "adapter_model.safetensors:" + hashlib.sha256(b"r").hexdigest() + "\n"
        ).encode()
    )
    assert stamp["rag_sft"] == sha.hexdigest() and stamp["adapter"] != stamp["rag_sft"]
    assert "rag_sft" not in system_stamp(cfg, cfg.systems[0], [], lora, 0.5, reader)


def test_date_rule_needs_a_snapshot():
    raw = load_config(Path(__file__).resolve().parent.parent / "configs/run/ci-tiny.yaml", RunConfig).model_dump()
    raw["systems"] = [*raw["systems"], {"name": "rule", "kind": "date_rule", "context": "presented"}]
    with pytest.raises(ValueError, match="systems.rule: date_rule reads each source's date against data.snapshot"):
        RunConfig.model_validate({**raw, "data": {**raw["data"], "snapshot": None}})
    cfg = RunConfig.model_validate({**raw, "data": {**raw["data"], "snapshot": 2024}})
    assert cfg.systems[-1].uses_adapter  # the rule keeps the LoRA's memory: a knowledge-sharing baseline


def test_adapter_goes_only_with_the_kinds_that_take_it():
    assert SystemConfig(name="a", kind="astute_rag", adapter="lora").uses_adapter
    assert SystemConfig(name="m", kind="memory_or_context").uses_adapter
    assert SystemConfig(name="r", kind="date_rule", adapter="lora").adapter == "lora"  # the LoRA as its reader
    assert not SystemConfig(name="p", kind="prompted_detection").uses_adapter
    with pytest.raises(ValueError, match="adapter: means nothing for kind 'base_rag'"):
        SystemConfig(name="b", kind="base_rag", adapter="lora")


def test_baseline_table_names_the_best_system_and_the_captured_router_gain():
    """4 consistent known items. Right answers: closed-book LoRA on 1, 2; base RAG on 2, 3;
    LoRA-RAG on 1, 2, 3; memory-or-context on 1, 2. Oracle router: 1, 2, 3 = 0.75. Best pure
    strategy 0.50, so LoRA-RAG (0.75) captures (0.75 - 0.50) / (0.75 - 0.50) = 1.00 of the gain.
    Best knowledge-sharing baseline: closed-book LoRA at 0.50 (first of the tie): +0.25."""
    right = {"closed_book_lora": {1, 2}, "base_rag": {2, 3}, "lora_rag": {1, 2, 3}, "moc": {1, 2}}
    results = {
        name: [
            make_item(system=name, qid=f"q{i}", fact_id=f"f{i}", answer="50 km/h" if i in r else "9") for i in range(1, 5)
        ]
        for name, r in right.items()
    }
    cfg = SimpleNamespace(
        eval=SimpleNamespace(bootstrap=1000, seed=0),
        systems=[
            SystemConfig(name="closed_book_lora", kind="closed_book", adapter="lora"),
            SystemConfig(name="base_rag", kind="base_rag", context="presented"),
            SystemConfig(name="lora_rag", kind="lora_rag", context="presented"),
            SystemConfig(name="moc", kind="memory_or_context", context="presented"),
        ],
    )
    lines = baseline_table(cfg, results, "presented", "base_rag", "lora_rag", lambda r: float(r.answer == "50 km/h"))
    assert "closed_book_lora, moc" in lines[2]
    row = next(ln for ln in lines if ln.startswith("| consistent | known |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[:7] == ["consistent", "known", "4", "0.75", "0.50", "0.50", "0.50"]
    assert cells[7] == "0.75" and cells[8] == "lora_rag" and cells[10] == "1.00"
    assert cells[9].startswith("+0.25 [") and cells[9].endswith("vs closed_book_lora")
    # a cell every system gets equally right names no single winner
    tied = {
        name: [
            make_item(system=name, qid=f"q{i}", fact_id=f"f{i}", scenario="outdated", answer="50 km/h") for i in range(1, 5)
        ]
        for name in right
    }
    row = next(
        ln
        for ln in baseline_table(cfg, tied, "presented", "base_rag", "lora_rag", lambda r: float(r.answer == "50 km/h"))
        if ln.startswith("| outdated |")
    )
    assert "| tie: lora_rag, closed_book_lora, base_rag … |" in row


def _captured(right: dict[str, set[int]], n: int) -> str:
    results = {
        name: [
            make_item(system=name, qid=f"q{i}", fact_id=f"f{i}", answer="50 km/h" if i in r else "9")
            for i in range(1, n + 1)
        ]
        for name, r in right.items()
    }
    cfg = SimpleNamespace(
        eval=SimpleNamespace(bootstrap=200, seed=0),
        systems=[
            SystemConfig(name="closed_book_lora", kind="closed_book", adapter="lora"),
            SystemConfig(name="base_rag", kind="base_rag", context="presented"),
            SystemConfig(name="lora_rag", kind="lora_rag", context="presented"),
        ],
    )
    lines = baseline_table(cfg, results, "presented", "base_rag", "lora_rag", lambda r: float(r.answer == "50 km/h"))
    row = next(ln for ln in lines if ln.startswith("| consistent | known |"))
    return [c.strip() for c in row.strip("|").split("|")][-1]


def test_captured_is_left_out_where_the_router_gains_under_a_twentieth():
    """25 items: closed-book LoRA right on 1-12 (0.48), base RAG on 12-13 (0.08); the router is right
    on 1-13 (0.52), a gain of 0.04 over the better pure strategy: under MIN_ROUTER_GAIN, so no ratio
    (LoRA-RAG on 1-12: (0.48 - 0.48) / 0.04 would read 0.00, on 1-13 it would read 1.00 from one item)."""
    assert _captured({"closed_book_lora": set(range(1, 13)), "base_rag": {12, 13}, "lora_rag": set(range(1, 13))}, 25) == "–"


def test_captured_says_when_lora_rag_scores_above_the_router():
    """4 items: closed-book LoRA right on 1, base RAG on 2: router 0.50. LoRA-RAG right on 1, 2, 3
    (0.75) reads the context better than base RAG: '> router (+0.25)', not a share of 2.0."""
    assert _captured({"closed_book_lora": {1}, "base_rag": {2}, "lora_rag": {1, 2, 3}}, 4) == "> router (+0.25)"


def test_declined_answerable_items_are_counted_per_system_and_cell():
    """3 consistent never-learned items and 2 irrelevant ones, all answerable. RAG-SFT declines
    items 1 and 2 of the consistent cell and both irrelevant ones; LoRA-RAG declines none, base RAG
    irrelevant item 1. Counts: consistent 0 / 0 / 2, irrelevant 0 / 1 / 2 (LoRA-RAG, base RAG,
    RAG-SFT). An unanswerable item's abstention (no gold answer) is right, not a decline."""
    from lorarag.study.baseline_tables import abstention_table

    declines = {"lora_rag": set(), "base_rag": {"i1"}, "rag_sft": {"c1", "c2", "i1", "i2"}}

    def items(name: str) -> list:
        cons = [
            make_item(system=name, qid=f"c{i}", fact_id=f"c{i}", knowledge="unknown", abstained=f"c{i}" in declines[name])
            for i in range(1, 4)
        ]
        irr = [
            make_item(
                system=name,
                qid=f"i{i}",
                fact_id=f"i{i}",
                scenario="irrelevant",
                knowledge="unknown",
                abstained=f"i{i}" in declines[name],
            )
            for i in range(1, 3)
        ]
        unanswerable = make_item(
            system=name, qid="u1", fact_id="u1", scenario="irrelevant", knowledge="unknown", gold_answers=(), abstained=True
        )
        return cons + irr + [unanswerable]

    cfg = SimpleNamespace(
        systems=[
            SystemConfig(name="base_rag", kind="base_rag", context="presented"),
            SystemConfig(name="lora_rag", kind="lora_rag", context="presented"),
            SystemConfig(name="rag_sft", kind="rag_sft", context="presented"),
        ]
    )
    results = {n: items(n) for n in declines}
    lines = abstention_table(cfg, [results], "presented", "lora_rag")
    assert "| scenario | knowledge | n | lora_rag | base_rag | rag_sft |" in lines
    assert "| consistent | unknown | 3 | 0 | 0 | 2 |" in lines
    assert "| irrelevant | unknown | 2 | 0 | 1 | 2 |" in lines
    # a run where no system declines an answerable item gets no table
    none = {n: [r for r in items(n) if r.qid == "u1" or not r.abstained] for n in declines}
    assert abstention_table(cfg, [none], "presented", "lora_rag") == []


def test_declines_sum_over_seeds():
    """Three consistent never-learned items a seed: RAG-SFT declines 2 at seed 1 and 1 at seed 2
    (3 of 6), LoRA-RAG none (0 of 6)."""
    from lorarag.study.baseline_tables import declined_table

    def seed(declines: set[str]) -> dict:
        return {
            n: [
                make_item(
                    system=n,
                    qid=f"c{i}",
                    fact_id=f"c{i}",
                    knowledge="unknown",
                    abstained=n == "rag_sft" and f"c{i}" in declines,
                )
                for i in range(1, 4)
            ]
            for n in ("lora_rag", "rag_sft")
        }

    lines = declined_table([seed({"c1", "c2"}), seed({"c3"})], ["lora_rag", "rag_sft"], "presented")
    assert lines[0] == "### Declined answerable items (presented context, summed over 2 seeds)"
    assert "| consistent | unknown | 6 | 0 | 3 |" in lines
