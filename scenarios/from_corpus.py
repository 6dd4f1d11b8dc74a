"""Scenario records over a knowledge base and its labelled questions (a user's, or the demo world's).

For each answerable item, its gold chunk (the first relevant chunk holding a gold answer, else
the first relevant chunk) and `distractors` hard BM25 distractors (high score, not relevant, no
gold answer anywhere in them), shuffled so the answer-bearing source is not always [S1]:
- consistent: the gold chunk as it is;
- factual_error: the set's own conflict passages where it has them (ConflictNQ's fabricated
  passages; `conflicts="test"` takes a seeded `conflicts_per_item` of them, `"train"` only the
  others), else the gold chunk with its answer span replaced by a value of the same type
  (perturb.substitute_value: years stay years, numbers keep their format, names come from
  other answers of the same type and language; never the item's own older answer, which is the
  outdated context's value); an item whose answer is not a span of its
  gold chunk and has no conflict passage gets no factual-error scenario (counted by the caller);
- outdated: where the user supplies older versions (`load_outdated`, one or more per question): the
  older passage, or the gold chunk with the older value, dated; the test's is a seeded one of them
  (`held_out_older`), training shows another where the question has two or more, never the test's;
- irrelevant: `distractors + 1` hard distractors alone, every relevant chunk removed;
- unanswerable: the set's unanswerable questions with their best-scoring chunks;
- update: for a fact the LoRA was taught in its older version (`stale`, scenarios/kb_updates.py),
  the current chunk as it is: the context is right and the memory stale. With a `snapshot` year
  (`data.snapshot`: what the LoRA's knowledge base is current to) it is dated one to three years
  after it (a per-fact draw), as a KB dates a chunk changed after the adapter was trained; without
  one it carries the chunk's own date. `undated` strips every date where a run shows none.
Perturbed chunks carry `replaces=<gold chunk id>`, so in retrieved mode they take the gold
chunk's place in the clean index's ranking (scenarios/records.poison) and attribution can still
tell a retrieval miss from a generation failure.
"""

from __future__ import annotations

import random
import re
import zlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from dataclasses import field as dc_field
from typing import Literal

from lorarag.core.errors import RecordError
from lorarag.rag.records import Chunk
from lorarag.scenarios.kb_labels import answer_pattern, find_answer
from lorarag.scenarios.kb_records import QAItem, answer_text, field, jsonl_objects, no_other_keys, norm_text
from lorarag.scenarios.perturb import (
    PerturbationError,
    Searcher,
    answer_pool,
    answer_type,
    bm25_searcher,
    same_class,
    substitute_value,
)
from lorarag.scenarios.records import SCENARIO_TYPES, PresentedChunk, Scenario

TRAINABLE = tuple(t for t in SCENARIO_TYPES if t != "fabricated")  # `fabricated` is a test-only cell
# The new passage of the `fabricated` cell where a set has no conflict passages of its own: a
# question-and-answer note, a form no knowledge-base chunk has and no training row shows.
NOTE = {"en": "FAQ. {q} Answer: {v}.", "zh": "常见问题：{q}答：{v}。"}

_WORD = re.compile(r"\w+", re.UNICODE)


@dataclass(frozen=True)
class OlderValue:
    """What a question's answer was before, and since when it changed (user-supplied)."""

    qid: str
    answer: str
    date: str  # a date or version label, shown with the source ("as of 2019", "v2.1")
    text: str | None = None  # the older passage as it read then; None: the gold chunk, older value
    where: str = dc_field(default="", compare=False)  # file:line, for error messages


Versions = tuple[OlderValue, ...]  # a question's older versions, in the file's order


def load_outdated(path: str) -> dict[str, Versions]:
    """Older versions, JSONL `{id, answer, date}` (+ optional `text`), one line per version (an id
    may repeat): id -> its versions. A `text` must hold its older answer (any spacing); the same
    older answer twice for one id, and an empty file, are errors (the file was given to supply
    outdated items and would silently supply none)."""
    out: dict[str, list[OlderValue]] = {}
    for where, obj in jsonl_objects(path, "older-versions file"):
        no_other_keys(obj, {"id", "answer", "date", "text"}, where)
        qid = field(obj, "id", str, where)
        answer = answer_text(field(obj, "answer", str, where), where, "answer")
        same = [o for o in out.get(qid, ()) if norm_text(o.answer) == norm_text(answer)]
        if same:
            raise RecordError(f"{where}: id {qid!r}: older answer {answer!r} repeats ({same[0].where})")
        text = field(obj, "text", str, where, required=False)
        if text is not None and not find_answer(text, (answer,)):
            raise RecordError(f"{where}: text: does not hold its older answer {answer!r}")
        out.setdefault(qid, []).append(OlderValue(qid, answer, field(obj, "date", str, where), text, where))
    if not out:
        raise RecordError(f"{path}: no older versions (empty file): outdated items need at least one")
    return {q: tuple(v) for q, v in out.items()}


