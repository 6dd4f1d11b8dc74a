"""`lorarag bench rag`: one request per item (the original write-up's loops) vs one batched call,
on the SAME local vLLM server and model, side by side in one run:

(a) rerank N candidates for one query: N `/v1/score` requests of one pair vs one request of N pairs
    (rag.rerank.Qwen3HTTPReranker, Qwen3-Reranker prompt);
(b) embed N chunks: N `/v1/embeddings` requests of one text vs one request of N texts
    (rag.embed OpenAIEmbedder);
(c) answer Q questions: Q chat requests one after the other vs one `generate()` call that keeps
    them all in flight so the server batches them (rag.generate_openai.OpenAIGenerator).

Each server is started on 127.0.0.1 (`python -m vllm.entrypoints.openai.api_server`), warmed up
with one request, timed, and stopped by process group before the next one starts. Models: the
tiny Qwen3 models of lorarag.testing.tiny by default (built in a temp dir), or `--models DIR` with lm/,
embedder/, reranker/. Both sides send identical work; the ratio is one-by-one time / batched time.
"""

from __future__ import annotations

import json
import platform
import sys
import tempfile
import time
from pathlib import Path

from lorarag.core.errors import UserError
from lorarag.rag.config import EmbedderConfig, GeneratorConfig, RerankerConfig
from lorarag.rag.embed import make_embedder
from lorarag.rag.generators.base import Message
from lorarag.rag.generators.openai_api import OpenAIGenerator
from lorarag.rag.rerank import VLLM_OVERRIDES, Qwen3HTTPReranker
from lorarag.testing.servers import free_port, launched, vllm_server_cmd
from lorarag.testing.tiny import build_all

SEED = 0
WORDS = (
    "vehicle registration office owner licence plate traffic police safety road driver "
    "accident fine permit company founded headquarters capital city river law article"
).split()


def _texts(n: int, words: int, seed: int) -> list[str]:
    import random

    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(words)) + f" #{i}" for i in range(n)]


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _server(model: Path, port: int, log: Path, *extra: str):
    cmd = vllm_server_cmd(model, port, "--max-num-seqs", "64", *extra)
    return launched(cmd, port, log_path=log)


def bench_rerank(model: Path, n: int, work: Path) -> dict:
    """(a) one /v1/score request per candidate vs one request for all N."""

    port = free_port()
    docs = _texts(n, 60, SEED)
    with _server(
        model,
        port,
        work / "score.log",
        "--runner",
        "pooling",
        "--hf-overrides",
        json.dumps(VLLM_OVERRIDES),
        "--served-model-name",
        "rr",
    ) as base:
        cfg = RerankerConfig(kind="qwen3", backend="http", model="rr", base_url=base + "/v1", batch_size=n)
        r = Qwen3HTTPReranker(cfg)
        r.score(["warm up"], ["warm up"])
        q = "which office registers a vehicle"
        got: dict[str, list] = {}
        one = _timed(lambda: got.update(one=[r.score([q], [d])[0] for d in docs]))
        batched = _timed(lambda: got.update(batched=r.score([q] * n, docs)))
        r.close()
    diff = max(abs(a - b) for a, b in zip(got["one"], got["batched"]))
    return {"n": n, "one_by_one_s": one, "batched_s": batched, "max_score_diff": diff}


def bench_embed(model: Path, n: int, work: Path) -> dict:
    """(b) one /v1/embeddings request per chunk vs one request for all N."""

    port = free_port()
    chunks = _texts(n, 80, SEED + 1)
    with _server(
        model, port, work / "embed.log", "--runner", "pooling", "--convert", "embed", "--served-model-name", "emb"
    ) as base:
        e = make_embedder(EmbedderConfig(kind="openai", model="emb", base_url=base + "/v1", batch_size=n))
        e.embed_documents(["warm up"])
        got: dict[str, list] = {}
        one = _timed(lambda: got.update(one=[e.embed_documents([c])[0] for c in chunks]))
        batched = _timed(lambda: got.update(batched=e.embed_documents(chunks)))
    diff = max(float(abs(a - b).max()) for a, b in zip(got["one"], got["batched"]))
    return {"n": n, "one_by_one_s": one, "batched_s": batched, "max_vector_diff": diff}


def bench_answer(model: Path, n: int, max_new_tokens: int, work: Path) -> dict:
    """(c) Q chat requests one after the other vs one batched generate() call."""

    port = free_port()
    questions = _texts(n, 12, SEED + 2)
    convs = [[Message("system", "Answer from the sources."), Message("user", q)] for q in questions]
    with _server(model, port, work / "chat.log", "--served-model-name", "lm") as base:
        g = OpenAIGenerator(
            GeneratorConfig(
                kind="openai",
                model="lm",
                base_url=base + "/v1",
                max_new_tokens=max_new_tokens,
                batch_size=n,
                max_model_len=512,
            )
        )
        g.generate(convs[:1])
        # ignore_eos is not portable: the same greedy work on both sides, checked below
        got: dict[str, list] = {}
        one = _timed(lambda: got.update(one=[g.generate([c])[0] for c in convs]))
        batched = _timed(lambda: got.update(batched=g.generate(convs)))
        g.close()
    return {
        "n": n,
        "one_by_one_s": one,
        "batched_s": batched,
        "max_new_tokens": max_new_tokens,
        "tokens_one_by_one": sum(len(x.tokens) for x in got["one"]),
        "tokens_batched": sum(len(x.tokens) for x in got["batched"]),
        "same_answers": sum(a.text == b.text for a, b in zip(got["one"], got["batched"])),
    }


def run_bench(models: Path | None, *, candidates: int, chunks: int, questions: int, max_new_tokens: int, out: Path) -> dict:
    """Run (a), (b), (c) and write the results JSON to `out`."""
    with tempfile.TemporaryDirectory(prefix="bench-rag-") as tmp:
        work = Path(tmp)
        if models is None:
            paths = build_all(work / "models")
        else:
            paths = {k: models / k for k in ("lm", "embedder", "reranker")}
            missing = [str(p) for p in paths.values() if not p.exists()]
            if missing:
                raise UserError(f"--models: missing {', '.join(missing)}")
        results = {
            "rerank": bench_rerank(paths["reranker"], candidates, work),
            "embed": bench_embed(paths["embedder"], chunks, work),
            "answer": bench_answer(paths["lm"], questions, max_new_tokens, work),
        }
    for r in results.values():
        r["ratio"] = r["one_by_one_s"] / r["batched_s"]
    res = {
        "results": results,
        "models": str(models or "tiny Qwen3 (lorarag.testing.tiny)"),
        "machine": {"python": sys.version.split()[0], "platform": platform.platform()},
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1), encoding="utf-8")
    return res
