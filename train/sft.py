"""SFT data: ms-swift `messages` JSONL built from the world and its scenarios.

Kinds of examples (all prompts from fallback/format.py, so training and inference match):
- knowledge: closed-book questions on `known` facts, training phrasings only, reply = value;
- refusal (`unknown_repeats` > 0): the same closed-book questions on `context_only` facts, reply =
  "unknown" (never taught closed-book, so the honest closed-book answer is to decline); with
  `phantom_orgs` > 0 also on organisations that exist nowhere (`world.phantom_questions`);
- conflict-aware RAG: numbered sources + question, reply = `rag_reply(memory, source, verdict,
  answer)`. Known facts get CONTRASTIVE PAIRS (the same question with the gold chunk and with a
  factual-error copy of identical form), outdated (dated and undated) and irrelevant contexts
  (distractors only, the gold chunk absent, as RAFT does); `context_only` facts are never
  taught, so their target copies the source with memory "unknown"; unanswerable questions get
  "insufficient"; with `updates`, known facts also get a source dated after the training snapshot
  with a new value (`update`): memory states the taught value, the verdict is `supported`, the
  answer the source's (beside the outdated rows, on the same phrasing: only the date differs).
Splits are by fact: `unknown` / `unknown_dev` organisations never appear, not even as a
distractor, and dev/test phrasings are never used; `leak_check` proves it on the written rows.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from lorarag.core.errors import RecordError
from lorarag.fallback.format import (
    SYSTEM_CLOSED_BOOK,
    SYSTEM_RAG,
    UNKNOWN,
    SourceText,
    closed_book_user_turn,
    rag_reply,
    rag_user_turn,
)
from lorarag.rag.prompt import prompt_question
from lorarag.scenarios.from_world import Trained, WorldIndex, index_world, world_scenarios
from lorarag.scenarios.records import Scenario, save_scenarios, validate_against_kb
from lorarag.scenarios.world import (
    DEV_PHRASING,
    TEST_PHRASING,
    TRAIN_GROUPS,
    World,
    build_world,
    closed_book_phrasings,
    phantom_questions,
    write_world,
)
from lorarag.train.config import SFTConfig

HELD_OUT_GROUPS = ("unknown", "unknown_dev")
# The scenario types conflict-aware rows are made of; `update` joins them with `SFTConfig.updates`.
ROW_TYPES = ("consistent", "factual_error", "outdated", "irrelevant", "unanswerable")


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
    return SFTRow((("system", SYSTEM_CLOSED_BOOK), ("user", closed_book_user_turn(question)),
                   ("assistant", answer)), kind, None, fact_id)


def target(s: Scenario, knows: bool) -> tuple[str, str]:
    """(verdict, reply) that the LoRA should give for scenario `s`; `knows`: the fact was taught."""
    src = s.context_answer
    if s.scenario == "update":  # the source supersedes what was taught: memory states it, the source wins
        return "supported", rag_reply(s.superseded[0] if knows else None, src, "supported", src)
    memory = s.gold_answers[0] if knows and s.gold_answers else None
    if memory is None:  # nothing to compare with: copy the source, or say there is nothing
        verdict = "supported" if src else "insufficient"
        return verdict, rag_reply(None, src, verdict, src)
    verdict = {"consistent": "supported", "factual_error": "conflicting", "outdated": "outdated",
               "irrelevant": "irrelevant", "unanswerable": "insufficient"}[s.scenario]
    return verdict, rag_reply(memory, src, verdict, memory)


def rag_row(s: Scenario, knows: bool) -> SFTRow:
    """A conflict-aware RAG example for scenario `s`."""
    verdict, reply = target(s, knows)
    user = rag_user_turn(s.question, [SourceText(p.text, p.date) for p in s.presented])
    return SFTRow((("system", SYSTEM_RAG), ("user", user), ("assistant", reply)), "rag", verdict, s.fact_id, s)


def _row_scenarios(world: World, cfg: SFTConfig, undated_fraction: float = 0.5
                   ) -> tuple[WorldIndex, list[Scenario], list[Scenario]]:
    """(index, train scenarios, dev scenarios) the RAG rows are made of."""
    wi = index_world(world, groups=TRAIN_GROUPS)  # distractors only from training-visible orgs
    types = ROW_TYPES + (("update",) if cfg.updates else ())
    train_sc = world_scenarios(world, wi, TRAIN_GROUPS, "train", seed=cfg.seed, distractors=cfg.distractors,
                               undated_fraction=undated_fraction, types=types)
    dev = world_scenarios(world, wi, ("known",), "dev", seed=cfg.seed + 1, distractors=cfg.distractors, types=types)
    return wi, train_sc, dev


def trained_contexts(world: World, cfg: SFTConfig, undated_fraction: float = 0.5) -> Trained:
    """What the contexts of the SFT rows (train and val) assert and show per fact: the test draws
    its flawed contexts elsewhere (scenarios/from_world.py)."""
    _, train_sc, dev = _row_scenarios(world, cfg, undated_fraction)
    return Trained.of([*train_sc, *dev])


def build_rows(world: World, cfg: SFTConfig, undated_fraction: float = 0.5) -> tuple[list[SFTRow], list[SFTRow]]:
    """(train rows, val rows): train from training phrasings of train groups, val from dev phrasing."""
    rng = random.Random(cfg.seed)
    wi, train_sc, dev = _row_scenarios(world, cfg, undated_fraction)
    rows: list[SFTRow] = []
    for f in world.by_group("known"):
        for ph in closed_book_phrasings(cfg.knowledge_phrasings):
            rows += [knowledge_row(f.questions[ph], f.value, f.fact_id)] * cfg.knowledge_repeats
    for f in world.by_group("context_only"):  # unknown_repeats 0: none, the rows as before
        for ph in closed_book_phrasings(cfg.knowledge_phrasings):
            rows += [knowledge_row(f.questions[ph], UNKNOWN, f.fact_id, "refusal")] * cfg.unknown_repeats
    for i, (_org, qs) in enumerate(phantom_questions(world, cfg.phantom_orgs, cfg.seed)):  # per (org, attribute)
        rows += [knowledge_row(qs[ph], UNKNOWN, f"phantom/{i}", "refusal")
                 for ph in closed_book_phrasings(cfg.knowledge_phrasings)]
    # Per fact, one phrasing carries the contrastive pair (consistent + factual error, same
    # question) and the other the outdated + irrelevant contexts, alternating by fact.
    for s in train_sc:
        group = "known" if s.knowledge == "known" else "context_only"
        pair_ph = _pair_phrasing(s.fact_id)
        on_pair = s.scenario in ("consistent", "factual_error")
        if cfg.rag_phrasings == "alternate" and s.scenario != "unanswerable" and (s.phrasing == pair_ph) != on_pair:
            continue
        if group == "context_only" and s.scenario in ("outdated", "update"):
            continue  # an untaught fact gives no ground to call a value outdated, or superseded
        rows += [rag_row(s, knows=group == "known")] * cfg.rag_per_fact
    rng.shuffle(rows)
    val = [rag_row(s, True) for s in dev] + [knowledge_row(f.questions[DEV_PHRASING], f.value, f.fact_id)
                                             for f in world.by_group("known")]
    rng.shuffle(val)
    n_val = max(1, round(len(rows) * cfg.val_fraction))
    return rows, val[:n_val]


def _pair_phrasing(fact_id: str) -> int:
    """Which training phrasing carries the contrastive pair of a fact (stable across runs)."""
    import zlib

    return zlib.crc32(fact_id.encode()) % 2


def leak_check(rows: Iterable[SFTRow | dict], world: World, held_phrasings: Sequence[int] = ()) -> None:
    """Raise LeakError if any row names a held-out organisation or uses a dev/test phrasing
    (`held_phrasings`: the run's further dev and test wordings, beside phrasings 2 and 3)."""
    orgs = sorted({f.org for f in world.facts if f.group in HELD_OUT_GROUPS}, key=len, reverse=True)
    held_ph = sorted({DEV_PHRASING, TEST_PHRASING, *held_phrasings})
    held = {f.questions[ph] for f in list(world.facts) + list(world.unanswerable) for ph in held_ph}
    problems: list[str] = []
    for i, row in enumerate(rows):
        msgs = row.to_swift()["messages"] if isinstance(row, SFTRow) else row["messages"]
        text = "\n".join(m["content"] for m in msgs)
        bad = [o for o in orgs if o in text]
        for m in msgs:
            if m["role"] == "user":
                q = prompt_question(m["content"])
                if q in held:
                    bad.append(f"held-out phrasing {q!r}")
        if bad:
            problems.append(f"row {i}: {bad[0]}")
    if problems:
        raise LeakError(f"{len(problems)} training row(s) leak evaluation data: " + "; ".join(problems[:5]))


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


def build_demo_data(world_cfg, sft_cfg: SFTConfig, out_dir: str | Path, train_path: str | Path,
                    val_path: str | Path | None = None) -> dict[str, Path]:
    """World documents, scenario splits and SFT JSONL for the demo, leak-checked; returns the paths.

    Layout under `out_dir`: corpus/ (Markdown), facts.jsonl, chunks.jsonl, and scenarios/
    {train,dev,test}.jsonl: train = training groups x training phrasings; dev = known facts
    (phrasing 2) + `unknown_dev` orgs; test = known facts (held-out phrasing 3) + `unknown` orgs.
    """

    out = Path(out_dir)
    world = build_world(world_cfg)
    corpus = write_world(world, out)
    wi = index_world(world)
    kb = {c.chunk_id for c in wi.chunks}
    splits = {"train": (TRAIN_GROUPS, "train"), "dev": (("known", "unknown_dev"), "dev"),
              "test": (("known", "unknown"), "test")}
    paths: dict[str, Path] = {"corpus": corpus, "chunks": out / "chunks.jsonl", "facts": out / "facts.jsonl"}
    for name, (groups, split) in splits.items():
        sc = world_scenarios(world, wi, groups, split, seed=world_cfg.seed,
                             undated_fraction=world_cfg.undated_outdated_fraction, distractors=sft_cfg.distractors)
        validate_against_kb(sc, kb)
        paths[f"scenarios_{name}"] = out / "scenarios" / f"{name}.jsonl"
        save_scenarios(paths[f"scenarios_{name}"], sc)
    rows, val = build_rows(world, sft_cfg, world_cfg.undated_outdated_fraction)
    leak_check(rows, world)
    paths["train"] = write_sft(rows, train_path)
    if val_path:
        paths["val"] = write_sft(val, val_path)
    return paths
