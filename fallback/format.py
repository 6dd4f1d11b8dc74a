"""The LoRA's conversation format: one definition shared by SFT data (train/) and inference.

The conflict-aware reply states what the model remembers BEFORE judging the source, because
stating its own memory first is what makes the comparison learnable (measured: with the
verdict first the detector stayed at chance):

    memory: <value | unknown> | source: <value | none> | verdict: <label> | answer: <value | unknown>

Closed-book replies are the bare answer. Both prompts use short system messages (SmolLM2's
ChatML template inserts a long default system prompt when none is given).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from lorarag.rag.prompt import dated, inert_question, neutralise

VERDICTS = ("supported", "conflicting", "outdated", "irrelevant", "insufficient")
UNKNOWN = "unknown"
NONE = "none"

# In every conflict-aware training row; a shorter wording trained faster but its adapter fell back more
# often on unknown facts (docs/research-log.md), so the demo keeps this one.
SYSTEM_RAG = (
    "You answer questions using numbered sources and your own knowledge. First say what you "
    "remember, then what the sources say, then judge the sources, then answer."
)
SYSTEM_CLOSED_BOOK = "You answer questions from your own knowledge in a few words."

# The reply starts with this literal; the gate reads P(" unknown") right after it.
MEMORY_PREFIX = "memory:"


@dataclass(frozen=True)
class SourceText:
    """One numbered source as shown to the model."""

    text: str
    date: str | None = None


@dataclass(frozen=True)
class ParsedReply:
    """The four fields of a conflict-aware reply; `valid` is False when it did not parse."""

    memory: str
    source: str
    verdict: str  # one of VERDICTS, or "invalid"
    answer: str
    valid: bool


def rag_user_turn(question: str, sources: Sequence[SourceText]) -> str:
    """User message: numbered sources then the question (retrieved text stays in this block)."""
    lines = ["Sources:"]
    for i, s in enumerate(sources, 1):
        # One line per source (the truncation rule cuts whole lines), made inert like the grounded
        # prompt's: no chat-template control strings, no forged [Sn] labels.
        body = " ".join(neutralise(s.text).split())
        lines.append(f"[S{i}] {dated(s.date)}{body}")
    if not sources:
        lines.append("(no sources)")
    lines.append(f"Question: {inert_question(question)}")
    return "\n".join(lines)


def closed_book_user_turn(question: str) -> str:
    """User message for a closed-book question."""
    return f"Question: {inert_question(question)}"


def rag_reply(memory: str | None, source: str | None, verdict: str, answer: str | None) -> str:
    """The target reply for SFT: `memory: … | source: … | verdict: … | answer: …`."""
    if verdict not in VERDICTS:
        raise ValueError(f"unknown verdict {verdict!r}")
    return (
        f"{MEMORY_PREFIX} {memory or UNKNOWN} | source: {source or NONE} | verdict: {verdict} | answer: {answer or UNKNOWN}"
    )


_REPLY = re.compile(
    r"^\s*memory:\s*(?P<memory>.*?)\s*\|\s*source:\s*(?P<source>.*?)\s*\|\s*"
    r"verdict:\s*(?P<verdict>[a-z]+)\s*\|\s*answer:\s*(?P<answer>.*?)\s*$",
    re.S,
)


def parse_reply(text: str) -> ParsedReply:
    """Parse a conflict-aware reply; anything off-format gives verdict "invalid", never raises."""
    m = _REPLY.match(text.strip().split("\n")[0])
    if not m or m.group("verdict") not in VERDICTS:
        return ParsedReply("", "", "invalid", "", False)
    return ParsedReply(m.group("memory"), m.group("source"), m.group("verdict"), m.group("answer"), True)


def is_unknown(value: str) -> bool:
    """True when a memory/answer field says the model does not know."""
    return value.strip().lower() in (UNKNOWN, NONE, "")
