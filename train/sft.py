"""SFT data from a knowledge base (ms-swift `messages`), and its leak check.

Every prompt and reply comes from fallback/format.py, so training and inference match. Rows:
- closed-book rows for every taught fact (`known` and `known_dev`) in every wording its item
  carries, `knowledge_repeats` copies each (study/kb.py passes known items without the wording
  their test asks, where they have one to spare: scenarios/kb_wordings.py);
- conflict-aware rows for taught facts (memory = the gold answer): consistent, factual error
  (the set's conflict passages not reserved for the test, else our type-aware substitution),
  outdated where older versions were supplied, irrelevant (distractors only), unanswerable;
- facts taught in their older version (`data.update_fraction`, scenarios/kb_updates.py): closed-book
  rows with the older answer; an `update` row (the current chunk: memory the older answer, verdict
  supported, answer the current one) for those the test does not ask; with `update_twins` and
  `data.snapshot`, also the factual-error rows' passages dated after the snapshot, as right newer
  sources (scenarios/kb_updates.dated_twins);
- conflict-aware rows for `context_only` facts with memory "unknown" (copy the source);
- `rag_phrasings: alternate` puts a fact's consistent + factual-error pair on one wording and its
  other contexts on the next (one wording: all on it); `all` repeats every context per wording.
Distractors come only from chunks that answer no held-out question.

`leak_check` proves on the written rows that nothing held out reached training: no wording
of a never-learned question (test or the gate's dev split) in any user turn, no chunk that
answers one among the numbered sources, no test passage (a test scenario's fabricated or
perturbed source), and no known item's held-out test wording in any user turn either.
"""

from __future__ import annotations

import json
import random
import zlib
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from lorarag.core.errors import ConfigError, RecordError
from lorarag.fallback.format import (
    SYSTEM_CLOSED_BOOK,
    SYSTEM_RAG,
    SourceText,
    closed_book_user_turn,
    rag_reply,
    rag_user_turn,
)
from lorarag.rag.prompt import inert_question, neutralise, prompt_passages, prompt_question, strip_dated
from lorarag.rag.records import Chunk
from lorarag.scenarios.from_corpus import OlderValue, Versions, corpus_scenarios, undated
from lorarag.scenarios.kb_records import QAItem
from lorarag.scenarios.kb_splits import HELD_OUT, TAUGHT
from lorarag.scenarios.kb_updates import asked_updates, dated_twins
from lorarag.scenarios.perturb import Searcher, answer_pool, bm25_searcher
from lorarag.scenarios.records import Scenario
from lorarag.train.config import SFTConfig


class LeakError(RecordError):
    """Training data mentions an evaluation fact or a held-out phrasing."""


@dataclass(frozen=True)
class SFTRow:
    """One ms-swift `messages` row plus what it teaches (the metadata is not written)."""

    messages: tuple[tuple[str, str], ...]  # (role, content)
    kind: str  # "knowledge", "refusal" or "rag"
    verdict: str | None
    fact_id: str
    scenario: Scenario | None = None  # what a conflict-aware row shows (train/rag_sft.py re-poses it)

    def to_swift(self) -> dict:
        """The JSON object ms-swift reads: {"messages": [{"role", "content"}, ...]}."""
        return {"messages": [{"role": r, "content": c} for r, c in self.messages]}


def knowledge_row(question: str, answer: str, fact_id: str, kind: str = "knowledge") -> SFTRow:
    """A closed-book example."""
    return SFTRow(
        (("system", SYSTEM_CLOSED_BOOK), ("user", closed_book_user_turn(question)), ("assistant", answer)),
        kind,
        None,
        fact_id,
    )