def held_out_older(versions: Versions, qid: str, seed: int) -> OlderValue:
    """The older version the test shows (seeded by `seed` and the id alone); training shows the others."""
    return versions[random.Random(f"{seed}/older/{qid}").randrange(len(versions))]


def check_outdated(outdated: Mapping[str, Versions], items: Sequence[QAItem], questions: str) -> None:
    """Each older version belongs to an answerable question of the set and differs from its
    truth: an older answer equal to a gold answer would be an outdated item asserting the truth."""
    by_id = {it.qid: it for it in items}
    for old in (o for versions in outdated.values() for o in versions):
        it = by_id.get(old.qid)
        if it is None:
            raise RecordError(f"{old.where}: id {old.qid!r} is not a question of {questions}")
        if it.unanswerable or not it.answers:
            raise RecordError(f"{old.where}: id {old.qid!r}: the question has no answer, so no older one")
        if norm_text(old.answer) in {norm_text(a) for a in it.answers}:
            raise RecordError(f"{old.where}: answer: {old.answer!r} is the current gold answer, not an older one")


def held_out_conflicts(item: QAItem, seed: int, k: int) -> tuple[int, ...]:
    """Indices of `item.conflicts` the test scenarios use (seeded); training uses only the others."""
    idx = list(range(len(item.conflicts)))
    random.Random(f"{seed}/conflicts/{item.qid}").shuffle(idx)
    return tuple(sorted(idx[:k]))


def gold_of(item: QAItem, by_id: dict[str, Chunk]) -> tuple[Chunk, str | None]:
    """(gold chunk, the gold answer as its text writes it, or None when no answer is a span of it)."""
    for cid in item.relevant_ids:
        hit = find_answer(by_id[cid].text, item.answers)
        if hit:
            return by_id[cid], hit[1].group(0)
    # No answer is a span (a paraphrased answer, a document-level label): the relevant chunk that
    # shares the most answer words (the first on a tie), not whichever chunk comes first, so a
    # document cut into chunks still presents the part that supports the answer.
    want = answer_words(item.answers)
    best = max(item.relevant_ids, key=lambda cid: len(want & answer_words([by_id[cid].text])))
    return by_id[best], None


def answer_words(texts: Sequence[str]) -> set[str]:
    """Lower-cased word tokens of `texts` (punctuation left out)."""
    return {t.lower() for x in texts for t in _WORD.findall(x)}


def substitute_span(text: str, answers: Sequence[str], new: str) -> str:
    """`text` with every occurrence of its gold answer (any spacing) replaced by `new`."""
    for a in answers:
        pat = answer_pattern(a)
        if pat and pat.search(text):
            return pat.sub(lambda _: new, text)
    raise PerturbationError(f"no gold answer {answers[0]!r} in the gold text")


def hard_distractors(
    question: str, search: Searcher, by_id: dict[str, Chunk], exclude: set[str], answers: Sequence[str], k: int
) -> list[Chunk]:
    """The k best-scoring chunks that are not excluded and hold no gold answer."""
    out: list[Chunk] = []
    if k <= 0:
        return out
    for cid in search([question], k + len(exclude) + 20)[0]:
        if cid in exclude or (answers and find_answer(by_id[cid].text, answers)):
            continue
        out.append(by_id[cid])
        if len(out) == k:
            break
    return out


def _pc(c: Chunk) -> PresentedChunk:
    return PresentedChunk(c.chunk_id, c.text, c.source, c.date)


