"""The `transformers` generator kind: a local model with peft LoRA adapters chosen per request
(adapter=None runs the base with the adapters disabled), batched by prompt length.

Options that only this kind has (rag.config.GeneratorConfig): `fp32_lm_head` (token probabilities
from an fp32 copy of the LM head under a half-precision body), `max_batch_tokens` (a cap on each
batch's padded size), `attn_impl` (the attention kernel), `prefix_cache` (a batch's common
leading tokens, e.g. the system prompt, prefilled once and their keys/values shared by its rows)
and `prompt_lookup` (a request decoded alone drafts tokens from its own prompt; the model verifies
several per forward pass and still chooses each one).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from lorarag.rag.config import GeneratorConfig
from lorarag.rag.generators.base import Generation, LocalTemplate, Message, check_model_source, check_request, load_error

if TYPE_CHECKING:
    import numpy as np

log = logging.getLogger(__name__)


def prompt_batches(lengths: list[int], batch_size: int, max_tokens: int | None, max_new: int) -> list[list[int]]:
    """Indices in batches of similar prompt length, shortest first: at most `batch_size` rows and,
    when `max_tokens` is set, at most that many padded tokens, (longest prompt + max_new) x rows.
    A prompt too long for the budget on its own still gets a batch of one (it fits max_model_len)."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches: list[list[int]] = []
    for i in order:
        cur = batches[-1] if batches else None
        # Sorted ascending, so prompt i is the longest of any batch it joins.
        if (
            cur is not None
            and len(cur) < batch_size
            and (max_tokens is None or (len(cur) + 1) * (lengths[i] + max_new) <= max_tokens)
        ):
            cur.append(i)
        else:
            batches.append([i])
    return batches


MIN_SHARED = 16  # tokens: a shorter shared prefix is not worth its own forward pass


def shared_len(rows: list[list[int]], min_tokens: int = MIN_SHARED) -> int:
    """Leading tokens all `rows` share, leaving each row at least one token of its own; 0 when
    fewer than `min_tokens` (a second forward pass would cost more than it saves) or one row."""
    if len(rows) < 2:
        return 0
    limit, first = min(len(r) for r in rows) - 1, rows[0]
    n = 0
    while n < limit and all(r[n] == first[n] for r in rows):
        n += 1
    return n if n >= min_tokens else 0


def fp32_lm_head(model) -> None:
    """Replace a half-precision LM head by an fp32 copy fed fp32 hidden states (unties it from
    the input embeddings, which stay in the model dtype). Extra memory: vocab x hidden x 4 bytes.
    A head that is not a plain Linear (an adapter trained on it) is left alone, with a warning."""
    import torch

    head = model.get_output_embeddings()
    if type(head) is not torch.nn.Linear:
        log.warning(
            "fp32_lm_head: the LM head is a %s, not a plain Linear (an adapter on it?); kept in the model dtype",
            type(head).__name__,
        )
        return
    new = torch.nn.Linear(
        head.in_features, head.out_features, bias=head.bias is not None, dtype=torch.float32, device=head.weight.device
    )
    with torch.no_grad():
        new.weight.copy_(head.weight.float())
        if head.bias is not None:
            new.bias.copy_(head.bias.float())
    new.requires_grad_(False)
    new.register_forward_pre_hook(lambda _m, args: (args[0].float(), *args[1:]))
    model.config.tie_word_embeddings = False
    model.set_output_embeddings(new)


