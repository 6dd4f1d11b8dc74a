"""Paraphrased wordings for taught questions that the set words only once (opt-in: `data.paraphrase`).

A set like SQuAD or PIAF asks each question in one wording, so the LoRA learns each fact from one
sentence. With `data.paraphrase.enabled`, the run's own generator (`rag.generator`, the base model
without the adapter) rewrites each taught question that has a single wording, once per prompt
(greedy, so the same run gives the same paraphrases), and each reply that passes the checks is
added as a training wording. A known (test) item with a kept paraphrase is then trained in the
generated wordings only and tested in the set's own, which no SFT row asks (scenarios/kb_wordings.py);
the gate's known-dev items are trained in all of theirs. Checks, in order (the first
failing one is the reason recorded): empty; not a question (no `?`/`？` at the end); the original
again (after SQuAD normalisation); holds a gold answer (it would teach the answer from the
question); a length outside 1/2-2x the original's words. Never-learned questions are never
paraphrased, so the leak check's guarantee is untouched.

Written to `<run>/data/paraphrases.jsonl` (every reply with its verdict) beside a stamp of the
generator settings, prompts and questions; a rerun with the same stamp reads it back.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from lorarag.eval.answer_metrics import normalize_text
from lorarag.rag.generators.base import Generator, Message
from lorarag.rag.records import read_jsonl, write_jsonl
from lorarag.scenarios.kb_labels import find_answer
from lorarag.scenarios.kb_records import QAItem
from lorarag.scenarios.kb_splits import TAUGHT

PROMPTS = (
    "Rewrite the question below in other words, keeping its meaning exactly. Reply with the rewritten "
    "question only.\n\nQuestion: {q}",
    "Ask the question below in another way, starting with a different word. Keep its meaning. Reply with "
    "the question only.\n\nQuestion: {q}",
    "Rephrase the question below the way someone would ask it in conversation, with the same meaning. "
    "Reply with the question only.\n\nQuestion: {q}",
)
FILE, STAMP = "paraphrases.jsonl", "paraphrases.stamp.json"


@dataclass(frozen=True)
class Paraphrase:
    """One generated rewording of a taught question and whether it became a training wording."""

    qid: str
    prompt: int  # index into PROMPTS
    text: str
    why_not: str = ""  # empty: kept


def clean(reply: str) -> str:
    """The reply's first non-empty line without quotes or a leading `Question:`."""
    line = next((x.strip() for x in reply.splitlines() if x.strip()), "")
    for lead in ("rewritten question:", "question:"):
        if line.lower().startswith(lead):
            line = line[len(lead) :].strip()
    return line.strip("\"'“”‘’ ").strip()


def rejection(original: QAItem, text: str) -> str:
    """Why `text` cannot be a training wording of `original` ("" when it can; see the module doc)."""
    if not text:
        return "empty"
    if not text.endswith(("?", "？")):
        return "not a question"
    if normalize_text(text, original.language) == normalize_text(original.question, original.language):
        return "the original"
    if find_answer(text, original.answers):
        return "holds the answer"
    n, m = len(text.split()), len(original.question.split())
    if original.language not in ("zh", "ja") and not m / 2 <= n <= 2 * m:
        return "length"
    return ""


def single_wording(groups: dict[str, list[QAItem]]) -> list[QAItem]:
    """The taught, answerable questions that have no other wording."""
    return [it for g in TAUGHT for it in groups[g] if it.answers and not it.wordings]


def paraphrase(items: Sequence[QAItem], generator: Generator, prompts: int, max_new_tokens: int) -> list[Paraphrase]:
    """Each item rewritten once per prompt (greedy, one batch), each reply checked."""
    asks = [(it, i) for it in items for i in range(prompts)]
    convs = [[Message("user", PROMPTS[i].format(q=it.question))] for it, i in asks]
    gens = generator.generate(convs, max_new_tokens=max_new_tokens) if convs else []
    out = []
    for (it, i), g in zip(asks, gens):
        text = clean(g.text)
        out.append(Paraphrase(it.qid, i, text, rejection(it, text)))
    return out


def with_paraphrases(groups: dict[str, list[QAItem]], rows: Sequence[Paraphrase]) -> dict[str, list[QAItem]]:
    """New groups whose taught items carry their kept paraphrases as extra wordings (deduplicated)."""
    kept: dict[str, list[str]] = {}
    for p in rows:
        if not p.why_not and p.text not in kept.setdefault(p.qid, []):
            kept[p.qid].append(p.text)
    return {
        g: [
            replace(it, wordings=tuple(kept[it.qid])) if g in TAUGHT and kept.get(it.qid) and not it.wordings else it
            for it in v
        ]
        for g, v in groups.items()
    }


def paraphrases_for(
    groups: dict[str, list[QAItem]],
    folder: Path,
    settings: dict,
    prompts: int,
    make_generator: Callable[[], Generator],
    max_new_tokens: int,
) -> list[Paraphrase]:
    """The paraphrases of `single_wording(groups)`: read back when `folder` holds them under the
    same stamp (generator `settings`, prompts, questions), else generated and written."""
    items = single_wording(groups)
    stamp = {
        "generator": settings,
        "prompts": list(PROMPTS[:prompts]),
        "max_new_tokens": max_new_tokens,
        "questions": hashlib.sha256("\n".join(f"{it.qid}\t{it.question}" for it in items).encode()).hexdigest(),
    }
    f, s = folder / FILE, folder / STAMP
    if f.is_file() and s.is_file() and json.loads(s.read_text(encoding="utf-8")) == stamp:
        return read_jsonl(f, Paraphrase)
    generator = make_generator()
    try:
        rows = paraphrase(items, generator, prompts, max_new_tokens)
    finally:
        generator.close()
    folder.mkdir(parents=True, exist_ok=True)
    write_jsonl(f, rows)
    s.write_text(json.dumps(stamp, indent=1, ensure_ascii=False), encoding="utf-8")
    return rows


def tally(rows: Sequence[Paraphrase]) -> dict:
    """For the run summary: questions asked, paraphrases kept, rejections by reason."""
    why: dict[str, int] = {}
    for p in rows:
        if p.why_not:
            why[p.why_not] = why.get(p.why_not, 0) + 1
    return {
        "questions": len({p.qid for p in rows}),
        "replies": len(rows),
        "kept": sum(not p.why_not for p in rows),
        "rejected": why,
        "questions_with_one": len({p.qid for p in rows if not p.why_not}),
    }
