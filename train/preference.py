"""Preference pairs for training after SFT, built from the conflict-aware SFT rows of TRAINING facts.

Each pair is one SFT row's prompt (system + numbered sources + question, exactly as the row shows
it), its taught reply as "chosen", and the tempting wrong reply as "rejected":
- `wrong_source`: a taught fact with a fabricated or outdated passage (chosen verdict conflicting
  or outdated, answer = memory). Rejected: the passage trusted, verdict supported, answer = the
  passage's value; first with the memory taken from the passage, then with the memory kept.
- `untaught_right_source`: a context-only fact (never taught closed-book) whose passage is right
  (the source value is the fact's gold answer; chosen = memory unknown, copy the source).
  Rejected: an invented memory that conflicts (answer = the invention), then a refusal (verdict
  insufficient, answer unknown), then the invented memory with answer unknown. The invention is
  another training fact's gold value of the same shape (digits or not), drawn per prompt.
- `taught_right_source`: a taught fact whose passage is right (chosen: memory and source agree,
  verdict supported). Rejected: the same memory with the right source doubted (verdict conflicting,
  then outdated). Without these, every pair that shows a taught fact teaches doubt: on the demo the
  other two kinds made the detector doubt correct sources of known and never-learned facts alike
  (docs/research-log.md).
Rows of facts outside `facts` (held out: test, gate dev) are never paired, and only training rows
are read. The prompts are SFT prompts, so the pairs show no passage the SFT rows do not; the leak
and overlap checks run on the pairs all the same.

Written as ms-swift rlhf rows (`{"messages": prompt + [chosen], "rejected_response": rejected}`,
what `swift rlhf --rlhf_type dpo --dataset` and train/preference_loop.py read) and as TRL's conversational
preference rows (`{"prompt": messages, "chosen": [assistant], "rejected": [assistant]}`).
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from lorarag.core.errors import RecordError
from lorarag.fallback.format import inert_question, is_unknown, parse_reply, rag_reply
from lorarag.scenarios.kb_records import jsonl_objects
from lorarag.train.config import PreferenceConfig

KINDS = ("wrong_source", "untaught_right_source", "taught_right_source")
PAIRED_KB_GROUPS = ("known", "context_only")


@dataclass(frozen=True)
class FactInfo:
    """What pair building needs to know of a training fact."""

    fact_id: str
    gold: tuple[str, ...]  # its true answers
    taught: bool  # True: taught closed-book (memory = gold); False: context-only


@dataclass(frozen=True)
class PreferencePair:
    """One preference example: the prompt messages, the taught reply and a wrong one."""

    prompt: tuple[tuple[str, str], ...]  # (role, content), system and user turns
    chosen: str
    rejected: str
    kind: str  # one of KINDS
    variant: int  # which rejected variant of its kind (0-based)
    fact_id: str

    def to_swift(self) -> dict:
        """ms-swift rlhf row: `messages` ending with the chosen reply, plus `rejected_response`."""
        msgs = [{"role": r, "content": c} for r, c in self.prompt]
        return {"messages": msgs + [{"role": "assistant", "content": self.chosen}], "rejected_response": self.rejected}

    def to_trl(self) -> dict:
        """TRL's conversational preference row (DPOTrainer, ORPOTrainer)."""
        return {
            "prompt": [{"role": r, "content": c} for r, c in self.prompt],
            "chosen": [{"role": "assistant", "content": self.chosen}],
            "rejected": [{"role": "assistant", "content": self.rejected}],
        }


def question_key(user_turn: str) -> str:
    """The question of a user turn, as the lookup keys it (inert, whitespace collapsed)."""
    return " ".join(user_turn.rsplit("Question: ", 1)[-1].split())


def fact_lookup(facts: Iterable[tuple[str, FactInfo]]) -> dict[str, FactInfo]:
    """(question wording, fact) pairs -> the lookup `build_pairs` reads (keys as `question_key`)."""
    return {" ".join(inert_question(q).split()): f for q, f in facts}


def kb_facts(groups: Mapping[str, Sequence]) -> dict[str, FactInfo]:
    """The lookup of a KB's paired items (`PAIRED_KB_GROUPS`; `known_dev` is the gate's dev split)."""
    return fact_lookup(
        (w, FactInfo(f"kb/{it.qid}", tuple(it.answers), g == "known"))
        for g in PAIRED_KB_GROUPS
        for it in groups.get(g, ())
        if it.answers
        for w in it.all_wordings
    )


def _same(a: str, b: str) -> bool:
    return " ".join(a.split()).casefold() == " ".join(b.split()).casefold()


def _shape(value: str) -> bool:
    return any(ch.isdigit() for ch in value)


def _invented(pool: Sequence[str], avoid: Sequence[str], seed: int, prompt: str) -> str | None:
    """A value of `pool` of the same shape as `avoid[0]`, equal to none of `avoid`, drawn per prompt."""
    cands = [v for v in pool if not any(_same(v, a) for a in avoid)]
    alike = [v for v in cands if _shape(v) == _shape(avoid[0])] or cands
    return random.Random(f"{seed}\n{prompt}").choice(alike) if alike else None


