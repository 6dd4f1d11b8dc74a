"""Greedy generations remembered by request, for every generator kind (`build_generator` wraps).

Greedy decoding is a function of the request: adapter, max new tokens, top-k log-probs, reply
prefix and the conversation. An evaluation asks the same request many times -- one question in
four scenarios (closed-book, gold-only context), and LoRA-RAG's memory pass repeats the closed-book
system's request -- so a repeat, and a duplicate inside one call, is answered without the model
(transformers), the engine (vLLM) or the server (openai). Sampling is never memoised: each request
is its own draw. A failed call stores nothing.

Bounded: least recently used dropped first. One result is ~1 KB, or ~60 KB with 20 top log-probs
over 25 tokens (a verdict pass): 2,048 entries stay under ~120 MB.
"""

from __future__ import annotations

from typing import Any

from lorarag.rag.generators.base import Generation, Message, check_request

MEMO_SIZE = 2048  # read at each eviction (tests shrink it)


class MemoGenerator:
    """A generator of any kind whose greedy results are remembered by request."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.cfg = inner.cfg
        self._memo: dict[tuple, Generation] = {}  # request -> result; dicts keep insertion order

    def generate(
        self,
        conversations: list[list[Message]],
        *,
        adapter: str | None = None,
        max_new_tokens: int | None = None,
        top_logprobs: int = 0,
        prefixes: list[str] | None = None,
    ) -> list[Generation]:
        """The inner generator's results; repeated greedy requests are not sent again."""
        kw = dict(adapter=adapter, max_new_tokens=max_new_tokens, top_logprobs=top_logprobs)
        if self.cfg.temperature != 0:
            return self.inner.generate(conversations, prefixes=prefixes, **kw)
        pre = check_request(self.cfg, conversations, adapter, prefixes)
        max_new = max_new_tokens or self.cfg.max_new_tokens
        keys = [
            (adapter, max_new, top_logprobs, p, tuple((m.role, m.content) for m in c)) for c, p in zip(conversations, pre)
        ]
        first: dict[tuple, int] = {}  # request -> index of its first occurrence in this call
        for i, k in enumerate(keys):
            first.setdefault(k, i)
        todo = [i for k, i in first.items() if k not in self._memo]
        fresh: dict[int, Generation] = {}
        if todo:
            gens = self.inner.generate([conversations[i] for i in todo], prefixes=[pre[i] for i in todo], **kw)
            fresh = dict(zip(todo, gens))
        got = {k: fresh[i] if i in fresh else self._memo.pop(k) for k, i in first.items()}
        self._memo.update(got)  # (re)inserted last: the oldest entry is the least recently used
        while len(self._memo) > MEMO_SIZE:
            del self._memo[next(iter(self._memo))]
        return [got[k] for k in keys]

    def close(self) -> None:
        """Forget the results and close the inner generator."""
        self._memo.clear()
        self.inner.close()

    def __getattr__(self, name: str) -> Any:
        # tokenizer, model, ... of the inner generator (only called for names not found here)
        return getattr(self.inner, name)
