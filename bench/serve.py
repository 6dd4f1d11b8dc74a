"""`lorarag bench serve`: `lorarag serve` under 1, 8 and 32 concurrent clients, in one run.

One server (serve/app.py, uvicorn on 127.0.0.1, dynamic batching) answers three disjoint slices
of the same question pool (the demo world's facts in all the wordings its knowledge base writes,
`data.world.wordings`: bench/demo_kb.py), equal in size: one client sending one request at a time
(the sequential baseline: every batch holds one question), then 8 and 32 clients at once. The
slices are disjoint because the generator's memo answers a repeated greedy request without the
model: a repeated question would measure the memo, not the server.
Reported per setting: answers/s, p50 and p95 latency (s), the mean batch the generator saw, and
throughput as a ratio to the sequential run.

The system is a run dir's trained AdvancedRAGSystem (`--run`), or by default the CPU demo's: SmolLM2-
135M-Instruct in fp32 (any CPU; configs/run/cpu-demo-fp32.yaml, whose single questions are decoded
with `prompt_lookup`), the demo world's BM25 index and a LoRA adapter of the demo's shape whose B
matrices are zero (peft's initialisation: the base model's answers at the adapter's cost), gate
off. The default system's one-client slice is then answered again with plain decoding (the
reference engine), after the three settings, for the p50 ratio of the two engines.
"""

from __future__ import annotations

import json
import logging
import random
import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from lorarag.bench.demo_kb import WorldKB, load_world_kb
from lorarag.core.config import load_config
from lorarag.core.errors import ConfigError
from lorarag.core.paths import packaged_config
from lorarag.fallback.system import AdvancedRAGSystem, Detector
from lorarag.serve.app import AnswerSystem, ServeSettings, create_app, server_config
from lorarag.study.prepare import index_chunks
from lorarag.testing.servers import free_port
from lorarag.trained.components import build_parts
from lorarag.trained.config import RunConfig
from lorarag.trained.load import load_run, read_run

DEMO_CONFIG = "run/cpu-demo-fp32.yaml"  # a shipped config (lorarag.core.paths.packaged_config)
CLIENTS = (1, 8, 32)


def _zero_lora(base: str, rank: int, alpha: int, out: Path) -> Path:
    """A LoRA adapter on every linear layer of `base` with peft's initialisation (B = 0)."""
    if (out / "adapter_model.safetensors").is_file():
        return out
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    get_peft_model(model, LoraConfig(r=rank, lora_alpha=alpha, target_modules="all-linear")).save_pretrained(
        out, safe_serialization=True
    )
    return out


def demo_system(work: Path, generator: dict | None = None) -> tuple[AdvancedRAGSystem, list[str]]:
    """The default system (module docstring) and the demo world's question pool; `generator`:
    settings that replace the demo generator's (the engine under test, bench/engine.py)."""
    from lorarag.rag.config import GeneratorConfig
    from lorarag.train.smollm2 import ensure_smollm2

    cfg = load_config(packaged_config(DEMO_CONFIG), RunConfig)
    if generator:
        gen = GeneratorConfig.model_validate({**cfg.rag.generator.model_dump(), **generator})
        cfg = cfg.model_copy(update={"rag": cfg.rag.model_copy(update={"generator": gen})})
    ensure_smollm2(cfg.train.model)
    assert cfg.data.world is not None  # the demo config is a world config
    kb = load_world_kb(cfg.data.world, cfg.rag.chunker, work / "world")
    chunks = list(kb.corpus.chunks)
    retriever = index_chunks(
        cfg, chunks, len(kb.corpus.documents), cfg.rag.index.model_copy(update={"dir": str(work / "index")})
    )
    sw = cfg.train.swift
    adapter = _zero_lora(cfg.train.model, sw["lora_rank"], sw["lora_alpha"], work / "adapter")
    parts = build_parts(cfg, retriever, adapter, chunks)
    system = AdvancedRAGSystem(parts.rag, Detector(parts.generator, parts.first_tokens, cfg.fallback, None), cfg.fallback)
    return system, question_pool(kb)


def question_pool(kb: WorldKB) -> list[str]:
    """Every fact of the world (each question with an answer) asked in each of its wordings,
    distinct, in a seeded shuffled order (so each slice holds a mix of facts, attributes and wordings)."""
    pool = list(dict.fromkeys(w for it in sorted(kb.items, key=lambda it: it.qid) if it.answers for w in it.all_wordings))
    random.Random(0).shuffle(pool)
    return pool


