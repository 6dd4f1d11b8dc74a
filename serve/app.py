"""`lorarag serve --run RUN_DIR`: the trained AdvancedRAGSystem behind an OpenAI-compatible API.

    POST /v1/chat/completions   the last user message is the question; the answer comes from the
                                fallback system (retrieval over the run's index, base + adapter,
                                gate, policy); the decision is in the extra field `lorarag`
    GET  /v1/models             the one served system
    GET  /health                {"status": "ok"}

Concurrent requests are batched into the generator: the first request of a batch waits at most
`max_wait_ms` for others (up to `max_batch`), then the batch is answered in one `system.answer`
call on a single worker thread (the models are not shared between threads). A request body over
`max_body_bytes` gets 413, more than `max_concurrency` requests in flight get 429, a generator
that cannot be reached (a vLLM server that is down) gets 503 — each as OpenAI-style error JSON
`{"error": {"message", "type", "code"}}`. The server binds 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Literal, Protocol

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, ValidationError

from lorarag.rag.http import EndpointError
from lorarag.rag.records import Answer

log = logging.getLogger(__name__)


class AnswerSystem(Protocol):
    """What the server needs: batched answers with their Trace (fallback.system.AdvancedRAGSystem)."""

    def answer(self, questions: list[str]) -> list[Answer]: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class ServeSettings:
    """Batching and limits of one server."""

    model_name: str = "lorarag"  # the name /v1/models lists and responses carry
    max_batch: int = 32  # questions per generator call
    max_wait_ms: float = 10.0  # how long the first request of a batch waits for others
    max_concurrency: int = 128  # requests in flight before 429
    max_body_bytes: int = 64 * 1024


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str
    text: str | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str | list[ContentPart] | None = None


class ChatRequest(BaseModel):
    """The fields of an OpenAI chat request this server reads; sampling fields are accepted and
    ignored (the fallback system decodes greedily, as it was evaluated)."""

    model_config = ConfigDict(extra="allow")
    model: str
    messages: list[ChatMessage]
    stream: bool = False


class ServeError(Exception):
    """A request the server refuses: HTTP status, OpenAI error type and message."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status, self.kind, self.message = status, kind, message


def _error(status: int, kind: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status_code=status)


def question_of(req: ChatRequest) -> str:
    """The last user message's text (a list of parts: their text joined)."""
    for m in reversed(req.messages):
        if m.role == "user":
            text = m.content if isinstance(m.content, str) else \
                " ".join(p.text or "" for p in (m.content or []) if p.type == "text")
            if text.strip():
                return text.strip()
            break
    raise ServeError(400, "invalid_request_error", "messages: no user message with text")


def trace_of(a: Answer) -> dict:
    """The extra `lorarag` field: route, verdict with its probability, memory, sources."""
    t = a.trace
    if t is None:
        return {}
    sources = t.reranked or t.retrieved
    return {"route": t.route, "verdict": t.verdict, "verdict_score": t.verdict_score,
            "verdict_probs": dict(t.verdict_probs), "memory_answer": t.memory_answer,
            "context_answer": t.context_answer, "abstained": a.abstained, "notes": list(t.notes),
            "sources": [{"rank": i, "chunk_id": r.chunk.chunk_id, "source": r.chunk.source,
                         "score": r.score} for i, r in enumerate(sources, 1)]}


class Batcher:
    """Collects concurrent questions into batches for one worker thread."""

    def __init__(self, system: AnswerSystem, settings: ServeSettings) -> None:
        self.system, self.settings = system, settings
        self.queue: asyncio.Queue[tuple[str, asyncio.Future]] = asyncio.Queue()
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lorarag-answer")
        self.task: asyncio.Task | None = None
        self.batches: list[int] = []  # the size of every batch answered (the benchmark reads it)

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._loop())

    async def ask(self, question: str) -> Answer:
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        await self.queue.put((question, fut))
        return await fut

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = [await self.queue.get()]
            deadline = loop.time() + self.settings.max_wait_ms / 1000
            while len(batch) < self.settings.max_batch:
                left = deadline - loop.time()
                if left <= 0:
                    break
                try:
                    batch.append(await asyncio.wait_for(self.queue.get(), left))
                except asyncio.TimeoutError:
                    break
            self.batches.append(len(batch))
            try:
                answers = await loop.run_in_executor(self.pool, self.system.answer, [q for q, _ in batch])
            except Exception as exc:  # handed to every waiting request; the server maps it to a status
                for _, fut in batch:
                    if not fut.done():
                        fut.set_exception(exc)
                continue
            for (_, fut), a in zip(batch, answers):
                if not fut.done():
                    fut.set_result(a)

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
        self.pool.shutdown(wait=True)


def create_app(system: AnswerSystem, settings: ServeSettings = ServeSettings()) -> FastAPI:
    """The FastAPI app serving `system` (built once, closed at shutdown)."""
    batcher = Batcher(system, settings)
    in_flight = 0

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        batcher.start()
        yield
        await batcher.stop()
        system.close()

    app = FastAPI(title="lorarag", lifespan=lifespan)
    app.state.batcher = batcher

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [{"id": settings.model_name, "object": "model", "created": 0,
                                            "owned_by": "lorarag"}]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> JSONResponse:
        nonlocal in_flight
        size = request.headers.get("content-length")
        if size is not None and size.isdigit() and int(size) > settings.max_body_bytes:
            return _error(413, "invalid_request_error", f"request body over {settings.max_body_bytes} bytes")
        body = await request.body()
        if len(body) > settings.max_body_bytes:
            return _error(413, "invalid_request_error", f"request body over {settings.max_body_bytes} bytes")
        if in_flight >= settings.max_concurrency:
            return _error(429, "rate_limit_error", f"more than {settings.max_concurrency} requests in flight")
        in_flight += 1
        try:
            req = ChatRequest.model_validate_json(body)
            if req.stream:
                raise ServeError(400, "invalid_request_error", "stream: true is not supported")
            if req.model != settings.model_name:
                raise ServeError(404, "invalid_request_error",
                                 f"model {req.model!r} is not served (this server: {settings.model_name!r})")
            answer = await batcher.ask(question_of(req))
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err.get("loc", ()))
            return _error(400, "invalid_request_error", f"{where}: {err.get('msg', 'invalid')}")
        except ServeError as exc:
            return _error(exc.status, exc.kind, exc.message)
        except (EndpointError, ConnectionError) as exc:
            log.warning("generator unavailable: %s", exc)
            return _error(503, "service_unavailable", f"the generator is unavailable: {exc}")
        finally:
            in_flight -= 1
        return JSONResponse({
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion", "created": int(time.time()),
            "model": settings.model_name,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": answer.text},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
            "lorarag": trace_of(answer)})

    return app


def serve(system: AnswerSystem, settings: ServeSettings, *, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Run the server until interrupted (uvicorn; SIGINT/SIGTERM shut it down and close the models)."""
    import uvicorn

    uvicorn.run(create_app(system, settings), host=host, port=port, log_level="info")
