"""One batch-first `Generator` interface over three chat-LM backends, chosen by `kind:`.

- `transformers`: local model, peft LoRA adapters loaded on the base and chosen per request
  (adapter=None runs the base with the adapters disabled).
- `vllm`: offline `LLM` engine; adapters through `LoRARequest`.
- `openai`: any OpenAI-compatible server (vLLM `--enable-lora --lora-modules name=path`,
  `swift deploy`, Ollama `/v1`); the adapter is chosen by sending its served name as `model`.
`registry.build_generator` builds a kind and wraps it in `memo.py`: a greedy request asked again is
answered from the memo of its first result.

Every kind renders the chat template with `chat_template_kwargs` (default enable_thinking=False),
decodes greedily when temperature is 0, and reports generated tokens as the decoded text of each
token id, without the final stop token. `prefixes[i]` forces the reply to start with that text:
local kinds append it to the rendered prompt; `openai` sends it as a final assistant message with
vLLM's `continue_final_message=True, add_generation_prompt=False` (vLLM servers only; with the real
Qwen3 template that renders the same empty think block before the prefix).

Prompts longer than `max_model_len - max_new_tokens` tokens are cut by `rag.prompt.fit_sources`
(whole sources from the end first) with a logged warning and `Generation.truncated_prompt=True`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from lorarag.core.errors import ConfigError
from lorarag.rag.config import GeneratorConfig
from lorarag.rag.prompt import fit_sources, neutralise_controls

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Message:
    """One chat turn."""

    role: str  # "system" | "user" | "assistant"
    content: str

    def __post_init__(self) -> None:
        # The one rule every generator kind inherits: only the system turn (our own instructions)
        # may hold chat-template control strings; user and assistant turns never open a new turn.
        if self.role != "system":
            object.__setattr__(self, "content", neutralise_controls(self.content))


@dataclass(frozen=True)
class Generation:
    """One completion with per-token details."""

    text: str  # decoded completion (without the prefix)
    tokens: tuple[str, ...] = ()  # generated tokens, decoded one by one
    logprobs: tuple[float, ...] = ()  # logprob of each generated token
    top_logprobs: tuple[tuple[tuple[str, float], ...], ...] = ()  # per position: top-k, desc
    finish_reason: str = ""  # "stop" | "length"
    truncated_prompt: bool = False
    prompt: str = ""  # the prompt actually sent (after truncation), for traces


class Generator(Protocol):
    """A batch-first chat generator."""

    def generate(
        self,
        conversations: list[list[Message]],
        *,
        adapter: str | None = None,
        max_new_tokens: int | None = None,
        top_logprobs: int = 0,
        prefixes: list[str] | None = None,
    ) -> list[Generation]: ...

    def close(self) -> None: ...


class UnknownAdapterError(ConfigError):
    """An adapter name that the generator config does not declare."""


def check_request(
    cfg: GeneratorConfig, conversations: list[list[Message]], adapter: str | None, prefixes: list[str] | None
) -> list[str]:
    """The prefixes of a generate() call (one per conversation); a bad adapter or count raises."""
    if adapter is not None and adapter not in cfg.adapters:
        raise UnknownAdapterError(f"generator: unknown adapter {adapter!r} (declared: {sorted(cfg.adapters) or 'none'})")
    if prefixes is not None and len(prefixes) != len(conversations):
        raise ValueError(f"{len(prefixes)} prefixes for {len(conversations)} conversations")
    return prefixes if prefixes is not None else [""] * len(conversations)


def fit_conversation(conv: list[Message], fits: Callable[[list[Message]], bool], where: str) -> tuple[list[Message], bool]:
    """Truncate the last user turn's sources block until `fits`; warn when anything was cut."""
    last = max((i for i, m in enumerate(conv) if m.role == "user"), default=None)
    if last is None:
        if not fits(conv):
            raise ConfigError(f"{where}: prompt exceeds max_model_len and has no user turn to cut")
        return conv, False

    def swap(text: str) -> list[Message]:
        return [*conv[:last], Message("user", text), *conv[last + 1 :]]

    text, cut = fit_sources(conv[last].content, lambda t: fits(swap(t)))
    if cut:
        log.warning(
            "%s: prompt longer than max_model_len; sources cut from the end (%d -> %d chars of user turn)",
            where,
            len(conv[last].content),
            len(text),
        )
    return swap(text), cut


def check_model_source(cfg: GeneratorConfig) -> None:
    """ConfigError (one line) when a local kind's model or adapter path does not exist. A name
    that is not path-like (`Qwen/Qwen3-4B`) is left to the loader (a hub id from the cache)."""
    named = [("generator.model", cfg.model)] + [(f"generator.adapters.{n}", p) for n, p in cfg.adapters.items()]
    for key, value in named:
        path = Path(value).expanduser()
        if path.exists():
            continue
        path_like = value.startswith(("/", ".", "~")) or value.count("/") > 1 or key != "generator.model"
        if path_like:
            raise ConfigError(f"{key}: {value}: no such folder")


def load_error(cfg: GeneratorConfig, exc: BaseException) -> ConfigError:
    """A loader's failure on `cfg.model` (no such hub model offline, not a model folder) as one line."""
    first = next((x.strip() for x in str(exc).splitlines() if x.strip()), type(exc).__name__)
    return ConfigError(f"generator.model: cannot load {cfg.model!r} ({first[:160]})")


