"""The LoRA's verdict on its sources, read from ONE scored generation pass.

The reply has the form `memory: … | source: … | verdict: <label> | answer: …` (fallback/format.py).
At the token where the verdict label starts we read the generator's `top_logprobs` and
renormalise over the first tokens of the five labels (in fp32: bf16 logits made the two top
labels tie). That gives a probability per label, usable for thresholds and ROC curves without
a second pass. The same pass also gives P(" unknown") at the first token of the memory field,
which the self-knowledge gate (fallback/gate.py) reads.

Unparseable output becomes label "invalid": counted by the caller, never an exception.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lorarag.fallback.format import MEMORY_PREFIX, UNKNOWN, VERDICTS, is_unknown, parse_reply
from lorarag.rag.generators.base import Generation

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger(__name__)

INVALID = "invalid"
_VERDICT_AT = re.compile(r"\|\s*verdict:\s*")
_MEMORY_AT = re.compile(r"^\s*memory:\s*")


@dataclass(frozen=True)
class Verdict:
    """The model's judgement of its sources, with the probability of each label."""

    label: str  # one of VERDICTS, or "invalid"
    score: float  # probability of `label` (renormalised over the five labels); 0.0 when invalid
    probs: tuple[tuple[str, float], ...]  # (label, probability) for the five labels; () if invalid
    memory: str  # what the model says it remembers ("unknown" when it does not know)
    source: str  # what the model says the sources state ("none" when nothing)
    answer: str  # the model's own final answer field
    raw: str  # the full reply text (forced prefix included)
    p_unknown: float | None = None  # P(" unknown") at the first memory token (gate input)

    @property
    def valid(self) -> bool:
        """True when the reply parsed and the label probabilities were read."""
        return self.label != INVALID

    @property
    def flag_score(self) -> float:
        """Detector score: 1 − P(supported); high = the model doubts the sources."""
        if not self.probs:
            return float("nan")
        return 1.0 - dict(self.probs)["supported"]


def label_first_tokens(tokenizer: PreTrainedTokenizerBase) -> dict[str, str]:
    """The decoded first token of " <label>" for each verdict label and for " unknown".

    Labels follow "verdict:" with a space, so the space-prefixed form is what the model emits.
    Raises ValueError when two labels share a first token (their probabilities could not be told
    apart at that position).
    """
    out: dict[str, str] = {}
    for label in (*VERDICTS, UNKNOWN):
        ids = tokenizer.encode(" " + label, add_special_tokens=False)
        out[label] = tokenizer.decode(ids[:1])
    firsts = [out[v] for v in VERDICTS]
    if len(set(firsts)) != len(firsts):
        raise ValueError(f"verdict labels share a first token under this tokenizer: {out}")
    return out


def _pairs(entry: Any) -> list[tuple[str, float]]:
    """One position's top logprobs as (token text, logprob) pairs (dict or pair sequence)."""
    if isinstance(entry, Mapping):
        return [(str(k), float(v)) for k, v in entry.items()]
    return [(str(t), float(lp)) for t, lp in entry]


def _token_starts(tokens: Sequence[str], offset: int) -> list[int]:
    starts, pos = [], offset
    for t in tokens:
        starts.append(pos)
        pos += len(t)
    return starts


def _token_at(starts: list[int], tokens: Sequence[str], char_pos: int) -> int | None:
    """Index of the token whose span covers `char_pos`, or None when the spans miss it."""
    for i, (s, t) in enumerate(zip(starts, tokens)):
        if s <= char_pos < s + max(len(t), 1):
            return i
    return None


def _prob_of(pairs: list[tuple[str, float]], token: str) -> float:
    """exp(logprob) of `token` in one position's top list; 0.0 when it is not among them."""
    for t, lp in pairs:
        if t == token:
            return math.exp(lp)
    return 0.0


def label_probs(pairs: list[tuple[str, float]], first_tokens: Mapping[str, str]) -> dict[str, float]:
    """Renormalise the five labels' first-token probabilities (fp64 math on fp32 logprobs)."""
    raw = {v: _prob_of(pairs, first_tokens[v]) for v in VERDICTS}
    total = sum(raw.values())
    if total <= 0.0:
        return {}
    return {v: p / total for v, p in raw.items()}


