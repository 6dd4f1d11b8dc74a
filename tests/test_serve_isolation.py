"""Serving robustness: one request's failure stays its own, chunked bodies obey the size limit, and
`serve --port` takes only real TCP ports.

The answering system is the real AdvancedRAGSystem on the tiny Qwen3 + LoRA (transformers kind,
max_model_len 512) over fixed sources: retrieval is outside what is tested here. Servers listen on
127.0.0.1 only; every test sends a bounded number of requests.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from lorarag.rag.records import Answer, Chunk, Retrieved

from .test_run_e2e import REPO

URL = "/v1/chat/completions"
NORMAL = [
    "Who founded Beloria Labs?",
    "Where is Beloria Labs based?",
    "When was Beloria Labs founded?",
    "Who is the CEO of Beloria Labs?",
    "What does Beloria Labs make?",
    "How many people work at Beloria?",
    "Which city hosts Beloria Labs?",
    "Who chairs the Beloria board?",
]
# ~59 KB: under the 64 KB body limit, but thousands of tokens against a 512-token window
LONG = "Tell me everything about Beloria Labs and its founders. " * 1050


def _body(q: str) -> dict:
    return {"model": "lorarag", "messages": [{"role": "user", "content": q}]}


class FixedSources:
    """The wrapped RAGSystem's retrieval stages, answering every question with the same two sources."""

    def __init__(self) -> None:
        texts = [
            "Beloria Labs was founded in 2011 by Ana Varga in Lisbon.",
            "Beloria Labs makes sensors; its CEO is Tomas Ek.",
        ]
        self.sources = [Retrieved(Chunk(f"c{i}", "kb.md", "kb.md", t, 0, len(t)), 1.0, i + 1) for i, t in enumerate(texts)]

    def retrieve_stages(self, questions):
        return [list(self.sources) for _ in questions], [list(self.sources) for _ in questions], 0.0, 0.0

    def close(self) -> None:
        pass


class Counting:
    """The real system, with the questions of each `answer` call recorded."""

    def __init__(self, system) -> None:
        self.system, self.calls = system, []
        self.detector = system.detector  # what the server's window check reads

    def answer(self, questions):
        self.calls.append(list(questions))
        return self.system.answer(questions)

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def system(tiny_models, lora):
    import torch

    torch.set_num_threads(1)
    from lorarag.fallback.config import FallbackConfig, GateConfig
    from lorarag.fallback.system import AdvancedRAGSystem, Detector
    from lorarag.fallback.verdict import label_first_tokens
    from lorarag.rag.config import GeneratorConfig
    from lorarag.rag.generators.registry import build_generator

    gen = build_generator(
        GeneratorConfig(
            kind="transformers",
            model=str(tiny_models["lm"]),
            adapters={"lora": str(lora)},
            max_new_tokens=12,
            max_model_len=512,
            batch_size=8,
        )
    )
    cfg = FallbackConfig(gate=GateConfig(enabled=False))
    det = Detector(gen, label_first_tokens(gen.tokenizer), cfg, None)
    yield AdvancedRAGSystem(FixedSources(), det, cfg)
    gen.close()


@pytest.fixture()
def served(system):
    """A real uvicorn server on 127.0.0.1 around the counting system; yields (base url, counting system)."""
    from lorarag.serve.app import ServeSettings, create_app
    from tests.servers import served_app

    counting = Counting(system)
    with served_app(create_app(counting, ServeSettings(max_wait_ms=500))) as (url, _):
        yield url, counting


def test_an_over_long_question_alone_gets_400_and_never_reaches_the_model(served):
    url, counting = served
    assert len(json.dumps(_body(LONG)).encode()) < 64 * 1024  # the body limit is not what refuses it
    r = httpx.post(url + URL, json=_body(LONG), timeout=300)
    err = r.json()["error"]
    assert r.status_code == 400 and err["code"] == 400 and err["type"] == "invalid_request_error"
    assert "too long" in err["message"] and "max_model_len 512" in err["message"]
    assert counting.calls == []  # refused before it joined a batch


def test_an_over_long_question_among_normal_ones_fails_alone(served, system):
    url, counting = served
    alone = {q: a.text for q, a in zip(NORMAL, system.answer(NORMAL))}  # greedy: the same answers
    qs = [*NORMAL[:4], LONG, *NORMAL[4:]]
    with ThreadPoolExecutor(max_workers=len(qs)) as pool:
        got = list(pool.map(lambda q: httpx.post(url + URL, json=_body(q), timeout=300), qs))
    for q, r in zip(qs, got):
        if q == LONG:
            assert r.status_code == 400 and "too long" in r.json()["error"]["message"]
        else:
            assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == alone[q]
    asked = [q for call in counting.calls for q in call]
    assert sorted(asked) == sorted(NORMAL) and max(map(len, counting.calls)) > 1  # batched, without it