def same_answer(a: Generation, b: Generation) -> bool:
    """Greedy agreement between two backends: identical text, or texts that differ only by an
    incomplete multi-byte character at a max-token cut (servers differ in how they show it)."""
    if a.text == b.text:
        return True
    short, long_ = sorted((a.text, b.text), key=len)
    return a.finish_reason == b.finish_reason == "length" and long_.startswith(short) and "\ufffd" in long_[len(short) :]


def generation_eos(model: str) -> list[int]:
    """Stop ids from the model's generation_config.json (Qwen3: <|im_end|> and <|endoftext|>)."""
    from transformers import GenerationConfig

    try:
        eos = GenerationConfig.from_pretrained(model).eos_token_id
    except OSError:  # no generation_config.json: the tokenizer's eos alone
        return []
    return [eos] if isinstance(eos, int) else list(eos or [])


class LocalTemplate:
    """Chat-template rendering, token counting and truncation shared by the local kinds."""

    cfg: GeneratorConfig
    tokenizer: object

    def _inert(self, text: str) -> str:
        """`text` with this tokenizer's own special tokens broken too (Message breaks the chat
        control strings every template shares; a tokenizer may add others, e.g. `<filename>`)."""
        specials = getattr(self, "_special_strs", None)
        if specials is None:
            tok = self.tokenizer
            names = set(getattr(tok, "all_special_tokens", None) or ())
            get_added = getattr(tok, "get_added_vocab", None)
            names |= set(get_added() if callable(get_added) else ())
            specials = tuple(
                sorted((n for n in names if len(n) > 1 and n[0] in "<[" and n.strip() == n), key=len, reverse=True)
            )
            self._special_strs = specials
        for t in specials:
            if t in text:
                text = text.replace(t, t[0] + "\u200b" + t[1:])
        return text

    def _encode(self, conv: list[Message], prefix: str, max_new: int) -> tuple[list[int], str, bool]:
        budget = self.cfg.max_model_len - max_new

        def render(c: list[Message]) -> str:
            msgs = [{"role": m.role, "content": m.content if m.role == "system" else self._inert(m.content)} for m in c]
            return (
                self.tokenizer.apply_chat_template(
                    msgs, tokenize=False, add_generation_prompt=True, **self.cfg.chat_template_kwargs
                )
                + prefix
            )

        def fits(c: list[Message]) -> bool:
            return len(self.tokenizer.encode(render(c), add_special_tokens=False)) <= budget

        conv, cut = fit_conversation(conv, fits, f"generator {self.cfg.model}")
        text = render(conv)
        return self.tokenizer.encode(text, add_special_tokens=False), text, cut

    def _encode_all(
        self, conversations: list[list[Message]], adapter: str | None, prefixes: list[str] | None, max_new_tokens: int | None
    ) -> tuple[int, list[tuple[list[int], str, bool]]]:
        """A checked request (check_request) encoded: its new-token budget, and per conversation the
        prompt ids, the prompt text and whether sources were cut to fit."""
        prefixes = check_request(self.cfg, conversations, adapter, prefixes)
        max_new = max_new_tokens or self.cfg.max_new_tokens
        return max_new, [self._encode(c, p, max_new) for c, p in zip(conversations, prefixes)]

    def _text(self, ids: list[int]) -> str:
        """Decoded completion without a trailing incomplete multi-byte character (a reply cut
        mid-character), as vLLM's incremental detokenizer reports it."""
        for n in range(len(ids), 0, -1):
            text = self.tokenizer.decode(ids[:n], skip_special_tokens=True)
            if not text.endswith("\ufffd"):
                return text
        return ""

    def _token_strs(self, ids: list[int]) -> tuple[str, ...]:
        return tuple(self._tok_str(i, ids[:n]) for n, i in enumerate(ids))

    def _tok_str(self, token_id: int, context: list[int]) -> str:
        """Decoded text of one token; a token ending inside a multi-byte character gets "" and
        the token completing it gets the whole character (vLLM's server rule, so that every kind
        reports the same strings and they concatenate to the text)."""
        dec = self.tokenizer.decode
        text = dec([token_id])
        if not text.endswith("\ufffd"):
            return text
        for n in range(1, min(len(context), 4) + 1):
            ctx = context[-n:]
            full = dec(ctx + [token_id])
            if full.endswith("\ufffd"):
                continue
            clean = len(ctx)
            while clean > 0 and dec([ctx[clean - 1]]).endswith("\ufffd"):
                clean -= 1
            prefix = dec(ctx[:clean]) if clean else ""
            if full.startswith(prefix):
                return full[len(prefix) :]
            common = next((j for j, (a, b) in enumerate(zip(prefix, full)) if a != b), min(len(prefix), len(full)))
            return full[common:]
        return ""

    def _strip_stop(self, ids: list[int]) -> tuple[list[int], str]:
        """Drop padding and the final stop token; the finish reason."""
        stop = set(self._stop_ids)
        for n, i in enumerate(ids):
            if i in stop:
                return ids[:n], "stop"
        return ids, "length"
