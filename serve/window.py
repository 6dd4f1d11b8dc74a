"""Can a question be answered within the generator's window at all? Checked alone, before it joins a batch.

The fallback system's prompts are retrieved sources + the question. The sources never make a prompt too
long: every generator kind cuts them (rag.prompt.fit_sources) down to an empty block. What cannot be cut
is the system prompt + the question, plus the forced reply prefix and the tokens to generate. So the test
is made on the full prompt the generator will see, by the generator itself: the scored pass's conversation
(fallback.system.conversation) with one stand-in source, rendered through the generator's own tokenizer and
chat template (kinds transformers and vllm: `LocalTemplate._encode`; kind openai: its UTF-8 byte bound or
the server's `/tokenize`) and cut by its own truncation rule. That rule ends with the same empty block
whatever was retrieved, so it raises ContextWindowError exactly when the real prompt would.

What is bounded: the scored pass, with the shortest forced prefix (`memory:`) and the detector's
`max_new_tokens`. The closed-book pass needs less (a shorter system prompt, no sources line, 24 new tokens
against the detector's default 48). Passing is therefore necessary, not sufficient: a closed-book answer
long enough to push `memory: <answer> |` over the window still fails inside its batch, and the batcher's
one-at-a-time fallback (serve/batch.py) gives that request alone its 400.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lorarag.fallback.format import SourceText, rag_user_turn
from lorarag.fallback.verdict import memory_prefix
from lorarag.rag.generators.base import Message, fit_conversation
from lorarag.rag.prompt import ContextWindowError

Check = Callable[[str], None]


class QuestionTooLong(ContextWindowError):
    """A question whose prompt cannot fit the generator's window, whatever is retrieved."""


def window_check(system: Any) -> Check | None:
    """`check(question)` raising QuestionTooLong, for a system with a fallback detector over a generator of
    a known kind (fallback.system.AdvancedRAGSystem); None for any other system (nothing to check against)."""
    detector = getattr(system, "detector", None)
    gen = getattr(detector, "generator", None)
    cfg = getattr(gen, "cfg", None)
    if detector is None or cfg is None or getattr(cfg, "kind", None) not in ("transformers", "vllm", "openai"):
        return None
    max_new = detector.cfg.detector.max_new_tokens
    adapter = detector.cfg.detector.adapter
    prefix = memory_prefix()
    budget = cfg.max_model_len - max_new
    if cfg.kind == "openai":
        model = cfg.adapters[adapter] if adapter else cfg.model
        room = max_new + len(prefix.encode())  # the openai kind's own allowance for the forced prefix

        def fits(conv: list[Message]) -> None:
            fit_conversation(conv, lambda c: gen._fits(c, model, room), gen.endpoint)
    else:

        def fits(conv: list[Message]) -> None:
            gen._encode(conv, prefix, max_new)

    def check(question: str) -> None:
        conv = [Message("system", detector.system_prompt), Message("user", rag_user_turn(question, [SourceText("x")]))]
        try:
            fits(conv)
        except ContextWindowError:
            tokenizer = getattr(gen, "tokenizer", None)
            size = (
                f"{len(tokenizer.encode(question, add_special_tokens=False))} tokens"
                if tokenizer is not None
                else f"{len(question.encode())} bytes"
            )
            raise QuestionTooLong(
                f"the question is too long for the model: the question alone is {size}, and the system prompt "
                f"and question without any sources already exceed the generator's {budget}-token prompt budget "
                f"(max_model_len {cfg.max_model_len} minus {max_new} tokens to generate)"
            ) from None

    return check