def test_the_openai_kind_checks_the_window_by_its_own_bound(tmp_path):
    """kind openai, against a server without /tokenize (swift, Ollama): a short question passes on the
    UTF-8 byte bound alone; the long one is refused with its size in bytes (no tokenizer here)."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from lorarag.fallback.config import FallbackConfig, GateConfig
    from lorarag.fallback.system import AdvancedRAGSystem, Detector
    from lorarag.rag.config import GeneratorConfig
    from lorarag.rag.generators.registry import build_generator
    from lorarag.serve.window import QuestionTooLong, window_check

    asked: list[str] = []

    class NoTokenize(BaseHTTPRequestHandler):
        def do_POST(self):  # http.server's method name
            asked.append(self.path)
            self.send_response(404)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), NoTokenize)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        gen = build_generator(
            GeneratorConfig(
                kind="openai",
                model="base",
                adapters={"lora": "sft"},
                max_retries=0,
                base_url=f"http://127.0.0.1:{server.server_port}/v1",
                max_model_len=512,
            )
        )
        cfg = FallbackConfig(gate=GateConfig(enabled=False))
        check = window_check(AdvancedRAGSystem(FixedSources(), Detector(gen, {}, cfg, None), cfg))
        check(NORMAL[0])
        assert asked == []  # decided on the byte bound, no request
        with pytest.raises(QuestionTooLong, match=f"{len(LONG.encode())} bytes"):
            check(LONG)
        assert asked == ["/tokenize"]
    finally:
        server.shutdown()


class Upper:
    """A stand-in system: answers each question in upper case, and a whole call fails when it holds
    a question with "boom" (a failure the window check cannot foresee)."""

    def __init__(self, exc: Exception | None = None) -> None:
        self.calls: list[list[str]] = []
        self.exc = exc

    def answer(self, questions):
        self.calls.append(list(questions))
        if any("boom" in q for q in questions):
            raise self.exc or RuntimeError("boom")
        return [Answer(question=q, text=q.upper()) for q in questions]

    def close(self) -> None:
        pass


def _concurrently(app, questions):
    from fastapi.testclient import TestClient

    with TestClient(app) as client, ThreadPoolExecutor(max_workers=len(questions)) as pool:
        return list(pool.map(lambda q: client.post(URL, json=_body(q)), questions))


def test_a_batch_that_raises_is_answered_one_question_at_a_time():
    from lorarag.serve.app import ServeSettings, create_app

    system = Upper()
    qs = ["one", "two", "boom three", "four", "five"]
    got = _concurrently(create_app(system, ServeSettings(max_wait_ms=500)), qs)
    for q, r in zip(qs, got):
        if q == "boom three":
            assert r.status_code == 500 and r.json()["error"]["type"] == "server_error"
        else:
            assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == q.upper()
    failed = [c for c in system.calls if "boom three" in c and len(c) > 1]
    assert failed and ["boom three"] in system.calls  # the batch failed, then the question alone


def test_a_generator_that_is_down_fails_the_batch_once_without_retrying_each():
    from lorarag.rag.generators.http import EndpointDown
    from lorarag.serve.app import ServeSettings, create_app

    system = Upper(EndpointDown("http://127.0.0.1:1/v1/chat/completions: cannot connect"))
    qs = ["boom one", "two", "three"]
    got = _concurrently(create_app(system, ServeSettings(max_wait_ms=500)), qs)
    assert all(r.status_code == 503 and "unavailable" in r.json()["error"]["message"] for r in got)
    assert sum(len(c) for c in system.calls) == len(qs)  # each question was sent once, none alone again


def _asgi_post(app, receive) -> list[dict]:
    """POST /v1/chat/completions straight through the ASGI app with a chunked body from `receive`."""
    sent: list[dict] = []

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": URL,
        "raw_path": URL.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"), (b"transfer-encoding", b"chunked")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    asyncio.run(app(scope, receive, send))
    return sent


def test_a_chunked_body_over_the_limit_is_refused_as_soon_as_it_passes_it():
    """1 KiB chunks of a 1 MiB body against a 4096-byte limit: 4 chunks are exactly the limit, the
    5th passes it, and nothing after it is pulled (a server reading it all would pull 1024)."""
    from lorarag.serve.app import ServeSettings, create_app

    app = create_app(Upper(), ServeSettings(max_body_bytes=4096))
    pulled = 0

    async def receive():
        nonlocal pulled
        pulled += 1
        return {"type": "http.request", "body": b"x" * 1024, "more_body": pulled < 1024}

    sent = _asgi_post(app, receive)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    assert start["status"] == 413 and "4096" in json.loads(body)["error"]["message"]
    assert pulled == 5


def test_a_chunked_body_within_the_limit_is_read_whole():
    from lorarag.serve.app import ServeSettings, create_app

    payload = json.dumps(_body("chunked question")).encode()
    parts = [payload[i : i + 7] for i in range(0, len(payload), 7)]
    from fastapi.testclient import TestClient

    with TestClient(create_app(Upper(), ServeSettings(max_body_bytes=4096))) as client:
        r = client.post(URL, content=iter(parts), headers={"content-type": "application/json"})
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "CHUNKED QUESTION"


def test_an_endless_chunked_upload_to_a_real_server_is_stopped_early():
    """Over a real socket the client gets its 413 (or the connection closed under it) long before an
    endless body has been sent: what it managed to push is bounded by the socket buffers, not 1 GB."""
    from lorarag.serve.app import ServeSettings, create_app
    from tests.servers import served_app

    yielded = 0
    cap = 1024 * 1024 * 1024  # the client gives up by itself only after 1 GiB

    def endless():
        nonlocal yielded
        while yielded < cap:
            yielded += 65536
            yield b"x" * 65536

    with served_app(create_app(Upper(), ServeSettings(max_body_bytes=4096))) as (url, _):
        try:
            r = httpx.post(f"{url}{URL}", content=endless(), timeout=60, headers={"content-type": "application/json"})
            assert r.status_code == 413
        except (httpx.WriteError, httpx.RemoteProtocolError, httpx.ReadError):
            pass  # the server closed the connection while the client was still writing
        assert yielded < 64 * 1024 * 1024


@pytest.mark.parametrize("port", ["70000", "0", "-5"])
def test_serve_refuses_a_port_outside_1_to_65535(tmp_path, port):
    out = subprocess.run(
        [sys.executable, "-m", "lorarag.cli", "serve", "--run", str(tmp_path), f"--port={port}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert out.stderr == f"error: --port: {port} is not a TCP port (1-65535)\n"
