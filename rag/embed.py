"""Dense encoders: texts -> L2-normalised float32 vectors [n, d] (inner product = cosine).

Kinds (EmbedderConfig.kind), built by `make_embedder` through `EMBEDDERS`:
- `transformers`: the Qwen3-Embedding recipe: left padding, last-token pooling, the
  instruction prefix `Instruct: {task}\\nQuery:{q}` on queries only, L2-normalised.
- `sentence_transformers`: a SentenceTransformer model (its own pooling), same prefix rule.
- `openai`: POST {base_url}/embeddings (vLLM `--runner pooling`, `swift deploy`, ...) in
  batches, with the retries and timeouts of rag.http.JSONClient.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from lorarag.core.errors import ConfigError
from lorarag.rag.config import EmbedderConfig
from lorarag.rag.generators.http import EndpointError, JSONClient, field

log = logging.getLogger(__name__)

_DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}


def query_text(query: str, instruction: str | None) -> str:
    """The Qwen3-Embedding query format; documents are embedded as they are."""
    return f"Instruct: {instruction}\nQuery:{query}" if instruction else query


def l2_normalise(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm, as float32 (zero rows stay zero)."""
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(norms, 1e-12)


class Embedder:
    """Common API: `embed_documents` and `embed_queries`, both -> float32 [n, d], unit rows."""

    def __init__(self, cfg: EmbedderConfig) -> None:
        self.cfg = cfg

    def _encode(self, texts: list[str]) -> np.ndarray:
        raise NotImplementedError

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        """Embed passages (no instruction)."""
        return self._batched(list(texts))

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        """Embed queries with the instruction prefix."""
        if not all(t.strip() for t in texts):
            raise ValueError("cannot embed an empty text")
        return self._batched([query_text(t, self.cfg.query_instruction) for t in texts])

    def _batched(self, texts: list[str]) -> np.ndarray:
        if not texts:
            raise ValueError("nothing to embed: empty list of texts")
        if not all(t.strip() for t in texts):
            raise ValueError("cannot embed an empty text")
        bs = self.cfg.batch_size
        # Longest first: batches of similar length waste less padding; order restored below.
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        parts = [self._encode([texts[i] for i in order[j : j + bs]]) for j in range(0, len(texts), bs)]
        out = np.empty((len(texts), parts[0].shape[1]), dtype=np.float32)
        out[order] = np.concatenate(parts)
        return l2_normalise(out)


class TransformersEmbedder(Embedder):
    """Qwen3-Embedding style encoder run with transformers (last-token pooling)."""

    def __init__(self, cfg: EmbedderConfig) -> None:
        super().__init__(cfg)
        import torch
        from transformers import AutoModel, AutoTokenizer

        self._torch = torch
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(cfg.model, padding_side="left")
            self.model = AutoModel.from_pretrained(cfg.model, dtype=getattr(torch, _DTYPES[cfg.dtype]))
        except OSError as exc:  # missing folder, no weights, offline hub id
            first = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
            raise ConfigError(f"embedder model {cfg.model!r} cannot be loaded: {first}") from None
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model.to(cfg.device).eval()

    def _encode(self, texts: list[str]) -> np.ndarray:
        torch = self._torch
        batch = self.tokenizer(texts, padding=True, truncation=True, max_length=self.cfg.max_length, return_tensors="pt").to(
            self.cfg.device
        )
        with torch.inference_mode():
            hidden = self.model(**batch).last_hidden_state  # [b, t, h]
        # Left padding: the last position is every row's last real token.
        return hidden[:, -1].float().cpu().numpy()


class SentenceTransformersEmbedder(Embedder):
    """A sentence-transformers model; the query instruction is passed as its prompt."""

    def __init__(self, cfg: EmbedderConfig) -> None:
        super().__init__(cfg)
        from sentence_transformers import SentenceTransformer

        try:
            self.model = SentenceTransformer(cfg.model, device=cfg.device)
        except OSError as exc:
            first = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
            raise ConfigError(f"embedder model {cfg.model!r} cannot be loaded: {first}") from None
        self.model.max_seq_length = cfg.max_length

    def _encode(self, texts: list[str]) -> np.ndarray:
        return self.model.encode(
            texts, batch_size=self.cfg.batch_size, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False
        )


class OpenAIEmbedder(Embedder):
    """Client of an OpenAI-compatible /v1/embeddings endpoint."""

    def __init__(self, cfg: EmbedderConfig) -> None:
        super().__init__(cfg)
        if not cfg.base_url:
            raise ValueError("embedder kind=openai needs `base_url` (e.g. http://127.0.0.1:8000/v1)")
        self.client = JSONClient(
            cfg.base_url, timeout_s=cfg.timeout_s, max_retries=cfg.max_retries, api_key_env=cfg.api_key_env
        )
        self.endpoint = self.client.base_url + "/embeddings"

    def _encode(self, texts: list[str]) -> np.ndarray:
        answer = self.client.post("/embeddings", {"model": self.cfg.model, "input": texts})
        data = field(answer, "data", endpoint=self.endpoint)
        if not isinstance(data, list) or len(data) != len(texts):
            raise EndpointError(
                f"{self.endpoint}: asked for {len(texts)} embeddings, "
                f"got {len(data) if isinstance(data, list) else 'no list'}"
            )
        # The spec gives each item its input index; do not trust list order.
        rows = sorted(data, key=lambda d: field(d, "index", endpoint=self.endpoint))
        try:
            vecs = np.asarray([field(r, "embedding", endpoint=self.endpoint) for r in rows], dtype=np.float32)
        except ValueError:
            raise EndpointError(f"{self.endpoint}: embeddings are not equal-length numbers") from None
        if vecs.ndim != 2:
            raise EndpointError(f"{self.endpoint}: embeddings are not vectors")
        return vecs


EMBEDDERS: dict[str, Callable[[EmbedderConfig], Embedder]] = {
    "transformers": TransformersEmbedder,
    "sentence_transformers": SentenceTransformersEmbedder,
    "openai": OpenAIEmbedder,
}


def make_embedder(cfg: EmbedderConfig) -> Embedder:
    """The embedder named by `cfg.kind`."""
    return EMBEDDERS[cfg.kind](cfg)
