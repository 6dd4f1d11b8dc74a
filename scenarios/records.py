"""Conflict scenarios: one record per (question, presented context), and their validation.

The record format is our own, stored as JSONL and loadable with `datasets`
(`datasets.load_dataset("json", data_files=...)`). Generators (demo world, perturbation,
importers) live beside this module; the fallback system and `eval/` read these records.

How a scenario meets retrieval: the knowledge base is the clean corpus. A scenario says what
the context looks like in its world:
- `presented`: the chunks as the model should see them (oracle/presented-context mode);
- each presented chunk's `replaces`: the KB chunk id it stands in for (a perturbed copy of the
  gold chunk: in retrieved-context mode it takes that chunk's place and rank);
- `removes`: KB chunk ids absent from this scenario's world (the current fact for `outdated`,
  all relevant chunks for `irrelevant`/`unanswerable`).
So one clean index serves every scenario type (see `poison`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal, get_args

from lorarag.core.errors import RecordError
from lorarag.rag.records import Chunk, Retrieved, read_jsonl_lines, write_jsonl

# The one definition of the scenario types and knowledge splits (configs take the Literals).
ScenarioName = Literal["consistent", "factual_error", "fabricated", "outdated", "irrelevant", "unanswerable", "update"]
KnowledgeName = Literal["known", "unknown"]
SCENARIO_TYPES: tuple[str, ...] = get_args(ScenarioName)
KNOWLEDGE_SPLITS: tuple[str, ...] = get_args(KnowledgeName)
# Contexts that hold the right answer and should be used as they are: the knowledge base's own chunk
# (`consistent`) and a version dated after what the LoRA learned (`update`: the context is right and
# the memory stale). The detector's negatives; every other type is a context not to be used as is.
SOUND_CONTEXTS: tuple[str, ...] = ("consistent", "update")
# Cells a run evaluates only when named: `update` needs facts taught in their older version, and
# `fabricated` (a wrong value in a passage of another form than the knowledge base's) is a test-only cell.
ON_REQUEST: tuple[str, ...] = ("fabricated", "update")


@dataclass(frozen=True)
class PresentedChunk:
    """A chunk as presented to the model in one scenario."""

    chunk_id: str  # KB id, or a derived id like "<kb id>~fe" for a perturbed copy
    text: str
    source: str = ""
    date: str | None = None  # date/version the chunk states, if any
    replaces: str | None = None  # KB chunk id this perturbed chunk stands in for


@dataclass(frozen=True)
class Scenario:
    """One evaluation or training item: a question with a (possibly wrong) context."""

    qid: str
    fact_id: str  # the fact asked about; splits are by fact
    question: str
    gold_answers: tuple[str, ...]  # empty for `unanswerable`
    relevant_ids: tuple[str, ...]  # KB chunk ids holding the true, current answer
    scenario: str  # one of SCENARIO_TYPES
    presented: tuple[PresentedChunk, ...]
    context_answer: str | None  # the answer the presented context asserts (None: none)
    knowledge: str = "known"  # "known": the LoRA was taught the fact; "unknown": never seen
    language: str = "en"
    phrasing: int = 0  # index of the question phrasing (held-out phrasings for eval)
    removes: tuple[str, ...] = ()  # KB chunk ids absent from this scenario's world
    source_set: str = "demo"  # "demo", "conflictnq", "conflictqa", or a perturbed corpus name
    # The unit errors cluster in, for resampling and paired tests: the organisation (world) or the
    # document holding the fact (KB). Facts of one organisation share its name and its language, so a
    # model that misreads one tends to misread them all. Empty: the fact is its own cluster.
    cluster: str = ""
    # `update` only: the values the context supersedes, i.e. what the LoRA learned before the update
    # (the gold answers are the context's newer value). Naming one of them is a stale answer.
    superseded: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.scenario not in SCENARIO_TYPES:
            raise RecordError(
                f"{self.qid}: unknown scenario type {self.scenario!r} (expected one of {', '.join(SCENARIO_TYPES)})"
            )
        if self.knowledge not in KNOWLEDGE_SPLITS:
            raise RecordError(f"{self.qid}: unknown knowledge split {self.knowledge!r}")
        if self.scenario != "unanswerable" and not self.gold_answers:
            raise RecordError(f"{self.qid}: no gold answer for a {self.scenario} scenario")
        if (self.scenario == "update") != bool(self.superseded):
            raise RecordError(
                f"{self.qid}: `superseded` (the values a newer context replaces) is for `update` "
                f"scenarios only, and every `update` scenario needs it"
            )


def load_scenarios(path: str | Path) -> list[Scenario]:
    """The one reader of scenario JSONL: every field's type checked (`gold_answers: "Paris"` is an
    error, not five one-letter answers), qids unique; RecordError names file:line and field."""
    rows = read_jsonl_lines(path, Scenario)
    first: dict[str, int] = {}
    for line, s in rows:
        if s.qid in first:
            raise RecordError(f"{path}:{line}: duplicate qid {s.qid!r} (first at line {first[s.qid]})")
        first[s.qid] = line
    return [s for _, s in rows]


def save_scenarios(path: str | Path, items: Iterable[Scenario]) -> int:
    """Write scenarios as JSONL atomically; returns the count. Duplicate qids are refused."""
    items = list(items)
    seen: set[str] = set()
    for s in items:
        if s.qid in seen:
            raise RecordError(f"{path}: duplicate qid {s.qid!r}; nothing written")
        seen.add(s.qid)
    return write_jsonl(path, items)


def validate_against_kb(items: Iterable[Scenario], kb_ids: set[str]) -> None:
    """Raise RecordError listing every record whose chunk ids are not in the knowledge base.

    Checked: relevant_ids, removes, each presented chunk's `replaces`, and presented chunk ids
    that are not derived copies (a chunk with `replaces` set may carry a new id).
    """
    problems: list[str] = []
    for s in items:
        ids = list(s.relevant_ids) + list(s.removes)
        ids += [p.replaces for p in s.presented if p.replaces]
        ids += [p.chunk_id for p in s.presented if not p.replaces]
        missing = sorted({i for i in ids if i not in kb_ids})
        if missing:
            problems.append(f"{s.qid}: {', '.join(missing)}")
    if problems:
        head = "; ".join(problems[:5]) + (f"; … {len(problems) - 5} more" if len(problems) > 5 else "")
        raise RecordError(f"{len(problems)} scenario(s) name chunk ids not in the knowledge base: {head}")


def poison(retrieved: list[Retrieved], scenario: Scenario) -> list[Retrieved]:
    """Turn a clean retrieval list into the scenario's world: swap replaced chunks, drop removed.

    Ranks are renumbered 1..n after removal; scores are kept.
    """
    swaps = {p.replaces: p for p in scenario.presented if p.replaces}
    out: list[Retrieved] = []
    for r in retrieved:
        cid = r.chunk.chunk_id
        if cid in scenario.removes:
            continue
        if cid in swaps:
            p = swaps[cid]
            chunk = replace(r.chunk, chunk_id=p.chunk_id, text=p.text, date=p.date)
            r = replace(r, chunk=chunk)
        out.append(replace(r, rank=len(out) + 1))
    return out


def presented_as_retrieved(scenario: Scenario) -> list[Retrieved]:
    """The presented chunks as a ranked list (presented-context / oracle mode)."""
    return [
        Retrieved(
            Chunk(p.chunk_id, p.source or p.chunk_id, p.source, p.text, 0, len(p.text), date=p.date),
            score=1.0,
            rank=i,
            stage="presented",
        )
        for i, p in enumerate(scenario.presented, 1)
    ]
