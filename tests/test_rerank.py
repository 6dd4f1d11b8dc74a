"""Rerankers: Qwen3-Reranker scoring against the model card's unbatched recipe, on every backend."""

from __future__ import annotations

import json

import pytest

from lorarag.rag.config import RerankerConfig
from lorarag.rag.records import Chunk, Retrieved
from lorarag.rag.rerank import VLLM_OVERRIDES, build_reranker, rerank
from tests.servers import free_port, launched, needs_vllm, vllm_server_cmd

QUERIES = ["capital of France", "capital of France", "机动车 注册登记", "founded when"]
DOCS = [
    "Paris is the capital of France.",
    "The quick brown fox jumps.",
    "机动车所有人应当向住所地的公安机关交通管理部门申请注册登记。",
    "Founded in 1998 in Berlin by Alice Martin. " * 4,
]
INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"


def _model_card_reference(model_dir, query, doc):
    """The Qwen3-Reranker model card computation for ONE pair, written out independently."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    text = (
        "<|im_start|>system\nJudge whether the Document meets the requirements based on the "
        'Query and the Instruct provided. Note that the answer can only be "yes" or "no".'
        "<|im_end|>\n<|im_start|>user\n"
        f"<Instruct>: {INSTRUCTION}\n<Query>: {query}\n<Document>: {doc}"
        "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )
    ids = torch.tensor([tok.encode(text, add_special_tokens=False)])
    with torch.no_grad():
        last = model(ids).logits[0, -1]
    yes, no = last[tok.convert_tokens_to_ids("yes")], last[tok.convert_tokens_to_ids("no")]
    return float(torch.softmax(torch.stack([yes, no]), 0)[0])


@pytest.fixture(scope="module")
def reference(tiny_models):
    import torch

    torch.set_num_threads(1)
    return [_model_card_reference(tiny_models["reranker"], q, d) for q, d in zip(QUERIES, DOCS)]


def _cfg(tiny_models, backend, **kw):
    return RerankerConfig(
        kind="qwen3",
        backend=backend,
        model=str(tiny_models["reranker"]),
        instruction=INSTRUCTION,
        batch_size=3,
        max_length=512,
        **kw,
    )


def test_transformers_batched_scores_match_the_model_card(tiny_models, reference):
    r = build_reranker(_cfg(tiny_models, "transformers"))
    scores = r.score(QUERIES, DOCS)  # batches of 3 and 1, left-padded
    assert scores == pytest.approx(reference, abs=1e-5)
    assert all(0.0 < s < 1.0 for s in scores)
    assert len(set(round(s, 6) for s in scores)) == 4  # the tiny model does discriminate


def _cands(texts):
    return [
        Retrieved(Chunk(f"c{i}", "d", "f.md", t, 0, len(t)), score=1.0 / (i + 1), rank=i + 1, stage="bm25")
        for i, t in enumerate(texts)
    ]


class _TableReranker:
    """A stand-in for the model: returns scores from a table (tests rerank() itself)."""

    def __init__(self, table):
        self.table, self.calls = table, []

    def score(self, queries, docs):
        self.calls.append(len(queries))
        return [self.table[d] for d in docs]

    def close(self):
        pass


def test_rerank_orders_cuts_thresholds_and_batches_once():
    table = {"a": 0.2, "b": 0.9, "c": 0.5, "d": 0.9, "e": 0.05}
    fake = _TableReranker(table)
    out = rerank(fake, ["q1", "q2"], [_cands(["a", "b", "c", "d"]), _cands(["e"])], top_k=3, min_score=0.1)
    assert fake.calls == [5]  # one batched call for all pairs of all queries
    assert [r.chunk.text for r in out[0]] == ["b", "d", "c"]  # tie b/d keeps retrieval order
    assert [r.rank for r in out[0]] == [1, 2, 3] and {r.stage for r in out[0]} == {"rerank"}
    assert out[0][0].score == 0.9
    assert out[1] == []  # below the threshold


def test_cross_encoder_kind_matches_a_manual_forward(tiny_models, tmp_path):
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_models["reranker"])
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(tiny_models["reranker"], num_labels=1)
    model.save_pretrained(tmp_path / "ce")
    tok.chat_template = None  # a classic cross-encoder: pairs as text pairs (ST 6 would chat-format)
    tok.save_pretrained(tmp_path / "ce")
    r = build_reranker(RerankerConfig(kind="cross_encoder", model=str(tmp_path / "ce"), batch_size=2, max_length=128))
    scores = r.score(QUERIES[:3], DOCS[:3])
    ref = []
    for q, d in zip(QUERIES[:3], DOCS[:3]):
        enc = tok(q, d, return_tensors="pt", truncation=True, max_length=128)
        with torch.no_grad():
            ref.append(float(torch.sigmoid(model(**enc).logits[0, 0])))
    assert scores == pytest.approx(ref, abs=1e-5)


@pytest.mark.slow
@needs_vllm
def test_vllm_offline_and_score_server_match_the_model_card(tiny_models, reference, tmp_path):
    r = build_reranker(_cfg(tiny_models, "vllm"))
    try:
        assert r.score(QUERIES, DOCS) == pytest.approx(reference, abs=1e-4)
    finally:
        r.close()
    port = free_port()
    cmd = vllm_server_cmd(
        tiny_models["reranker"],
        port,
        "--runner",
        "pooling",
        "--hf-overrides",
        json.dumps(VLLM_OVERRIDES),
        "--served-model-name",
        "rr",
    )
    with launched(cmd, port, log_path=tmp_path / "score-server.log") as base:
        r = build_reranker(
            RerankerConfig(
                kind="qwen3", backend="http", model="rr", base_url=base + "/v1", instruction=INSTRUCTION, batch_size=3
            )
        )
        assert r.score(QUERIES, DOCS) == pytest.approx(reference, abs=1e-4)
        r.close()


def test_http_reranker_down_is_an_endpoint_error_naming_it():
    from lorarag.rag.generators.http import EndpointError

    url = f"http://127.0.0.1:{free_port()}/v1"
    r = build_reranker(RerankerConfig(kind="qwen3", backend="http", model="rr", base_url=url, max_retries=1, timeout_s=2))
    with pytest.raises(EndpointError, match=f"{url}/score.*cannot connect.*2 attempt"):
        r.score(["q"], ["d"])
    with pytest.raises(Exception, match="base_url"):
        build_reranker(RerankerConfig(kind="qwen3", backend="http", model="rr"))