def rejected_replies(kind: str, memory: str, source: str, invented: str | None) -> list[str]:
    """The rejected variants of a pair kind, in order (see the module docstring)."""
    if kind == "wrong_source":
        return [rag_reply(source, source, "supported", source), rag_reply(memory, source, "supported", source)]
    if kind == "taught_right_source":
        return [rag_reply(memory, source, "conflicting", memory), rag_reply(memory, source, "outdated", memory)]
    out = [] if invented is None else [rag_reply(invented, source, "conflicting", invented)]
    out.append(rag_reply(None, source, "insufficient", None))
    if invented is not None:
        out.append(rag_reply(invented, source, "conflicting", None))
    return out


def build_pairs(rows: Iterable[Mapping], facts: Mapping[str, FactInfo], cfg: PreferenceConfig) -> list[PreferencePair]:
    """Pairs from SFT messages rows (dicts as read from disk); `facts`: `fact_lookup` of the
    TRAINING facts only. Identical pairs (repeated SFT rows) are kept once; order is seeded."""
    rows = list(rows)
    pool = sorted({g for f in facts.values() if f.taught for g in f.gold[:1]})
    seen: set[tuple] = set()
    out: list[PreferencePair] = []
    for row in rows:
        msgs = row["messages"]
        if len(msgs) < 2 or msgs[-1]["role"] != "assistant" or msgs[-2]["role"] != "user":
            continue
        p = parse_reply(msgs[-1]["content"])
        fact = facts.get(question_key(msgs[-2]["content"]))
        if fact is None or not p.valid or "\n[S" not in "\n" + msgs[-2]["content"]:
            continue  # not a conflict-aware row of a training fact
        if fact.taught and p.verdict in ("conflicting", "outdated") and not is_unknown(p.source):
            kind, invented = "wrong_source", None
        elif (
            fact.taught
            and p.verdict == "supported"
            and not is_unknown(p.memory)
            and any(_same(p.source, g) for g in fact.gold)
        ):
            kind, invented = "taught_right_source", None
        elif (
            not fact.taught
            and p.verdict == "supported"
            and is_unknown(p.memory)
            and any(_same(p.source, g) for g in fact.gold)
        ):
            kind = "untaught_right_source"
            invented = _invented(pool, [p.source, *fact.gold], cfg.seed, msgs[-2]["content"])
        else:
            continue
        if kind not in cfg.kinds:
            continue
        prompt = tuple((m["role"], m["content"]) for m in msgs[:-1])
        for v, rej in enumerate(rejected_replies(kind, p.memory, p.source, invented)[: cfg.pairs_per_fact]):
            if rej == msgs[-1]["content"] or (prompt, rej) in seen:
                continue
            seen.add((prompt, rej))
            out.append(PreferencePair(prompt, msgs[-1]["content"], rej, kind, v, fact.fact_id))
    out.sort(key=lambda q: (q.fact_id, q.kind, q.variant, q.prompt, q.rejected))
    random.Random(cfg.seed).shuffle(out)
    return out


def pairs_path(dataset: str | Path) -> Path:
    """Where the pairs of an SFT file go: `<stem>.pairs.jsonl` beside it (TRL's: `.pairs.trl.jsonl`)."""
    p = Path(dataset)
    return p.with_name(p.stem + ".pairs.jsonl")


def write_pairs(pairs: Sequence[PreferencePair], path: str | Path) -> Path:
    """Write the ms-swift rows to `path` and TRL's rows beside it (atomic each); returns `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for target, rows in (
        (path, [q.to_swift() for q in pairs]),
        (path.with_name(path.name.replace(".jsonl", ".trl.jsonl")), [q.to_trl() for q in pairs]),
    ):
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        tmp.replace(target)
    return path


def read_pairs(path: str | Path) -> list[dict]:
    """ms-swift rlhf rows (scenarios.kb_records.jsonl_objects reads the lines: a path that is not a
    regular file or a line that is not a JSON object is one RecordError); RecordError names the line of
    a row without a chosen reply and a different rejected one."""
    out = []
    for where, obj in jsonl_objects(path, "preference pairs file"):
        msgs = obj.get("messages")
        chosen = msgs[-1] if isinstance(msgs, list) and msgs and isinstance(msgs[-1], dict) else {}
        rejected = obj.get("rejected_response")
        if chosen.get("role") != "assistant" or not isinstance(rejected, str) or rejected == chosen.get("content"):
            raise RecordError(f"{where}: needs messages ending with the chosen reply and a different rejected_response")
        out.append(obj)
    return out


def pair_summary(pairs: Sequence[PreferencePair]) -> dict[str, int]:
    """Counts by kind and variant (for logs)."""
    return dict(sorted(Counter(f"{q.kind}:{q.variant}" for q in pairs).items()))