def _invalid(raw: str, p_unknown: float | None = None) -> Verdict:
    return Verdict(INVALID, 0.0, (), "", "", "", raw, p_unknown)


def read_verdict(gen: Generation, first_tokens: Mapping[str, str], *, prefix: str = "") -> Verdict:
    """Build a Verdict from one Generation (text, tokens, top_logprobs) of a forced `prefix`.

    `gen.tokens[i]` is the decoded text of generated token i and `gen.top_logprobs[i]` its
    position's top alternatives. The forced prefix is not among the generated tokens; when the
    backend's text omits it, it is prepended here.
    """
    text = gen.text
    head = prefix if prefix and not text.startswith(prefix) else ""
    full = head + text
    tokens = list(gen.tokens or ())
    tops = list(gen.top_logprobs or ())
    joined = "".join(tokens)
    # Generated tokens are the tail of the reply (a forced prefix is never among them).
    offset = len(full) - len(joined) if full.endswith(joined) else len(head)
    starts = _token_starts(tokens, offset)
    if not full.endswith(joined):
        # Byte-level tokens can decode differently one by one (split UTF-8): spans are then
        # approximate, so we only trust a label token that decodes exactly.
        log.debug("token texts do not concatenate to the reply text; locating labels by search")

    p_unknown = None
    m_mem = _MEMORY_AT.match(full)
    if m_mem and tops:
        i = _token_at(starts, tokens, max(m_mem.end() - 1, offset))
        # The memory value's first token carries its leading space: it covers end-1 (the space)
        # or, when the prefix ended with the space already, starts exactly at end.
        if i is None or not tokens[i].strip():
            i = _token_at(starts, tokens, m_mem.end())
        if i is not None and i < len(tops):
            p_unknown = _prob_of(_pairs(tops[i]), first_tokens[UNKNOWN])

    parsed = parse_reply(full)
    if not parsed.valid:
        return _invalid(full, p_unknown)
    m = _VERDICT_AT.search(full)
    if m is None:  # parse_reply accepted it, so this cannot happen for well-formed text
        return _invalid(full, p_unknown)
    label_pos = m.end()
    i = _token_at(starts, tokens, label_pos)
    # The label token usually starts with the space before it (" supported").
    if i is not None and tokens[i].strip() == "" and i + 1 < len(tokens):
        i += 1
    if i is None or i >= len(tops):
        log.warning("verdict token not found in the scored tokens; counting the reply as invalid")
        return _invalid(full, p_unknown)
    probs = label_probs(_pairs(tops[i]), first_tokens)
    if not probs:
        log.warning("no verdict label among the top logprobs at the verdict position")
        return _invalid(full, p_unknown)
    return Verdict(
        parsed.verdict,
        probs[parsed.verdict],
        tuple((v, probs[v]) for v in VERDICTS),
        parsed.memory,
        parsed.source,
        parsed.answer,
        full,
        p_unknown,
    )


def field_value(text: str) -> str:
    """A generated field's value: the text up to the next ` |` or line end, whitespace folded."""
    return " ".join(text.split("|", 1)[0].split("\n", 1)[0].split()) or "none"


def read_forced_verdict(gen: Generation, first_tokens: Mapping[str, str], memory: str, source: str) -> Verdict:
    """The verdict of a pass forced up to `... | verdict:`: the label with the highest probability
    at the first generated position (the model's judgement, read whatever it writes after it), and
    the answer the label implies (the source's value unless the sources are doubted)."""
    tops = list(gen.top_logprobs or ())
    raw = f"{MEMORY_PREFIX} {memory} | source: {source} | verdict:{gen.text}"
    probs = label_probs(_pairs(tops[0]), first_tokens) if tops else {}
    if not probs:
        log.warning("no verdict label among the top logprobs at the verdict position")
        return _invalid(raw)
    label = max(VERDICTS, key=lambda v: probs[v])
    answer = source if label == "supported" or is_unknown(memory) else memory
    return Verdict(label, probs[label], tuple((v, probs[v]) for v in VERDICTS), memory, source, answer, raw)


def memory_prefix() -> str:
    """The literal every conflict-aware reply starts with (forced in the scored pass)."""
    return MEMORY_PREFIX


def forced_unknown_prefix() -> str:
    """The prefix that forces the memory field to "unknown" (used when the gate fires)."""
    return f"{MEMORY_PREFIX} {UNKNOWN} |"