def corpus_scenarios(
    items: Sequence[QAItem],
    chunks: Sequence[Chunk],
    *,
    name: str,
    knowledge: str = "unknown",
    seed: int = 0,
    search: Searcher | None = None,
    distractors: int = 1,
    types: Sequence[str] = TRAINABLE,
    conflicts: Literal["test", "train", "none"] = "test",
    conflicts_per_item: int = 1,
    train_conflicts: int = 1,
    conflict_seed: int = 0,
    outdated: Mapping[str, Versions] | None = None,
    pool: Sequence[str] | Mapping[str, str | None] | None = None,
    exclude: Mapping[str, Collection[str]] | None = None,
    stale: Mapping[str, OlderValue] | None = None,
    snapshot: int | None = None,
) -> list[Scenario]:
    """Scenarios of `types` for each item (see the module docstring); `chunks` are the KB (or the
    part of it a training split may show), `pool` the answers substitutes are drawn from (answer ->
    its question's class, `perturb.answer_pool`; a plain list names no class).
    `conflicts_per_item` conflict passages (drawn by `conflict_seed`, the same for test and training)
    are the test's; `"train"` takes up to `train_conflicts` of the others. `exclude`: fact id ->
    chunk ids never shown as its distractors (training rows keep out the test's irrelevant chunks).
    `stale`: qid -> the older version a fact was taught in (scenarios/kb_updates.py); such a fact gets
    the `update` scenario only (the current chunk as it is, the older answer superseded), dated after
    `snapshot` where one is given."""
    by_id = {c.chunk_id: c for c in chunks}
    search = search or bm25_searcher(chunks)
    pool = answer_pool(items) if pool is None else pool if isinstance(pool, Mapping) else dict.fromkeys(pool)
    outdated = outdated or {}
    out: list[Scenario] = []
    for it in items:
        if not it.answers and not it.unanswerable:
            continue  # retrieval only: nothing to score an answer against
        missing = [r for r in it.relevant_ids if r not in by_id]
        if missing:
            raise RecordError(f"{it.qid}: relevant chunk ids not in the corpus: {', '.join(missing)}")
        # per-item stream, stable under subsetting; training draws apart from the test's values
        rng = random.Random(f"{seed}/{name}/{it.qid}" + ("/train" if conflicts == "train" else ""))
        base = dict(
            fact_id=f"{name}/{it.qid}",
            question=it.question,
            gold_answers=it.answers,
            relevant_ids=it.relevant_ids,
            knowledge=knowledge,
            language=it.language,
            source_set=name,
            cluster=it.cluster or (by_id[it.relevant_ids[0]].doc_id if it.relevant_ids else ""),
        )
        qid = f"{name}/{it.qid}"
        own = set(it.relevant_ids) | set((exclude or {}).get(f"{name}/{it.qid}", ()))
        if it.unanswerable:
            if "unanswerable" in types:
                hard = hard_distractors(it.question, search, by_id, own, (), distractors + 1)
                out.append(
                    Scenario(
                        qid=f"{qid}/unanswerable",
                        scenario="unanswerable",
                        presented=tuple(map(_pc, hard)),
                        context_answer=None,
                        **base,
                    )
                )
            continue
        gold, span = gold_of(it, by_id)
        extra = hard_distractors(it.question, search, by_id, own, it.answers, distractors)

        def mix(first: PresentedChunk, extra=extra, rng=rng) -> tuple[PresentedChunk, ...]:
            shown = [first, *map(_pc, extra)]  # this item's distractors and generator, bound now
            rng.shuffle(shown)
            return tuple(shown)

        taught_old = (stale or {}).get(it.qid)
        if taught_old is not None:  # the memory is the older answer: the current chunk is the update
            if "update" in types:
                new = _pc(gold) if snapshot is None else replace(_pc(gold), date=updated_in(snapshot, it.qid))
                out.append(
                    Scenario(
                        qid=f"{qid}/update",
                        scenario="update",
                        presented=mix(new),
                        context_answer=span or it.answers[0],
                        superseded=(taught_old.answer,),
                        **base,
                    )
                )
            continue
        if "consistent" in types:
            out.append(
                Scenario(
                    qid=f"{qid}/consistent",
                    scenario="consistent",
                    presented=mix(_pc(gold)),
                    context_answer=span or it.answers[0],
                    **base,
                )
            )
        if "factual_error" in types:
            k = conflicts_per_item, train_conflicts
            olders = tuple(o.answer for o in outdated.get(it.qid, ()))
            out += _factual_errors(it, gold, span, conflicts, k, conflict_seed, rng, pool, mix, qid, base, olders)
        if "fabricated" in types and conflicts == "test":
            olders = tuple(o.answer for o in outdated.get(it.qid, ()))
            fresh = random.Random(f"{seed}/{name}/{it.qid}/fabricated")  # the other cells' draws stay as they were
            out += _fabricated(it, gold, span, conflicts_per_item, conflict_seed, fresh, pool, mix, qid, base, olders)
        old = _older(outdated.get(it.qid, ()), it.qid, conflict_seed, conflicts)
        if "outdated" in types and old is not None:
            text = (
                old.text if old.text is not None else (substitute_span(gold.text, it.answers, old.answer) if span else None)
            )
            if text is not None:
                pc = PresentedChunk(f"{gold.chunk_id}~old", text, gold.source, old.date, replaces=gold.chunk_id)
                out.append(
                    Scenario(
                        qid=f"{qid}/outdated", scenario="outdated", presented=mix(pc), context_answer=old.answer, **base
                    )
                )
        if "irrelevant" in types:
            hard = hard_distractors(it.question, search, by_id, own, it.answers, distractors + 1)
            if hard:
                out.append(
                    Scenario(
                        qid=f"{qid}/irrelevant",
                        scenario="irrelevant",
                        presented=tuple(map(_pc, hard)),
                        context_answer=None,
                        removes=tuple(it.relevant_ids),
                        **base,
                    )
                )
    return out