def target(s: Scenario, knows: bool) -> tuple[str, str]:
    """(verdict, reply) that the LoRA should give for scenario `s`; `knows`: the fact was taught."""
    src = s.context_answer
    if s.scenario == "update":  # the source supersedes what was taught: memory states it, the source wins
        return "supported", rag_reply(s.superseded[0] if knows else None, src, "supported", src)
    memory = s.gold_answers[0] if knows and s.gold_answers else None
    if memory is None:  # nothing to compare with: copy the source, or say there is nothing
        verdict = "supported" if src else "insufficient"
        return verdict, rag_reply(None, src, verdict, src)
    verdict = {
        "consistent": "supported",
        "factual_error": "conflicting",
        "fabricated": "conflicting",
        "outdated": "outdated",
        "irrelevant": "irrelevant",
        "unanswerable": "insufficient",
    }[s.scenario]
    return verdict, rag_reply(memory, src, verdict, memory)


def rag_row(s: Scenario, knows: bool) -> SFTRow:
    """A conflict-aware RAG example for scenario `s`."""
    verdict, reply = target(s, knows)
    user = rag_user_turn(s.question, [SourceText(p.text, p.date) for p in s.presented])
    return SFTRow((("system", SYSTEM_RAG), ("user", user), ("assistant", reply)), "rag", verdict, s.fact_id, s)


_PAIR = ("consistent", "factual_error")
CLAIMED = ("factual_error", "fabricated", "outdated")  # contexts asserting a wrong value under a flawed verdict


def claim_key(value: str | None) -> str:
    """A context's value as compared across rows and test items: lower-cased, one space, no edge
    punctuation (`1998.` and `1998` are one claim)."""
    return " ".join((value or "").casefold().split()).strip(" .,;:!?\"'")


def tested_claims(test: Iterable[Scenario]) -> dict[str, set[str]]:
    """Fact id -> the values its factual-error and outdated test contexts assert."""
    out: dict[str, set[str]] = {}
    for s in test:
        if s.scenario in CLAIMED and s.context_answer:
            out.setdefault(s.fact_id, set()).add(claim_key(s.context_answer))
    return out


def edited_chunks(test: Iterable[Scenario]) -> set[str]:
    """The KB chunk ids whose edited copy (a perturbed or older version in the chunk's place) a
    factual-error or outdated test context shows: training shows no flawed edit of them."""
    return {p.replaces for s in test if s.scenario in CLAIMED for p in s.presented if p.replaces}


def shown(text: str) -> str:
    """A passage as a source line shows it (fallback/format.rag_user_turn): inert, one line."""
    return strip_dated(" ".join(neutralise(text).split()))


def _question(text: str) -> str:
    return " ".join(text.split()).casefold()


def leak_check(
    rows: Iterable[SFTRow | dict],
    held_out: Sequence[QAItem],
    chunks: dict[str, Chunk],
    test_passages: Iterable[str] = (),
    test_wordings: Mapping[str, str] | None = None,
) -> None:
    """Raise LeakError naming the first rows that show a held-out question, a chunk answering one,
    a test passage, or a known item's held-out test wording (`test_wordings`: wording -> qid,
    scenarios/kb_wordings.held_out)."""
    questions = {_question(w): f"the question of held-out {it.qid}" for it in held_out for w in it.all_wordings}
    questions.update(wording_keys(test_wordings or {}))
    passages = {shown(chunks[c].text): f"the chunk answering held-out {it.qid}" for it in held_out for c in it.relevant_ids}
    passages.update({shown(t): "a test scenario's passage" for t in test_passages})
    problems: list[str] = []
    for i, row in enumerate(rows):
        msgs = row.to_swift()["messages"] if isinstance(row, SFTRow) else row["messages"]
        for m in msgs:
            if m["role"] != "user":
                continue
            q = _question(prompt_question(m["content"]))
            if q in questions:
                problems.append(f"row {i}: {questions[q]}")
            problems += [f"row {i}: {passages[s]}" for s in prompt_passages(m["content"]) if s in passages]
    if problems:
        raise LeakError(f"{len(problems)} leak(s) of held-out data into the SFT rows: " + "; ".join(problems[:5]))


