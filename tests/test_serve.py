"""`lorarag ask --run`, `lorarag.load_run` and `lorarag serve` on a real trained run of the reduced demo
(tiny Qwen3, a few LoRA steps): the answers are the fallback system's, with its trace."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from .test_run_e2e import REPO, _in_tmp

pytestmark = pytest.mark.slow

QUESTIONS = [
    "Which city is home to Beloria Labs's headquarters?",
    "Who is the CEO of Beloria Labs?",
    "When was Beloria Labs founded?",
]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    from lorarag.study.pipeline import run

    tmp = tmp_path_factory.mktemp("served")
    cfg = _in_tmp(tmp)
    run(cfg, echo=lambda _: None)
    return Path(cfg.runs_dir) / cfg.name


class Counting:
    """The real system, with its calls counted (what the batching tests observe)."""

    def __init__(self, system):
        self.system, self.calls, self.closed = system, [], False

    def answer(self, questions):
        self.calls.append(len(questions))
        return self.system.answer(questions)

    def close(self):
        self.closed = True
        self.system.close()


@pytest.fixture(scope="module")
def served(run_dir):
    """A real uvicorn server on 127.0.0.1 around the run's system; yields (base url, counting system)."""
    from lorarag.serve.app import ServeSettings, create_app
    from lorarag.trained.load import load_run
    from tests.servers import served_app

    system = Counting(load_run(run_dir))
    with served_app(create_app(system, ServeSettings(max_wait_ms=200, max_body_bytes=4096))) as (url, thread):
        yield url, system
    assert not thread.is_alive() and system.closed  # shutdown closes the models


def test_load_run_answers_through_the_fallback(run_dir):
    from lorarag import load_run

    system = load_run(run_dir)
    try:
        (a,) = system.answer(QUESTIONS[:1])
    finally:
        system.close()
    t = a.trace
    assert t.route in ("context", "fallback", "abstain") and t.verdict is not None
    # its own index: the world's profile paragraphs (BEIR documents `orgs/<org>/profile#<attribute>`)
    assert t.reranked and all(r.chunk.doc_id.startswith("orgs/org") for r in t.reranked)
    assert any(n.startswith("gate doubt (closed_book_nll)=") for n in t.notes)  # the gate read the memory


def test_ask_run_prints_route_verdict_and_sources_and_json_has_the_trace(run_dir):
    cmd = [sys.executable, "-m", "lorarag.cli", "ask", QUESTIONS[0], "--run", str(run_dir)]
    out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "route: " in out.stdout and "verdict: " in out.stdout and "Sources:" in out.stdout
    js = subprocess.run([*cmd, "--json"], cwd=REPO, capture_output=True, text=True, timeout=300)
    rec = json.loads(js.stdout)
    assert rec["trace"]["route"] in ("context", "fallback", "abstain") and rec["trace"]["reranked"]