def _run_clients(url: str, name: str, questions: list[str], clients: int) -> tuple[float, list[float]]:
    """Wall seconds and per-request latencies for `questions` sent by `clients` threads."""

    def one(q: str) -> float:
        t0 = time.perf_counter()
        r = client.post(url, json={"model": name, "messages": [{"role": "user", "content": q}]})
        r.raise_for_status()
        return time.perf_counter() - t0

    with httpx.Client(timeout=600) as client, ThreadPoolExecutor(max_workers=clients) as pool:
        t0 = time.perf_counter()
        lat = list(pool.map(one, questions))
        return time.perf_counter() - t0, lat


def measure(
    system: AnswerSystem,
    pool: list[str],
    requests: int,
    echo: Callable[[str], None] = print,
    clients: tuple[int, ...] = CLIENTS,
) -> list[dict]:
    """One server; each client count in `clients` over its own `requests` questions of `pool` (after
    one warm-up request with a question of none of them)."""
    need = requests * len(CLIENTS) + 1
    if len(pool) < need:
        raise ValueError(f"the question pool has {len(pool)} distinct questions; {need} are needed")
    import uvicorn

    settings = ServeSettings(max_batch=32, max_wait_ms=10.0)
    app = create_app(system, settings)
    port = free_port()
    server = uvicorn.Server(server_config(app, settings, port=port, log_level="warning"))  # as `lorarag serve` runs
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    try:
        for _ in range(600):
            if server.started:
                break
            time.sleep(0.1)
        _run_clients(url, settings.model_name, pool[-1:], 1)  # warm-up: first-call costs
        rows = []
        for k, n in enumerate(clients):
            questions = pool[k * requests : (k + 1) * requests]
            batches = app.state.batcher.batches
            before = len(batches)
            wall, lat = _run_clients(url, settings.model_name, questions, n)
            sizes = batches[before:]
            lat.sort()
            rows.append(
                {
                    "clients": n,
                    "requests": len(questions),
                    "wall_s": wall,
                    "answers_per_s": len(questions) / wall,
                    "p50_s": statistics.median(lat),
                    "p95_s": lat[min(len(lat) - 1, int(0.95 * len(lat)))],
                    "mean_batch": sum(sizes) / len(sizes),
                }
            )
            echo(
                f"  {n:>2} client(s): {rows[-1]['answers_per_s']:.2f} answers/s, p50 {rows[-1]['p50_s']:.2f} s, "
                f"p95 {rows[-1]['p95_s']:.2f} s, mean batch {rows[-1]['mean_batch']:.1f}"
            )
    finally:
        server.should_exit = True
        thread.join(timeout=60)
    base = rows[0]["answers_per_s"]
    for r in rows:
        r["throughput_ratio_vs_sequential"] = r["answers_per_s"] / base
    return rows


def run(run_dir: Path | None, requests: int, out: Path, echo: Callable[[str], None] = print) -> list[dict]:
    """The benchmark (module docstring); writes `out` (JSON) and prints the ratios."""
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per request otherwise
    work = out.parent / "serve-work"
    if run_dir is not None:
        cfg = read_run(run_dir).config  # a bad run dir fails before any model loads
        if cfg.data.world is None:
            raise ConfigError(
                f"{run_dir}: bench serve draws its questions from the demo world; this run "
                "has a user's knowledge base (data.corpus) instead"
            )
        pool = question_pool(load_world_kb(cfg.data.world, cfg.rag.chunker, work / "world"))
        system = load_run(run_dir)
        what = f"run {run_dir}"
    else:
        system, pool = demo_system(work)
        what = "SmolLM2-135M-Instruct fp32, zero-B LoRA, demo world BM25 index"
    lookup = system.detector.generator.cfg.prompt_lookup if run_dir is None else None
    echo(f"bench serve: {what}{f', prompt_lookup {lookup}' if lookup else ''}; {requests} distinct questions per setting")
    rows = measure(system, pool, requests, echo)
    result: dict = {"system": what, "rows": rows}
    if lookup:  # the same one-client slice on plain transformers decoding, for the engine's ratio
        system.close()
        system, _ = demo_system(work, {"prompt_lookup": None})
        echo("reference: plain transformers fp32 decoding, the same questions")
        ref = measure(system, pool, requests, echo, clients=(1,))[0]
        ref["p50_ratio_reference_over_engine"] = ref["p50_s"] / rows[0]["p50_s"]
        result["reference_one_client"] = ref
        echo(
            f"one client: p50 {ref['p50_s']:.2f} s plain, {rows[0]['p50_s']:.2f} s with prompt_lookup "
            f"({ref['p50_ratio_reference_over_engine']:.2f}x)"
        )
    system.close()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1), encoding="utf-8")
    for r in rows[1:]:
        echo(f"throughput at {r['clients']} clients / one at a time: {r['throughput_ratio_vs_sequential']:.2f}x")
    echo(f"-> {out}")
    return rows
