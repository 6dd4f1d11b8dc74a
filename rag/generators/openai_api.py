"""The `openai` generator kind: any OpenAI-compatible chat server, through rag.http.JSONClient.

Works with `vllm serve --enable-lora --lora-modules name=path` (adapter = served name sent as
`model`), `swift deploy --adapters name=path`, and Ollama's `/v1`. A batch is sent as concurrent
requests (`batch_size` at a time) so the server batches them; each request is retried with backoff
and a down, slow or garbage-answering server ends in `EndpointError` naming the endpoint.

Window check without a local tokenizer: a byte-level BPE never makes more tokens than UTF-8 bytes,
so a prompt whose bytes (plus a per-turn template allowance) fit the budget is sent as is; otherwise
vLLM's `/tokenize` gives the exact count, or, on servers without it (swift, Ollama), the byte count
is used as a conservative bound. Either way `rag.prompt.fit_sources` applies the truncation rule.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from lorarag.core.errors import ConfigError
from lorarag.rag.config import GeneratorConfig
from lorarag.rag.generators.base import Generation, Message, check_request, fit_conversation
from lorarag.rag.generators.http import EndpointError, JSONClient, field

log = logging.getLogger(__name__)

_EMPTY_THINK = "<think>\n\n</think>\n\n"
_TEMPLATE_BYTES_PER_TURN = 16  # "<|im_start|>user\n...<|im_end|>\n" and the think block, as bytes


class OpenAIGenerator:
    """Chat completions over HTTP; the adapter is a served model name."""

    def __init__(self, cfg: GeneratorConfig) -> None:
        if not cfg.base_url:
            raise ConfigError("generator.base_url is required for kind: openai")
        self.cfg = cfg
        urls = [cfg.base_url, *cfg.extra_base_urls]
        self.clients = [
            JSONClient(u, timeout_s=cfg.timeout_s, max_retries=cfg.max_retries, api_key_env=cfg.api_key_env) for u in urls
        ]
        self.client = self.clients[0]
        root = cfg.base_url.rstrip("/").removesuffix("/v1")
        self._root = JSONClient(root, timeout_s=cfg.timeout_s, max_retries=cfg.max_retries, api_key_env=cfg.api_key_env)
        self._has_tokenize: bool | None = None
        self.endpoint = self.client.base_url + "/chat/completions"

    def generate(
        self,
        conversations: list[list[Message]],
        *,
        adapter: str | None = None,
        max_new_tokens: int | None = None,
        top_logprobs: int = 0,
        prefixes: list[str] | None = None,
    ) -> list[Generation]:
        """One request per conversation, `batch_size` in flight at once; results in order."""
        prefixes = check_request(self.cfg, conversations, adapter, prefixes)
        model = self.cfg.adapters[adapter] if adapter else self.cfg.model
        max_new = max_new_tokens or self.cfg.max_new_tokens
        jobs = list(enumerate(zip(conversations, prefixes)))
        workers = max(1, min(self.cfg.batch_size * len(self.clients), len(jobs)))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(lambda j: self._spread(j[0], j[1][0], j[1][1], model, max_new, top_logprobs), jobs))

    def _spread(self, i: int, conv: list[Message], prefix: str, model: str, max_new: int, k: int) -> Generation:
        """Request `i` on server i mod n; after that server's own retries fail, once on the next."""
        n = len(self.clients)
        try:
            return self._one(conv, prefix, model, max_new, k, self.clients[i % n])
        except EndpointError as exc:
            if n == 1:
                raise
            log.warning("%s; trying %s", exc, self.clients[(i + 1) % n].base_url)
            return self._one(conv, prefix, model, max_new, k, self.clients[(i + 1) % n])

    def _one(
        self, conv: list[Message], prefix: str, model: str, max_new: int, k: int, client: JSONClient | None = None
    ) -> Generation:
        # the forced prefix takes room too: at most one token per UTF-8 byte
        room = max_new + len(prefix.encode())
        conv, cut = fit_conversation(conv, lambda c: self._fits(c, model, room), self.endpoint)
        messages = [{"role": m.role, "content": m.content} for m in conv]
        payload: dict[str, Any] = {"model": model, "max_tokens": max_new, "temperature": self.cfg.temperature}
        if self.cfg.chat_template_kwargs:
            payload["chat_template_kwargs"] = dict(self.cfg.chat_template_kwargs)
        if prefix:  # vLLM: continue the final assistant message instead of opening a new one
            messages.append({"role": "assistant", "content": prefix})
            payload.update(continue_final_message=True, add_generation_prompt=False)
        payload["messages"] = messages
        payload["logprobs"] = True  # tokens and their logprobs, as the local kinds give them
        if k:
            payload["top_logprobs"] = k
        data = (client or self.client).post("/chat/completions", payload)
        choice = field(data, "choices", 0, endpoint=self.endpoint)
        text = field(choice, "message", "content", endpoint=self.endpoint)
        if not isinstance(choice, dict) or not isinstance(text, str):
            raise EndpointError(f"{self.endpoint}: unexpected answer, content is not text")
        if text.startswith(_EMPTY_THINK) and not self.cfg.chat_template_kwargs.get("enable_thinking", True):
            text = text[len(_EMPTY_THINK) :]  # swift's qwen3 template returns it inside the reply
        reason = str(choice.get("finish_reason") or "")
        tokens, lps, tops = self._logprobs(choice, k)
        prompt = "\n".join(f"{m['role']}: {m['content']}" for m in messages)
        return Generation(
            text=text,
            tokens=tokens,
            logprobs=lps,
            top_logprobs=tops,
            finish_reason="length" if reason == "length" else "stop",
            truncated_prompt=cut,
            prompt=prompt,
        )

    def _logprobs(self, choice: dict, k: int) -> tuple[tuple, tuple, tuple]:
        lp = choice.get("logprobs")
        if not k and not (isinstance(lp, dict) and lp.get("content")):
            return (), (), ()  # servers without logprobs (older Ollama): fine unless asked for
        content = field(choice, "logprobs", "content", endpoint=self.endpoint) or []
        try:
            if (
                content
                and choice.get("finish_reason") == "stop"
                and content[-1]["token"] in ("", "<|im_end|>", "<|endoftext|>", "</s>", "<|eot_id|>")
            ):
                content = content[:-1]  # the stop token, which the local kinds do not report either
            tokens = tuple(str(c["token"]) for c in content)
            lps = tuple(float(c["logprob"]) for c in content)
            tops = (
                tuple(
                    tuple(sorted(((str(t["token"]), float(t["logprob"])) for t in c["top_logprobs"]), key=lambda x: -x[1]))[
                        :k
                    ]
                    for c in content
                )
                if k
                else ()
            )
        except (KeyError, TypeError, ValueError, AttributeError):
            raise EndpointError(f"{self.endpoint}: unexpected answer, malformed logprobs") from None
        return tokens, lps, tops

    def _fits(self, conv: list[Message], model: str, max_new: int) -> bool:
        budget = self.cfg.max_model_len - max_new
        bound = sum(len(m.content.encode()) + _TEMPLATE_BYTES_PER_TURN for m in conv) + 32
        if bound <= budget:
            return True
        if self._has_tokenize is not False:
            payload = {
                "model": model,
                "add_generation_prompt": True,
                "messages": [{"role": m.role, "content": m.content} for m in conv],
            }
            if self.cfg.chat_template_kwargs:
                payload["chat_template_kwargs"] = dict(self.cfg.chat_template_kwargs)
            try:
                data = self._root.post("/tokenize", payload)
                self._has_tokenize = True
                return int(field(data, "count", endpoint=self._root.base_url + "/tokenize")) <= budget
            except EndpointError as exc:
                if "HTTP 404" not in str(exc) and "HTTP 405" not in str(exc):
                    raise
                log.warning("%s has no /tokenize; using the UTF-8 byte count as a token bound", self._root.base_url)
                self._has_tokenize = False
        return False

    def close(self) -> None:
        """Close the HTTP connection pools."""
        for c in self.clients:
            c.close()
        self._root.close()