def updated_in(snapshot: int, qid: str) -> str:
    """The year an update of `qid` is dated: one to three years after `snapshot` (stable per fact,
    the same for a training row and a test item, since a date is metadata and not the value)."""
    return str(snapshot + 1 + zlib.crc32(f"updated/{qid}".encode()) % 3)


def undated(scenarios: Sequence[Scenario]) -> list[Scenario]:
    """`scenarios` with every presented source's date removed: a run without `data.snapshot` shows
    sources undated, to the base model and the LoRA alike."""
    return [replace(s, presented=tuple(replace(p, date=None) for p in s.presented)) for s in scenarios]


def _older(versions: Versions, qid: str, seed: int, conflicts: str) -> OlderValue | None:
    """The version an outdated scenario shows: the test's; for training another where there is one,
    else the test's too (a row that shows a tested passage is dropped by the row builder)."""
    if not versions:
        return None
    test = held_out_older(versions, qid, seed)
    return next((o for o in versions if o is not test), test) if conflicts == "train" else test


def _factual_errors(it, gold, span, conflicts, k, seed, rng, pool, mix, qid, base, olders=()) -> list[Scenario]:
    chosen: tuple[int, ...] = ()
    if it.conflicts and conflicts != "none":
        test = held_out_conflicts(it, seed, k[0])
        chosen = test if conflicts == "test" else tuple(i for i in range(len(it.conflicts)) if i not in test)[: k[1]]
    out = []
    for j in chosen:
        c = it.conflicts[j]
        pc = PresentedChunk(f"{gold.chunk_id}~fake{j}", c.text, gold.source, gold.date, replaces=gold.chunk_id)
        out.append(
            Scenario(
                qid=f"{qid}/factual_error" + (f"/{j}" if len(chosen) > 1 else ""),
                scenario="factual_error",
                presented=mix(pc),
                context_answer=c.answer,
                **base,
            )
        )
    if out or span is None:
        return out
    fake = _fake(it, span, rng, pool, olders)  # never an item's own older answer: that is an outdated context
    if fake is None:
        return []
    pc = PresentedChunk(
        f"{gold.chunk_id}~fe", substitute_span(gold.text, it.answers, fake), gold.source, gold.date, replaces=gold.chunk_id
    )
    return [Scenario(qid=f"{qid}/factual_error", scenario="factual_error", presented=mix(pc), context_answer=fake, **base)]


def _fake(it: QAItem, value: str, rng: random.Random, pool, olders: Sequence[str]) -> str | None:
    """A wrong value of `value`'s type, from answers to questions of `it`'s class, that is none of
    the item's older answers (an older answer is an outdated context, not a fabricated one)."""
    cjk = answer_type(value) == "cjk"
    same_script = same_class({a: c for a, c in pool.items() if (answer_type(a) == "cjk") == cjk}, it.question)
    try:
        for _ in range(20):
            fake = substitute_value(value, rng, same_script)
            if norm_text(fake) not in {norm_text(o) for o in olders}:
                return fake
    except PerturbationError:
        return None
    return None


def _fabricated(it, gold, span, k, seed, rng, pool, mix, qid, base, olders=()) -> list[Scenario]:
    """The `fabricated` cell: a wrong value in a new passage of another form than the KB's chunk, in
    the gold chunk's place. The set's own conflict passages where it has more than the factual-error
    cell shows (the next one in the seeded order), else a question-and-answer note (`NOTE`) stating
    a type-kept fake."""
    if it.conflicts:
        order = list(range(len(it.conflicts)))
        random.Random(f"{seed}/conflicts/{it.qid}").shuffle(order)  # held_out_conflicts' order
        if len(order) <= k:
            return []
        c = it.conflicts[order[k]]
        text, value = c.text, c.answer
    else:
        value = _fake(it, span or it.answers[0], rng, pool, olders)
        if value is None:
            return []
        text = NOTE.get(it.language, NOTE["en"]).format(q=it.question.strip(), v=value.strip().rstrip("."))
    pc = PresentedChunk(f"{gold.chunk_id}~new", text, gold.source, gold.date, replaces=gold.chunk_id)
    return [Scenario(qid=f"{qid}/fabricated", scenario="fabricated", presented=mix(pc), context_answer=value, **base)]
