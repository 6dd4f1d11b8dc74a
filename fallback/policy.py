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
   With `read_support`, a reading is kept only where the sources support it (`supported`: its own
   words occur in them); otherwise the system abstains, so an unanswerable question still gets "I
   cannot answer" though the base model, asked, answers something.
   A memory the reply itself calls `insufficient` counts as no memory under `insufficient: disowns` (the
   default; `memory_in_use`): the LoRA is taught that verdict only where it has no memory and the sources
   do not answer, so it does not stand by that memory, and rule 0 routes the item as a gated one.
1. invalid reply → `on_invalid` (default abstain): we cannot tell what the model meant.
2. supported → context.
3. conflicting / outdated: the detector score (1 − P(supported)) must reach `flag_threshold`,
   else the doubt is too weak and the sources win. With a known memory → fallback; with no
   memory (the gate said unknown) the sources are the only answer → `unknown_conflict`
   (default context).
4. irrelevant / insufficient: nothing usable in the sources → fallback if the memory is known,
   else abstain.
5. override (`overrides`): a memory the gate is confident of (its doubt at or below the calibrated
   override threshold, `gate.override`) wins over sources routed to `context` whose answer differs
   from it. The verdict rarely doubts an edited copy of a chunk when training never showed that
   chunk edited; a memory learned with confidence does.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from lorarag.fallback.config import PolicyConfig
from lorarag.fallback.format import is_unknown

ROUTES = ("context", "fallback", "abstain")
# the Trace note of an answer read by the base model (rule 0); eval/reroute.py keys its replay on it
READ_NOTE = "no memory: the base model read the sources (policy.no_memory: read)"
READ_NOTE_ROUTED = "no memory: the base model read the sources (policy.no_memory: verdict_read)"
READ_NOTES = (READ_NOTE, READ_NOTE_ROUTED)
_DOUBT = ("conflicting", "outdated")
_EMPTY = ("irrelevant", "insufficient")


def memory_in_use(verdict: str, memory_known: bool, cfg: PolicyConfig) -> bool:
    """Whether the memory the gate kept routes the reply: not where the reply calls the sources
    `insufficient` and `cfg.insufficient` is `disowns` (rule 0)."""
    return memory_known and not (verdict == "insufficient" and cfg.insufficient == "disowns")


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


_WORD = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]|\w+")
# English function words a reading may add without stating anything the sources must hold
_FUNCTION = frozenset(
    """a an the is are was were be been being of in on at to for from by with as and or but
it its this that these those there their they he she his her which who whom whose what when where how why
has have had do does did not no yes so than then also about into over after before during since until""".split()
)
_ARTICLES = frozenset(("a", "an", "the"))
UNSUPPORTED_NOTE = "reading not supported by the sources (policy.read_support): abstained"
# Trace notes of rule 5: the memory was confident enough to override (eval/reroute.py keys on them)
CONFIDENT_NOTE = "gate: memory confident (doubt <= override threshold)"
DISOWNED_NOTE = "memory disowned: the reply calls the sources insufficient (policy.insufficient: disowns)"
OVERRIDE_NOTE = "override: the confident memory differs from the sources' answer: fallback"


def disagrees(memory: str, source: str) -> bool:
    """True where two answers differ: neither one's words (case-folded words and CJK characters, no
    punctuation or articles) run inside the other's. An empty or `unknown` side never disagrees."""
    if is_unknown(memory) or is_unknown(source):
        return False
    a, b = (" " + " ".join(w for w in _WORD.findall(x.casefold()) if w not in _ARTICLES) + " " for x in (memory, source))
    if not a.strip() or not b.strip():
        return False
    return a not in b and b not in a


def overrides(route: str, confident: bool, memory: str, source: str) -> bool:
    """Rule 5: True where a confident memory takes the place of the sources' answer."""
    return route == "context" and confident and disagrees(memory, source)


def route_with_override(
    verdict: str, flag_score: float, memory_known: bool, confident: bool, memory: str, source: str, cfg: PolicyConfig
) -> tuple[str, bool]:
    """(route, overridden): rules 1-4 (`decide_route`), then rule 5 where `cfg.override` is on."""
    route = decide_route(verdict, flag_score, memory_known, cfg)
    over = cfg.override and overrides(route, confident, memory, source)
    return ("fallback" if over else route), over


def own_words(question: str, answer: str) -> list[str]:
    """The answer's own words: case-folded words and CJK characters, less the question's and
    function words."""
    asked = set(_WORD.findall(question.casefold()))
    return [w for w in _WORD.findall(answer.casefold()) if w not in asked and w not in _FUNCTION]


def supported(question: str, answer: str, passages: Sequence[str], share: float | None) -> bool:
    """True where `answer` (the base model's reading) may stand: `share` is None, or at least that
    share of the answer's own words (`own_words`) occur in `passages`. An answer with no words of
    its own (it restates the question, or is empty) is not supported."""
    if share is None:
        return True
    own = own_words(question, answer)
    if not own:
        return False
    there = set(_WORD.findall(" ".join(passages).casefold()))
    return sum(w in there for w in own) >= share * len(own)


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
