"""Build Scenario records from the demo world (a user's corpus: scenarios/from_corpus.py). Deterministic by seed.

Scenario types (scenarios/records.py):
- consistent: the gold chunk as it is;
- factual_error: the gold chunk with its answer span replaced by a plausible value of the same
  type (numbers keep their format, years stay years, names/places come from the same pool), in
  the manner of Longpre et al.'s entity substitution, so it looks exactly like a real chunk;
- outdated: an older dated statement (a KB archive chunk); in the demo world part of them carry
  no date at all (the gold chunk stating the older value), so only knowledge can flag them;
- irrelevant: hard distractors from a BM25 index over the KB (high score, no answer);
- unanswerable: a question answered nowhere, with its best-scoring chunks;
- update: a version dated after the training snapshot carries a new value; the context is right
  and what the LoRA learned is stale (`Scenario.superseded`).

The test split's flawed contexts are drawn where training never draws, so that a detector cannot
score by remembering a passage's label (train/overlap.py counts what is left, per cell): its older
versions exist only in the test (a value no training or dev row asserts, dated before every
version the KB keeps, worded as the archive or, undated, as the profile), its fabricated values are
none that a training or dev row (the SFT val rows) asserts for the fact, and its irrelevant chunks
none that such a row shows with a question of the fact (`Trained`). Values are drawn from the
same pools as training's: a fabricated value must not be told from a true one by its kind.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, replace
from typing import Callable, Collection, Iterable, Mapping, Sequence

from lorarag.core.errors import RecordError
from lorarag.rag.config import BM25Config
from lorarag.rag.index_parts import BM25Part
from lorarag.rag.records import Chunk
from lorarag.rag.retrieve import Retriever
from lorarag.scenarios.records import PresentedChunk, Scenario
from lorarag.scenarios.world import (
    CURRENT_YEAR,
    DEV_PHRASING,
    TEST_PHRASING,
    TRAIN_PHRASINGS,
    VALUE_MAKERS,
    Fact,
    World,
)
from lorarag.scenarios.world_text import ARCHIVE

# Which phrasings each split uses (see scenarios/world.py).
SPLIT_PHRASINGS = {"train": TRAIN_PHRASINGS, "dev": (DEV_PHRASING,), "test": (TEST_PHRASING,)}


class PerturbationError(RecordError):
    """The answer span cannot be found or substituted in the gold text."""


Searcher = Callable[[list[str], int], list[list[str]]]  # queries, depth -> ranked chunk ids


def bm25_searcher(chunks: Sequence[Chunk]) -> Searcher:
    """A BM25 searcher over `chunks` (rag.index.BM25Part, auto tokenizer: CJK bigrams)."""

    part = BM25Part.build([c.text for c in chunks], BM25Config())
    ids = [c.chunk_id for c in chunks]

    def search(queries: list[str], depth: int) -> list[list[str]]:
        return [[ids[int(i)] for i in rows] for rows, _ in part.search(queries, depth)]

    return search


def retriever_searcher(retriever: Retriever, allowed: Collection[str] | None = None) -> Searcher:
    """The run's own retriever as a Searcher (rag.retrieval.mode: dense or hybrid distractors with
    the run's embedder), limited to the chunk ids in `allowed` when given (the SFT pool, so a
    held-out chunk never becomes a training distractor; it over-fetches by the chunks left out)."""
    ids = [c.chunk_id for c in retriever.chunks]
    left_out = 0 if allowed is None else len(ids) - len(set(ids) & set(allowed))

    def search(queries: list[str], depth: int) -> list[list[str]]:
        ranked = retriever.rank(list(queries), min(len(ids), depth + left_out))
        return [[ids[int(r)] for r in rows if allowed is None or ids[int(r)] in allowed][:depth]
                for rows, _ in ranked]

    return search


# ---------------------------------------------------------------------------------------
# Type-preserving substitution of an answer span (any corpus).
# ---------------------------------------------------------------------------------------
_YEAR = re.compile(r"^(1[5-9]|20)\d\d$")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_CJK = re.compile(r"[\u4e00-\u9fff]")


def answer_type(answer: str) -> str:
    """Coarse type of an answer string: year, number, cjk, entity (capitalised), or text."""
    a = answer.strip()
    if _YEAR.match(a):
        return "year"
    if _NUMBER.search(a) and len(_NUMBER.sub(" ", a).split()) <= 3:  # "$12.4 million", "58.9亿元"
        return "number"
    if _CJK.search(a):
        return "cjk"
    if a[:1].isupper():
        return "entity"
    return "text"


def _new_number(num: str, rng: random.Random) -> str:
    """A different number with the same format (digit count, separators, decimals)."""
    for _ in range(50):
        out = []
        for i, ch in enumerate(num):
            if ch.isdigit():
                lo = 1 if i == 0 else 0
                out.append(str(rng.randint(lo, 9)))
            else:
                out.append(ch)
        new = "".join(out)
        if new != num:
            return new
    raise PerturbationError(f"cannot find another number like {num!r}")


def substitute_value(answer: str, rng: random.Random, pool: Sequence[str] = ()) -> str:
    """A plausible different value of the same type: years ±1–30, numbers re-drawn in the same
    format, names/places drawn from `pool` (other answers of the same type and language)."""
    kind = answer_type(answer)
    if kind == "year":
        for _ in range(50):
            y = int(answer) + rng.choice([-1, 1]) * rng.randint(1, 30)
            if y != int(answer) and y <= 2025:
                return str(y)
    if kind in ("year", "number"):
        m = list(_NUMBER.finditer(answer))
        span = max(m, key=lambda x: len(x.group()))
        return answer[:span.start()] + _new_number(span.group(), rng) + answer[span.end():]
    same = sorted({p for p in pool if p != answer and answer_type(p) == kind
                   and p.lower() not in answer.lower() and answer.lower() not in p.lower()})
    if not same:
        raise PerturbationError(f"no substitute of type {kind} for {answer!r} in the pool")
    return rng.choice(same)


def replace_span(text: str, answer: str, new: str) -> str:
    """Replace every occurrence of `answer` in `text` (case-insensitive); error if absent."""
    pat = re.compile(re.escape(answer), re.IGNORECASE)
    if not pat.search(text):
        raise PerturbationError(f"answer {answer!r} not found in the gold text")
    return pat.sub(lambda _: new, text)


def _distractors(question: str, search: Searcher, exclude: set[str], answers: Iterable[str],
                 by_id: dict[str, Chunk], k: int) -> list[Chunk]:
    """The k best-scoring chunks that are not excluded and contain no gold answer."""
    ans = [a.lower() for a in answers if a]
    out = []
    for cid in search([question], k + len(exclude) + 20)[0]:
        c = by_id[cid]
        if cid in exclude or any(a in c.text.lower() for a in ans):
            continue
        out.append(c)
        if len(out) == k:
            break
    return out


def _pc(c: Chunk) -> PresentedChunk:
    return PresentedChunk(c.chunk_id, c.text, c.source, c.date)


# ---------------------------------------------------------------------------------------
# The demo world.
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class WorldIndex:
    """KB chunks of a world with the fact -> chunk maps that scenarios need."""

    chunks: tuple[Chunk, ...]
    gold: dict[str, str]  # fact_id -> chunk id stating the current value
    archive: dict[tuple[str, str], str]  # (fact_id, year) -> chunk id of the dated older value
    search: Searcher


def index_world(world: World, chunks: Sequence[Chunk] | None = None, search: Searcher | None = None,
                groups: Sequence[str] | None = None) -> WorldIndex:
    """Locate each statement in `chunks` (default: the world's paragraph chunks, any chunker works).

    With `groups`, only those organisations' documents and facts are indexed: training data
    built on it can never show an unknown organisation, not even as a distractor.
    """
    chunks = list(chunks if chunks is not None else world.chunks())
    facts = world.facts
    if groups is not None:
        orgs = {f.org_id for f in world.facts if f.group in groups}
        chunks = [c for c in chunks if c.doc_id.split("/")[1] in orgs]
        facts = tuple(f for f in facts if f.group in groups)

    def find(stmt: str) -> str:
        hits = [c.chunk_id for c in chunks if stmt in c.text]
        if not hits:
            raise RecordError(f"statement not found in any chunk: {stmt[:60]!r}")
        return hits[0]

    gold = {f.fact_id: find(f.statement()) for f in facts}
    archive = {(f.fact_id, y): find(f.archive_statement(v, y)) for f in facts for v, y in f.history}
    return WorldIndex(tuple(chunks), gold, archive, search or bm25_searcher(chunks))


def _fake_value(f: Fact, rng: random.Random, avoid: Collection[str] = ()) -> str:
    taken = {f.value} | {v for v, _ in f.history} | set(avoid)
    for _ in range(200):
        v = VALUE_MAKERS[f.attribute](rng, f.language)
        if v not in taken:
            return v
    raise PerturbationError(f"{f.fact_id}: no substitute value")


@dataclass(frozen=True)
class Trained:
    """What the SFT rows' contexts hold per fact id: the values they assert, the chunks they show."""

    values: Mapping[str, frozenset[str]]
    chunks: Mapping[str, frozenset[str]]

    @classmethod
    def of(cls, scenarios: Iterable[Scenario]) -> "Trained":
        values: dict[str, set[str]] = {}
        chunks: dict[str, set[str]] = {}
        for s in scenarios:
            if s.context_answer:
                values.setdefault(s.fact_id, set()).add(s.context_answer)
            chunks.setdefault(s.fact_id, set()).update(p.chunk_id for p in s.presented)
        return cls({k: frozenset(v) for k, v in values.items()}, {k: frozenset(v) for k, v in chunks.items()})


def world_scenarios(world: World, wi: WorldIndex, groups: Sequence[str], split: str, *, seed: int = 0,
                    undated_fraction: float = 0.5, distractors: int = 1,
                    types: Sequence[str] = ("consistent", "factual_error", "outdated", "irrelevant",
                                            "unanswerable"),
                    phrasings: Sequence[int] | None = None, trained: Trained | None = None) -> list[Scenario]:
    """Scenarios for every fact of `groups` asked with the phrasings of `split` (train/dev/test),
    or with `phrasings` when given (a test split in more than one held-out wording). `trained`: what
    the SFT rows show, kept out of the test's flawed contexts (module docstring)."""
    trained = trained or Trained({}, {})
    wordings = tuple(SPLIT_PHRASINGS[split] if phrasings is None else phrasings)
    by_id = {c.chunk_id: c for c in wi.chunks}
    held = split == "test"  # flawed contexts from where training never draws (module docstring)
    out: list[Scenario] = []
    for f in sorted(world.by_group(*groups), key=lambda x: x.fact_id):
        known = "known" if f.group == "known" else "unknown"
        gold_c = by_id[wi.gold[f.fact_id]]
        for ph in wordings:
            rng = random.Random(f"{seed}/{f.fact_id}/{ph}")  # per-item stream: stable under subsetting
            q = f.questions[ph]
            base = dict(fact_id=f.fact_id, question=q, gold_answers=f.gold_answers,
                        relevant_ids=(gold_c.chunk_id,), knowledge=known, language=f.language, phrasing=ph,
                        cluster=f.fact_id.split("/", 1)[0])  # fact ids are "<org_id>/<attribute>"
            own = {wi.gold[f.fact_id]} | {wi.archive[(f.fact_id, y)] for _, y in f.history}
            extra = _distractors(q, wi.search, own, f.gold_answers, by_id, distractors)

            def mix(first: PresentedChunk) -> tuple[PresentedChunk, ...]:
                items = [first] + [_pc(c) for c in extra]
                rng.shuffle(items)  # the answer-bearing source is not always [S1]
                return tuple(items)

            qid = f"{f.fact_id}/p{ph}"
            if "consistent" in types:
                out.append(Scenario(qid=f"{qid}/consistent", scenario="consistent", presented=mix(_pc(gold_c)),
                                    context_answer=f.value, **base))
            if "factual_error" in types:
                fake = _fake_value(f, rng, trained.values.get(f.fact_id, ()) if held else ())
                pc = PresentedChunk(f"{gold_c.chunk_id}~fe", replace_span(gold_c.text, f.value, fake),
                                    gold_c.source, gold_c.date, replaces=gold_c.chunk_id)
                out.append(Scenario(qid=f"{qid}/factual_error", scenario="factual_error", presented=mix(pc),
                                    context_answer=fake, **base))
            if "outdated" in types and f.history and held:
                # an older version that exists only in the test: a value of the test half, dated
                # before every version the KB keeps, in the archive's wording or (undated) the profile's
                old = _fake_value(f, rng, trained.values.get(f.fact_id, ()))
                yr = str(int(min(y for _, y in f.history)) - 1 - rng.randrange(3))
                dated = rng.random() >= undated_fraction
                text = f.archive_statement(old, yr) if dated else replace_span(gold_c.text, f.value, old)
                pc = PresentedChunk(f"{gold_c.chunk_id}~old{yr}", text,
                                    f"orgs/{f.org_id}/archive-{yr}.md" if dated else gold_c.source,
                                    yr if dated else None, replaces=gold_c.chunk_id)
                out.append(Scenario(qid=f"{qid}/outdated", scenario="outdated", presented=mix(pc),
                                    context_answer=old, **base))
            elif "outdated" in types and f.history:
                old, yr = f.history[rng.randrange(len(f.history))]
                if rng.random() < undated_fraction:  # the profile paragraph, stale: no date anywhere
                    pc = PresentedChunk(f"{gold_c.chunk_id}~old{yr}", replace_span(gold_c.text, f.value, old),
                                        gold_c.source, None, replaces=gold_c.chunk_id)
                    removes: tuple[str, ...] = ()
                else:
                    pc = _pc(by_id[wi.archive[(f.fact_id, yr)]])
                    removes = (gold_c.chunk_id,)
                out.append(Scenario(qid=f"{qid}/outdated", scenario="outdated", presented=mix(pc),
                                    context_answer=old, removes=removes, **base))
            if "irrelevant" in types:
                shown = trained.chunks.get(f.fact_id, frozenset()) if held else frozenset()
                hard = _distractors(q, wi.search, own | shown, f.gold_answers, by_id, distractors + 1)
                out.append(Scenario(qid=f"{qid}/irrelevant", scenario="irrelevant",
                                    presented=tuple(_pc(c) for c in hard), context_answer=None,
                                    removes=tuple(sorted(own)), **base))
            if "update" in types and f.attribute in ARCHIVE[f.language]:
                out.append(_update(f, gold_c, rng, trained.values.get(f.fact_id, ()) if held else (), held, mix, qid,
                                   base))
    if "unanswerable" in types:
        for u in sorted((x for x in world.unanswerable if x.group in groups), key=lambda x: x.fact_id):
            for ph in wordings:
                q = u.questions[ph]
                hard = _distractors(q, wi.search, set(), (), by_id, distractors + 1)
                out.append(Scenario(qid=f"{u.fact_id}/p{ph}/unanswerable", fact_id=u.fact_id, question=q,
                                    gold_answers=(), relevant_ids=(), scenario="unanswerable",
                                    presented=tuple(_pc(c) for c in hard), context_answer=None,
                                    knowledge="known" if u.group == "known" else "unknown",
                                    language=u.language, phrasing=ph, cluster=u.fact_id.split("/", 1)[0]))
    return out


def _update(f: Fact, gold_c: Chunk, rng: random.Random, avoid: Collection[str], held: bool,
            mix: Callable[[PresentedChunk], tuple[PresentedChunk, ...]], qid: str, base: dict) -> Scenario:
    """A knowledge update: the fact's value changed after the training snapshot (`CURRENT_YEAR`,
    the profile's as-of year). The new value, dated after it in the archive's wording, takes the
    current chunk's place; the right answer is the context's and the taught value is `superseded`.
    Only the date tells it from an outdated archive statement of the same form. Training and dev
    date theirs one or two years on, the test three or four (a year no row shows, as the test's
    outdated versions are older than every year training shows), so a test passage is no near copy
    of a training one and the detector has to read the year, not recall it."""
    new = _fake_value(f, rng, avoid)
    year = str(CURRENT_YEAR + 1 + rng.randrange(2) + (2 if held else 0))
    pc = PresentedChunk(f"{gold_c.chunk_id}~new{year}", f.archive_statement(new, year),
                        f"orgs/{f.org_id}/update-{year}.md", year, replaces=gold_c.chunk_id)
    return Scenario(qid=f"{qid}/update", scenario="update", presented=mix(pc), context_answer=new,
                    superseded=f.gold_answers, **{**base, "gold_answers": (new,)})


def ask_in_phrasings(items: Sequence[Scenario], world: World, phrasings: Sequence[int]) -> list[Scenario]:
    """Each distinct fact of `items` (its first item: type and sources kept) asked once in each of
    `phrasings`, facts in first-seen order; a fact sampled twice is read once (no double weight)."""
    facts = {f.fact_id: f for f in world.facts}
    first: dict[str, Scenario] = {}
    for s in items:
        first.setdefault(s.fact_id, s)
    return [replace(s, question=facts[s.fact_id].questions[ph], phrasing=ph,
                    qid=s.qid.replace(f"/p{s.phrasing}/", f"/p{ph}/", 1))
            for s in first.values() for ph in phrasings]
