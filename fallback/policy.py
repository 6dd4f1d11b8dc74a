"""Routing policy: a pure function from the model's verdict to where the final answer comes from.

Routes:
- `context`: answer from the sources (the reply's `source` field);
- `fallback`: answer from the LoRA's own knowledge (the reply's `memory` field);
- `abstain`: no answer.

Rules (thresholds come from `PolicyConfig`):
0. a valid reply with no memory (the gate rejected it): under `no_memory: verdict_read` (the default)
   the rules below route it, and where they abstain the sources are read by the base model instead
   (`reads_sources`); under `no_memory: read` the base model reads them whatever the verdict. Without
   a memory the verdict follows familiarity with the fact, not what the passage says, so its "nothing
   usable here" is not trusted to withhold an answer that base RAG would give.
1. invalid reply → `on_invalid` (default abstain): we cannot tell what the model meant.
2. supported → context.
3. conflicting / outdated: the detector score (1 − P(supported)) must reach `flag_threshold`,
   else the doubt is too weak and the sources win. With a known memory → fallback; with no
   memory (the gate said unknown) the sources are the only answer → `unknown_conflict`
   (default context).
4. irrelevant / insufficient: nothing usable in the sources → fallback if the memory is known,
   else abstain.
"""

from __future__ import annotations

from lorarag.fallback.config import PolicyConfig
from lorarag.fallback.format import is_unknown

ROUTES = ("context", "fallback", "abstain")
# the Trace note of an answer read by the base model (rule 0); eval/reroute.py keys its replay on it
READ_NOTE = "no memory: the base model read the sources (policy.no_memory: read)"
READ_NOTE_ROUTED = "no memory: the base model read the sources (policy.no_memory: verdict_read)"
READ_NOTES = (READ_NOTE, READ_NOTE_ROUTED)
_DOUBT = ("conflicting", "outdated")
_EMPTY = ("irrelevant", "insufficient")


def decide_route(verdict: str, flag_score: float, memory_known: bool, cfg: PolicyConfig) -> str:
    """The route for one reply: `context`, `fallback` or `abstain` (pure, no side effects)."""
    if verdict == "invalid":
        return cfg.on_invalid
    if verdict == "supported":
        return "context"
    if verdict in _DOUBT:
        if not flag_score >= cfg.flag_threshold:  # NaN counts as no doubt
            return "context"
        return "fallback" if memory_known else cfg.unknown_conflict
    if verdict in _EMPTY:
        return "fallback" if memory_known else "abstain"
    raise ValueError(f"unknown verdict {verdict!r}")


def reads_sources(valid: bool, memory_known: bool, route: str, cfg: PolicyConfig) -> bool:
    """True where the base model's reading of the sources replaces the answer `route` gives (rule 0)."""
    if not valid or memory_known:
        return False
    return cfg.no_memory == "read" or (cfg.no_memory == "verdict_read" and route == "abstain")


def read_note(cfg: PolicyConfig) -> str:
    """The Trace note of a reading under `cfg`'s no_memory rule."""
    return READ_NOTE if cfg.no_memory == "read" else READ_NOTE_ROUTED


def final_answer(route: str, memory: str, source: str, reply_answer: str, cfg: PolicyConfig) -> str:
    """The answer text: the route's field, or with `cfg.answer == "reply"` the reply's own `answer:`
    field where it holds a value (an abstention stays empty)."""
    if cfg.answer == "reply" and route != "abstain" and not is_unknown(reply_answer):
        return reply_answer
    return route_answer(route, memory, source)


def route_answer(route: str, memory: str, source: str) -> str:
    """The final answer text for a route: the source value, the memory value, or ""."""
    if route == "context":
        return source
    if route == "fallback":
        return memory
    if route == "abstain":
        return ""
    raise ValueError(f"unknown route {route!r}")