class TransformersGenerator(LocalTemplate):
    """Local transformers model; peft adapters chosen per request."""

    def __init__(self, cfg: GeneratorConfig) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.cfg = cfg
        self.torch = torch
        check_model_source(cfg)
        kw = {"attn_implementation": cfg.attn_impl} if cfg.attn_impl else {}
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(cfg.model)
            model = AutoModelForCausalLM.from_pretrained(cfg.model, dtype=getattr(torch, cfg.dtype), **kw)
        except (OSError, ValueError) as exc:  # no such hub model offline, or not a model folder
            raise load_error(cfg, exc) from None
        self.tokenizer.padding_side = "left"
        if cfg.adapters:
            from peft import PeftModel

            (first, path), *rest = cfg.adapters.items()
            model = PeftModel.from_pretrained(model, path, adapter_name=first)
            for name, p in rest:
                model.load_adapter(p, adapter_name=name)
        if cfg.fp32_lm_head and cfg.dtype != "float32":
            fp32_lm_head(model.get_base_model() if hasattr(model, "get_base_model") else model)
        self.model = model.to(cfg.device).eval()
        eos = self.model.generation_config.eos_token_id
        eos = [eos] if isinstance(eos, int) else list(eos or [])
        self._stop_ids = [*eos, self.tokenizer.eos_token_id]
        self._pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else eos[0]

    def generate(
        self,
        conversations: list[list[Message]],
        *,
        adapter: str | None = None,
        max_new_tokens: int | None = None,
        top_logprobs: int = 0,
        prefixes: list[str] | None = None,
    ) -> list[Generation]:
        """Generate one completion per conversation, in batches of `cfg.batch_size` rows at most
        (and `cfg.max_batch_tokens` padded tokens, when set)."""
        max_new, encoded = self._encode_all(conversations, adapter, prefixes, max_new_tokens)
        # Batch prompts of similar length (less left padding to prefill and attend over), then
        # put the results back in input order (tests: same text as each prompt generated alone).
        # Repeated greedy requests never reach this point (rag/generators/memo.py).
        lengths = [len(e[0]) for e in encoded]
        # With the prefix cache, prompts are first grouped by their first MIN_SHARED tokens (the
        # system prompt: one per language in the demo), so a batch shares a prefix to prefill once.
        groups: dict[tuple[int, ...], list[int]] = {}
        for i, e in enumerate(encoded):
            groups.setdefault(tuple(e[0][:MIN_SHARED]) if self.cfg.prefix_cache else (), []).append(i)
        out: dict[int, Generation] = {}
        for idx in groups.values():
            for part in prompt_batches([lengths[i] for i in idx], self.cfg.batch_size, self.cfg.max_batch_tokens, max_new):
                rows = [idx[j] for j in part]
                out.update(zip(rows, self._batch([encoded[i] for i in rows], adapter, max_new, top_logprobs)))
        return [out[i] for i in range(len(encoded))]

    def _batch(self, encoded, adapter, max_new, k) -> list[Generation]:
        torch = self.torch
        # Rows = [shared prefix (n tokens) | left padding | the row's own suffix]: positions come
        # from the mask's running count, so every real token keeps its unpadded position.
        n = shared_len([e[0] for e in encoded]) if self.cfg.prefix_cache else 0
        width = n + max(len(ids) - n for ids, _, _ in encoded)
        ids = torch.full((len(encoded), width), self._pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for r, (seq, _, _) in enumerate(encoded):
            ids[r, :n], mask[r, :n] = torch.tensor(seq[:n], dtype=torch.long), 1
            ids[r, width - len(seq) + n :] = torch.tensor(seq[n:])
            mask[r, width - len(seq) + n :] = 1
        sample = self.cfg.temperature > 0
        with self._adapter_ctx(adapter), torch.inference_mode():
            cache: dict = {}
            if self.cfg.prompt_lookup and len(encoded) == 1 and not sample:
                # transformers' assisted decoding takes one row: drafts from n-grams of the row's own
                # tokens; each verified step keeps the model's greedy tokens and their logits
                cache["prompt_lookup_num_tokens"] = self.cfg.prompt_lookup
            if n:  # prefill the prefix once (one row) and give every row its keys/values
                kv = self.model(input_ids=ids[:1, :n].to(self.cfg.device), use_cache=True, logits_to_keep=1).past_key_values
                kv.batch_repeat_interleave(len(encoded))
                cache["past_key_values"] = kv
            res = self.model.generate(
                input_ids=ids.to(self.cfg.device),
                attention_mask=mask.to(self.cfg.device),
                max_new_tokens=max_new,
                do_sample=sample,
                temperature=self.cfg.temperature if sample else None,
                top_p=None,
                top_k=None,
                eos_token_id=self._stop_ids,
                pad_token_id=self._pad,
                return_dict_in_generate=True,
                output_logits=True,
                **cache,
            )
        # res.logits: one (B, V) tensor of raw scores per step. Log-softmax in fp32 one step at a
        # time, keeping only the chosen token's logprob (B, steps) and the top-k (B, steps, k).
        new_ids = res.sequences[:, width:]  # (B, steps)
        chosen, top_v, top_i = [], [], []
        for t, step in enumerate(res.logits):
            logp = step.float().log_softmax(-1)
            chosen.append(logp.gather(1, new_ids[:, t : t + 1]).squeeze(1).cpu())
            if k:
                v, i = logp.topk(k, dim=-1)
                top_v.append(v.cpu())
                top_i.append(i.cpu())
        gens = []
        for r, (_, text, cut) in enumerate(encoded):
            kept, reason = self._strip_stop(new_ids[r].tolist())
            lp = tuple(float(chosen[t][r]) for t in range(len(kept)))
            tops: tuple = ()
            if k:
                tops = tuple(
                    tuple((self._tok_str(int(i), kept[:t]), float(v)) for v, i in zip(top_v[t][r], top_i[t][r]))
                    for t in range(len(kept))
                )
            gens.append(
                Generation(
                    text=self._text(kept),
                    tokens=self._token_strs(kept),
                    logprobs=lp,
                    top_logprobs=tops,
                    finish_reason=reason,
                    truncated_prompt=cut,
                    prompt=text,
                )
            )
        return gens

    def last_token_states(
        self, conversations: list[list[Message]], *, adapter: str | None, layers: Sequence[int]
    ) -> np.ndarray:
        """The hidden state at each prompt's last token (the position that predicts the first reply
        token), from the residual stream after each of `layers` (0: the embeddings), with `adapter`
        on (None: the base model): an array (conversations, layers, hidden size), fp32. A prompt is
        rendered as `generate` renders it; left padding leaves its last position in place."""
        import numpy as np

        torch = self.torch
        check_request(self.cfg, conversations, adapter, None)
        encoded = [self._encode(c, "", self.cfg.max_new_tokens)[0] for c in conversations]
        out = np.zeros((len(encoded), len(layers), self.model.config.hidden_size), dtype=np.float32)
        ctx = self._adapter_ctx(adapter)
        with ctx, torch.inference_mode():
            for part in prompt_batches([len(e) for e in encoded], self.cfg.batch_size, self.cfg.max_batch_tokens, 0):
                width = max(len(encoded[i]) for i in part)
                ids = torch.full((len(part), width), self._pad, dtype=torch.long)
                mask = torch.zeros_like(ids)
                for r, i in enumerate(part):
                    ids[r, width - len(encoded[i]) :] = torch.tensor(encoded[i])
                    mask[r, width - len(encoded[i]) :] = 1
                # positions from the mask's running count, as `generate` gives them: a padded row
                # reads the states it reads alone
                pos = (mask.cumsum(-1) - 1).clamp(min=0)
                hs = self.model(
                    input_ids=ids.to(self.cfg.device),
                    attention_mask=mask.to(self.cfg.device),
                    position_ids=pos.to(self.cfg.device),
                    output_hidden_states=True,
                    logits_to_keep=1,
                ).hidden_states
                for j, layer in enumerate(layers):
                    out[part, j] = hs[layer][:, -1].float().cpu().numpy()
        return out

    def _adapter_ctx(self, adapter: str | None):
        """A context in which `adapter` is the active one (None: every adapter off)."""
        import contextlib

        if not hasattr(self.model, "disable_adapter"):
            return contextlib.nullcontext()
        if adapter is None:
            return self.model.disable_adapter()
        self.model.set_adapter(adapter)
        return contextlib.nullcontext()

    def close(self) -> None:
        """Free the model."""
        self.model = None