def asked(question: str) -> str:
    """`question` as a user turn asks it (inert, on one line), case and spacing aside."""
    return _question(inert_question(question))


def wording_keys(test_wordings: Mapping[str, str]) -> dict[str, str]:
    """Each held-out test wording as asked -> what a leak of it names: the known item whose test asks it."""
    return {asked(w): f"the held-out test wording of known {q}" for w, q in test_wordings.items()}


def _wordings(s: Scenario, item: QAItem, how: str) -> tuple[str, ...]:
    ws = item.all_wordings
    if how == "all" or len(ws) == 1:
        return ws
    pair = zlib.crc32(item.qid.encode()) % len(ws)  # stable across runs
    return (ws[pair if s.scenario in _PAIR else (pair + 1) % len(ws)],)


def build_rows(
    groups: dict[str, list[QAItem]],
    chunks: Sequence[Chunk],
    cfg: SFTConfig,
    *,
    conflict_seed: int,
    conflicts_per_item: int = 1,
    outdated: Mapping[str, Versions] | None = None,
    test_passages: Iterable[str] = (),
    test_irrelevant: Mapping[str, Collection[str]] | None = None,
    searcher: Callable[[Sequence[Chunk]], Searcher] = bm25_searcher,
    stale: Mapping[str, OlderValue] | None = None,
    snapshot: int | None = None,
    test_claims: Mapping[str, Collection[str]] | None = None,
    tested_chunks: Collection[str] = (),
) -> tuple[list[SFTRow], list[SFTRow], dict]:
    """(train rows, val rows, stats) for the splits of scenarios/kb_splits.py; val rows are a seeded
    sample of the training rows (a known item's held-out wording is the test's, never val's). A
    training context that happens to equal a test passage (`test_passages`: the same substituted
    value drawn twice) is left out and counted; no row of a fact shows a chunk the test shows as
    irrelevant to it (`test_irrelevant`: fact id -> chunk ids, kept out of its distractors).
    Distractors come from `searcher(pool)` (BM25 over the pool by default), the pool being every
    chunk that answers no held-out question nor a tested update. `stale` (scenarios/kb_updates.py): facts
    taught closed-book in their older version; those the test asks get no conflict-aware row (nor does
    another question answered by the same chunk), the others an `update` row (memory the older answer,
    the source the current chunk). `snapshot` (`data.snapshot`): sources show their dates, an update's
    after that year, as the test's do; None: every source undated. `test_claims` (fact id -> the
    values its flawed test contexts assert, `claim_key`): a factual-error or outdated row of that fact
    asserting one of them is left out and counted (`same_claim_as_test`). ConflictNQ's five fabricated
    passages of a question all assert one fake answer, so a row showing another of them would teach the
    test's wrong value with its label: the cell would measure memory of that label, not detection."""
    stale = stale or {}
    tested = asked_updates(groups, stale)
    held = {c for g in HELD_OUT for it in groups[g] for c in it.relevant_ids}
    update_chunks = {c for it in groups["known"] if it.qid in tested for c in it.relevant_ids}
    pool = [c for c in chunks if c.chunk_id not in held | update_chunks]
    search = searcher(pool)
    taught = [it for g in TAUGHT for it in groups[g]]
    answers = answer_pool(taught + groups["context_only"])
    rows: list[SFTRow] = []
    for it in taught:
        for w in it.all_wordings if it.answers else ():
            answer = stale[it.qid].answer if it.qid in stale else it.answers[0]
            rows += [knowledge_row(w, answer, it.qid)] * cfg.knowledge_repeats
    common = dict(
        seed=cfg.seed,
        search=search,
        distractors=cfg.distractors,
        conflicts="train",
        conflicts_per_item=conflicts_per_item,
        conflict_seed=conflict_seed,
        pool=answers,
        exclude=test_irrelevant,
    )
    # an item sharing its chunk with a tested update (another question of the same fact) shows it in no row
    shares = {it.qid for it in taught if update_chunks & set(it.relevant_ids)}
    scenarios = corpus_scenarios(
        [it for it in taught if it.qid not in stale and it.qid not in shares],
        pool,
        name="kb",
        knowledge="known",
        outdated=outdated,
        **common,
    )
    scenarios += corpus_scenarios(
        [it for it in taught if it.qid in stale and it.qid not in tested],
        pool,
        name="kb",
        knowledge="known",
        types=("update",),
        stale=stale,
        snapshot=snapshot,
        **common,
    )
    edits = set(tested_chunks)
    twin = [s.scenario in CLAIMED and any(p.replaces in edits for p in s.presented) for s in scenarios]
    twins, scenarios = sum(twin), [s for s, t in zip(scenarios, twin) if not t]
    if cfg.update_twins > 0:  # a twin differs from its factual error in the date alone
        if snapshot is None:
            raise ConfigError("sft.update_twins needs data.snapshot: undated, a twin is its factual error verbatim")
        scenarios += dated_twins(scenarios, cfg.update_twins, snapshot, cfg.seed)
    scenarios += corpus_scenarios(
        groups["context_only"],
        pool,
        name="kb",
        knowledge="unknown",
        types=("consistent", "factual_error", "irrelevant", "unanswerable"),
        **common,
    )
    scenarios = scenarios if snapshot is not None else undated(scenarios)
    avoid = {shown(t) for t in test_passages}
    kept = [s for s in scenarios if not any(p.replaces and shown(p.text) in avoid for p in s.presented)]
    claims = test_claims or {}
    fresh = [s for s in kept if not (s.scenario in CLAIMED and claim_key(s.context_answer) in claims.get(s.fact_id, ()))]
    claimed, kept = len(kept) - len(fresh), fresh
    items = {f"kb/{it.qid}": it for it in taught + groups["context_only"]}
    for s in kept:
        for w in _wordings(s, items[s.fact_id], cfg.rag_phrasings):
            rows += [rag_row(replace(s, question=w), knows=s.knowledge == "known")] * cfg.rag_per_fact
    rng = random.Random(cfg.seed)
    rng.shuffle(rows)
    val = rng.sample(rows, max(1, round(len(rows) * cfg.val_fraction)))
    stats = {
        "same_as_test": len(scenarios) - len(kept) - claimed,
        "same_claim_as_test": claimed,
        "edited_twin_of_test": twins,
        "wordings": dict(sorted(Counter(len(it.all_wordings) for it in taught).items())),
        "taught": len(taught),
        "context_only": len(groups["context_only"]),
        "taught_older": len(stale),
        "tested_updates": len(tested),
        "update_twins": sum(s.scenario == "update" and "/update_twin" in s.qid for s in kept),
        "no_factual_error": len(
            {f"kb/{it.qid}" for it in taught if it.answers} - {s.fact_id for s in scenarios if s.scenario == "factual_error"}
        ),
    }
    return rows, val, stats


def write_sft(rows: Sequence[SFTRow], path: str | Path) -> Path:
    """Write rows as ms-swift messages JSONL (atomic)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps(r.to_swift(), ensure_ascii=False) + "\n")
    tmp.replace(path)
    return path


def read_sft(path: str | Path) -> list[dict]:
    """Read ms-swift messages JSONL; RecordError names the line of a malformed row."""
    out = []
    for i, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            roles = [m["role"] for m in obj["messages"]]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise RecordError(f"{path}:{i}: not a messages row ({exc})") from None
        if not roles or roles[-1] != "assistant":
            raise RecordError(f"{path}:{i}: last message must be the assistant's")
        out.append(obj)
    return out


def summary(rows: Sequence[SFTRow]) -> dict[str, int]:
    """Counts by kind and verdict (for logs and the results note)."""
    c = Counter(r.kind if r.kind != "rag" else f"rag:{r.verdict}" for r in rows)
    return dict(sorted(c.items()))
