"""Rerankers: score (query, passage) pairs in batches and reorder retrieval candidates.

Kinds (registry by `RerankerConfig.kind`):
- `qwen3`: Qwen3-Reranker as its model card specifies. Each pair becomes
      <|im_start|>system\n{JUDGE}<|im_end|>\n<|im_start|>user\n
      <Instruct>: {instruction}\n<Query>: {query}\n<Document>: {doc}
      <|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n
  and score = softmax(logit("yes"), logit("no")) at the last position = P(yes) in [0, 1].
  Backends: `transformers` (the model card's code, batched with left padding), `vllm` (offline
  `LLM(runner="pooling")` with the model card's hf_overrides: a classifier made from the yes/no
  rows of the LM head, so sigmoid(yes - no) = the same P(yes)) and `http` (vLLM server
  `/v1/score`, started with the same `--hf-overrides`), sending the prompt as (query part, document
  part) so the server scores exactly the same tokens.
- `cross_encoder`: any sentence-transformers CrossEncoder (its own activation).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

from lorarag.core.errors import ConfigError
from lorarag.rag.config import RerankerConfig
from lorarag.rag.generators.http import EndpointError, JSONClient, field
from lorarag.rag.generators.vllm_compat import engine_start
from lorarag.rag.records import Retrieved

log = logging.getLogger(__name__)

JUDGE = (
    "Judge whether the Document meets the requirements based on the Query and the Instruct "
    'provided. Note that the answer can only be "yes" or "no".'
)
PREFIX = f"<|im_start|>system\n{JUDGE}<|im_end|>\n<|im_start|>user\n"
SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
# vLLM: turn the causal LM into a yes/no classifier (Qwen3-Reranker model card, vLLM section).
VLLM_OVERRIDES = {
    "architectures": ["Qwen3ForSequenceClassification"],
    "classifier_from_token": ["no", "yes"],
    "is_original_qwen3_reranker": True,
}


def query_part(instruction: str, query: str) -> str:
    """The first half of a Qwen3-Reranker prompt (system turn, instruction, query)."""
    return f"{PREFIX}<Instruct>: {instruction}\n<Query>: {query}\n"


def document_part(doc: str) -> str:
    """The second half of a Qwen3-Reranker prompt (document, assistant prefix)."""
    return f"<Document>: {doc}{SUFFIX}"


class Reranker(Protocol):
    """Scores (query, passage) pairs; higher = more relevant."""

    def score(self, queries: list[str], docs: list[str]) -> list[float]: ...

    def close(self) -> None: ...


def rerank(
    reranker: Reranker, queries: list[str], candidates: list[list[Retrieved]], top_k: int, min_score: float | None = None
) -> list[list[Retrieved]]:
    """Score every candidate of every query in ONE batched call; keep the best `top_k` per query
    (and only those with score >= min_score), as stage "rerank" records with new ranks."""
    flat_q = [q for q, cands in zip(queries, candidates) for _ in cands]
    flat_d = [c.chunk.text for cands in candidates for c in cands]
    scores = reranker.score(flat_q, flat_d) if flat_q else []
    out, i = [], 0
    for cands in candidates:
        scored = [(scores[i + j], j, c) for j, c in enumerate(cands)]
        i += len(cands)
        scored.sort(key=lambda t: (-t[0], t[1]))  # ties keep the retrieval order
        kept = [(s, c) for s, _, c in scored if min_score is None or s >= min_score][:top_k]
        out.append([replace(c, score=float(s), rank=r, stage="rerank") for r, (s, c) in enumerate(kept, 1)])
    return out


class Qwen3TransformersReranker:
    """The model card's transformers recipe, batched (left padding, last position)."""

    def __init__(self, cfg: RerankerConfig) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.cfg, self.torch = cfg, torch
        self.tok = AutoTokenizer.from_pretrained(cfg.model, padding_side="left")
        self.model = AutoModelForCausalLM.from_pretrained(cfg.model, dtype=getattr(torch, cfg.dtype)).to(cfg.device).eval()
        self.yes, self.no = (self.tok.convert_tokens_to_ids(t) for t in ("yes", "no"))
        self.prefix = self.tok.encode(PREFIX, add_special_tokens=False)
        self.suffix = self.tok.encode(SUFFIX, add_special_tokens=False)

    def score(self, queries: list[str], docs: list[str]) -> list[float]:
        """P(yes) for each (query, doc) pair, `batch_size` pairs per forward pass."""
        torch, cfg = self.torch, self.cfg
        body_max = cfg.max_length - len(self.prefix) - len(self.suffix)
        out: list[float] = []
        for s in range(0, len(queries), cfg.batch_size):
            bodies = [
                f"<Instruct>: {cfg.instruction}\n<Query>: {q}\n<Document>: {d}"
                for q, d in zip(queries[s : s + cfg.batch_size], docs[s : s + cfg.batch_size])
            ]
            enc = self.tok(bodies, add_special_tokens=False, truncation=True, max_length=body_max)
            ids = [self.prefix + b + self.suffix for b in enc["input_ids"]]
            batch = self.tok.pad({"input_ids": ids}, padding=True, return_tensors="pt")
            with torch.inference_mode():
                logits = self.model(**batch.to(cfg.device)).logits[:, -1, :]  # (B, V)
            pair = torch.stack([logits[:, self.no], logits[:, self.yes]], dim=1).float()
            out.extend(pair.log_softmax(dim=1)[:, 1].exp().tolist())
        return out

    def close(self) -> None:
        """Free the model."""
        self.model = None