def test_ask_run_refuses_a_folder_that_is_not_a_run(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "lorarag.cli", "ask", "q", "--run", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and out.stderr.strip().count("\n") == 0 and "not a run dir" in out.stderr


def test_openai_client_gets_the_fallback_answer_and_trace(served, run_dir):
    from openai import OpenAI

    from lorarag.trained.load import load_run

    url, _ = served
    client = OpenAI(base_url=url + "/v1", api_key="unused")
    assert [m.id for m in client.models.list().data] == ["lorarag"]
    resp = client.chat.completions.create(model="lorarag", messages=[{"role": "user", "content": QUESTIONS[1]}])
    extra = resp.model_extra["lorarag"]
    assert extra["route"] in ("context", "fallback", "abstain") and extra["sources"]
    system = load_run(run_dir)  # the same question asked in-process: the same answer (greedy)
    try:
        (a,) = system.answer([QUESTIONS[1]])
    finally:
        system.close()
    assert resp.choices[0].message.content == a.text and extra["route"] == a.trace.route
    assert httpx.get(url + "/health").json() == {"status": "ok"}


def test_concurrent_requests_are_batched_and_answered_as_alone(served):
    url, system = served
    body = lambda q: {"model": "lorarag", "messages": [{"role": "user", "content": q}]}  # noqa: E731
    alone = {q: httpx.post(url + "/v1/chat/completions", json=body(q), timeout=300).json() for q in QUESTIONS}
    before = len(system.calls)
    qs = QUESTIONS * 3
    with ThreadPoolExecutor(max_workers=len(qs)) as pool:
        got = list(pool.map(lambda q: httpx.post(url + "/v1/chat/completions", json=body(q), timeout=300).json(), qs))
    calls = system.calls[before:]
    assert sum(calls) == len(qs) and max(calls) > 1  # fewer generator calls than requests
    for q, r in zip(qs, got):
        assert r["choices"][0]["message"]["content"] == alone[q]["choices"][0]["message"]["content"]


@pytest.mark.parametrize(
    "payload,status,words",
    [
        (b"{not json", 400, "json"),
        (json.dumps({"model": "lorarag", "messages": []}).encode(), 400, "no user message"),
        (
            json.dumps({"model": "lorarag", "messages": [{"role": "user", "content": "   "}]}).encode(),
            400,
            "no user message",
        ),
        (json.dumps({"model": "other", "messages": [{"role": "user", "content": "q"}]}).encode(), 404, "not served"),
        (
            json.dumps({"model": "lorarag", "stream": True, "messages": [{"role": "user", "content": "q"}]}).encode(),
            400,
            "stream",
        ),
        (json.dumps({"model": "lorarag", "messages": [{"role": "wizard", "content": "q"}]}).encode(), 400, "role"),
        (json.dumps({"model": "lorarag", "messages": [{"role": "user", "content": "q" * 5000}]}).encode(), 413, "4096"),
    ],
)
def test_bad_requests_get_openai_style_errors(served, payload, status, words):
    url, _ = served
    r = httpx.post(url + "/v1/chat/completions", content=payload, headers={"content-type": "application/json"})
    err = r.json()["error"]
    assert r.status_code == status and err["code"] == status and words in err["message"].lower()


def test_too_many_requests_in_flight_get_429():
    """A system that holds its batch until released: the second request beyond the limit is refused."""
    from fastapi.testclient import TestClient

    from lorarag.serve.app import ServeSettings, create_app

    gate = threading.Event()

    class Held:
        def answer(self, questions):
            gate.wait(30)
            raise ConnectionError("released")

        def close(self):
            pass

    with TestClient(create_app(Held(), ServeSettings(max_concurrency=1, max_wait_ms=0))) as client:
        body = {"model": "lorarag", "messages": [{"role": "user", "content": "q"}]}
        with ThreadPoolExecutor(max_workers=1) as pool:
            first = pool.submit(client.post, "/v1/chat/completions", json=body)
            time.sleep(0.5)
            second = client.post("/v1/chat/completions", json=body)
            gate.set()
            assert second.status_code == 429 and second.json()["error"]["type"] == "rate_limit_error"
            assert first.result().status_code == 503  # a generator that cannot be reached


def test_generator_that_is_down_gives_503(run_dir):
    """The run's system with its generator moved to an OpenAI-compatible server that is not running."""
    from fastapi.testclient import TestClient

    from lorarag.core.config import load_config
    from lorarag.fallback.system import AdvancedRAGSystem, Detector
    from lorarag.rag.retrieve import load_retriever
    from lorarag.serve.app import create_app
    from lorarag.testing.servers import free_port
    from lorarag.trained.components import build_parts
    from lorarag.trained.config import RunConfig

    cfg = load_config(run_dir / "config.yaml", RunConfig)
    gen = cfg.rag.generator.model_copy(
        update={
            "kind": "openai",
            "model": "base",
            "max_retries": 0,
            "timeout_s": 5,
            "base_url": f"http://127.0.0.1:{free_port()}/v1",
        }
    )
    det_cfg = cfg.fallback.detector.model_copy(update={"tokenizer": cfg.rag.generator.model, "adapter": None})
    cfg = cfg.model_copy(
        update={
            "rag": cfg.rag.model_copy(update={"generator": gen}),
            "fallback": cfg.fallback.model_copy(update={"detector": det_cfg}),
        }
    )
    retriever = load_retriever(cfg.rag.index, cfg.rag.retrieval)
    parts = build_parts(cfg, retriever, None, list(retriever.index.chunks))
    system = AdvancedRAGSystem(parts.rag, Detector(parts.generator, parts.first_tokens, cfg.fallback, None), cfg.fallback)
    with TestClient(create_app(system)) as client:
        r = client.post(
            "/v1/chat/completions", json={"model": "lorarag", "messages": [{"role": "user", "content": QUESTIONS[0]}]}
        )
    assert r.status_code == 503 and "unavailable" in r.json()["error"]["message"]


def test_sharded_eval_merged_equals_the_one_process_eval(run_dir, tmp_path):
    """`lorarag eval --shard I/N` on each shard, `--merge N`: the same rows as one process, item for
    item (latency aside); a missing shard is a one-line error; `--slurm` writes the array job."""
    from dataclasses import replace

    from lorarag.eval.records import load_results

    def cfg(out):
        path = tmp_path / "eval" / f"{out}.yaml"
        path.parent.mkdir(exist_ok=True)
        path.write_text(
            f"scenarios: {run_dir / 'scenarios/test.jsonl'}\ncomponents: {run_dir / 'config.yaml'}\n"
            f"system: {{kind: base_rag, name: base_rag, context: presented, max_new_tokens: 8}}\n"
            f"out_dir: {tmp_path / out}\n"
        )
        return str(path)

    def cli(*args):
        return subprocess.run(
            [sys.executable, "-m", "lorarag.cli", "eval", *args], cwd=REPO, capture_output=True, text=True, timeout=600
        )

    one, many = cfg("one"), cfg("many")
    assert cli(one).returncode == 0
    assert cli(many, "--shard", "0/2").returncode == 0
    missing = cli(many, "--merge", "2")
    assert missing.returncode == 2 and "shard 1/2 missing" in missing.stderr and missing.stderr.count("\n") == 1
    assert cli(many, "--shard", "1/2").returncode == 0
    merged = cli(many, "--merge", "2")
    assert merged.returncode == 0, merged.stderr[-1500:]
    strip = lambda rows: [replace(r, latency_s=0.0) for r in rows]  # noqa: E731
    assert strip(load_results(tmp_path / "many")) == strip(load_results(tmp_path / "one"))
    script = cli(many, "--slurm", str(tmp_path / "eval.sbatch"), "--shards", "2")
    assert script.returncode == 0 and "--array=0-1" in (tmp_path / "eval.sbatch").read_text()