class Qwen3VLLMReranker:
    """Offline vLLM scoring with the model card's classifier overrides."""

    def __init__(self, cfg: RerankerConfig) -> None:
        from vllm import LLM

        self.cfg = cfg
        args = dict(
            model=cfg.model, runner="pooling", dtype=cfg.dtype, hf_overrides=VLLM_OVERRIDES, max_model_len=cfg.max_length
        )
        if cfg.device == "cpu":
            args["enforce_eager"] = True
        else:  # leave the GPU to the generator's engine: a 0.6B scorer needs little KV cache
            args["gpu_memory_utilization"] = 0.2

        with engine_start():
            self.llm = LLM(**args)

    def score(self, queries: list[str], docs: list[str]) -> list[float]:
        """P(yes) for each pair, one engine call."""
        if not queries:
            return []
        outs = self.llm.score(
            [query_part(self.cfg.instruction, q) for q in queries], [document_part(d) for d in docs], use_tqdm=False
        )
        return [float(o.outputs.score) for o in outs]

    def close(self) -> None:
        """Shut the engine down."""
        llm, self.llm = self.llm, None
        core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()


class Qwen3HTTPReranker:
    """vLLM server `/v1/score` (served with the model card's `--hf-overrides`)."""

    def __init__(self, cfg: RerankerConfig) -> None:
        if not cfg.base_url:
            raise ConfigError("reranker.base_url is required for backend: http")
        self.cfg = cfg
        self.client = JSONClient(
            cfg.base_url, timeout_s=cfg.timeout_s, max_retries=cfg.max_retries, api_key_env=cfg.api_key_env
        )
        self.endpoint = self.client.base_url + "/score"

    def score(self, queries: list[str], docs: list[str]) -> list[float]:
        """P(yes) for each pair; `batch_size` pairs per request."""

        out: list[float] = []
        for s in range(0, len(queries), self.cfg.batch_size):
            q, d = queries[s : s + self.cfg.batch_size], docs[s : s + self.cfg.batch_size]
            data = self.client.post(
                "/score",
                {
                    "model": self.cfg.model,
                    "text_1": [query_part(self.cfg.instruction, x) for x in q],
                    "text_2": [document_part(x) for x in d],
                },
            )
            rows = field(data, "data", endpoint=self.endpoint)
            try:
                by_index = {int(r["index"]): float(r["score"]) for r in rows}
                out.extend(by_index[i] for i in range(len(q)))
            except (KeyError, TypeError, ValueError):
                raise EndpointError(f"{self.endpoint}: unexpected answer, expected {len(q)} scores with index") from None
        return out

    def close(self) -> None:
        """Close the connection pool."""
        self.client.close()


class CrossEncoderReranker:
    """A sentence-transformers CrossEncoder (e.g. a BGE/MiniLM reranker)."""

    def __init__(self, cfg: RerankerConfig) -> None:
        if cfg.backend != "transformers":
            raise ConfigError("reranker: kind cross_encoder runs only with backend: transformers")
        from sentence_transformers import CrossEncoder

        self.cfg = cfg
        self.model = CrossEncoder(cfg.model, device=cfg.device, max_length=cfg.max_length)

    def score(self, queries: list[str], docs: list[str]) -> list[float]:
        """The cross-encoder's (activated) score for each pair, batched."""
        if not queries:
            return []
        res = self.model.predict(
            list(zip(queries, docs)), batch_size=self.cfg.batch_size, show_progress_bar=False, convert_to_numpy=True
        )
        return [float(x) for x in res.reshape(len(queries), -1)[:, -1]]

    def close(self) -> None:
        """Free the model."""
        self.model = None


RERANKERS: dict[tuple[str, str], Callable[[RerankerConfig], Reranker]] = {
    ("qwen3", "transformers"): Qwen3TransformersReranker,
    ("qwen3", "vllm"): Qwen3VLLMReranker,
    ("qwen3", "http"): Qwen3HTTPReranker,
    ("cross_encoder", "transformers"): CrossEncoderReranker,
    ("cross_encoder", "vllm"): CrossEncoderReranker,  # rejected with a clear error in __init__
    ("cross_encoder", "http"): CrossEncoderReranker,
}


def build_reranker(cfg: RerankerConfig) -> Reranker:
    """The reranker for (cfg.kind, cfg.backend)."""
    return RERANKERS[(cfg.kind, cfg.backend)](cfg)
