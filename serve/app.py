"""`lorarag serve --run RUN_DIR`: the trained AdvancedRAGSystem behind an OpenAI-compatible API.

    POST /v1/chat/completions   the last user message is the question; the answer comes from the
                                fallback system (retrieval over the run's index, base + adapter,
                                gate, policy); the decision is in the extra field `lorarag`
    GET  /v1/models             the one served system
    GET  /health                {"status": "ok"}

Concurrent requests are batched into the generator (serve/batch.py): each question is first
checked alone against the generator's window (serve/window.py), and one request's failure never
reaches the others of its batch. Statuses, each as OpenAI-style error JSON
`{"error": {"message", "type", "code"}}`:

    400  malformed request, or a question too long for the model's window whatever is retrieved
    413  a body over `max_body_bytes`: refused from its Content-Length, or, for a chunked body
         (no Content-Length), as soon as the bytes counted on arrival pass the limit; the rest
         is never read (the 413 closes the connection), so at most the limit plus one received
         chunk is ever held
    429  more than `max_concurrency` requests in flight
    431  a request head over `max_header_bytes` or `max_headers` fields, refused as it arrives
         (serve/limits.py: what is past the limit is never buffered); the connection closes
    503  a generator that cannot be reached (a vLLM server that is down)
    500  anything else answering this one question raised (logged with its traceback)

The server binds 127.0.0.1 unless told otherwise; an empty host (which would bind every interface)
is refused.
"""

from __future__ import annotations

import logging
import time
import uuid
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Literal

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, ValidationError

from lorarag.core.errors import ConfigError
from lorarag.rag.generators.http import EndpointError
from lorarag.rag.prompt import ContextWindowError
from lorarag.rag.records import Answer
from lorarag.serve.batch import AnswerSystem, Batcher

__all__ = ["AnswerSystem", "ServeSettings", "create_app", "serve"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServeSettings:
    """Batching and limits of one server."""

    model_name: str = "lorarag"  # the name /v1/models lists and responses carry
    max_batch: int = 32  # questions per generator call
    max_wait_ms: float = 10.0  # how long the first request of a batch waits for others
    max_concurrency: int = 128  # requests in flight before 429
    max_body_bytes: int = 64 * 1024
    max_header_bytes: int = 16 * 1024  # request line and headers (h11's default): past it, 431
    max_headers: int = 100  # header fields of one request: past it, 431


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
    # A 413 closes the connection: uvicorn would otherwise go on reading (and discarding) the rest of
    # an upload the app refused, however long, to keep the connection alive for the next request.
    headers = {"connection": "close"} if status == 413 else None
    return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status_code=status, headers=headers)


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused (413) once more than `limit` bytes are announced or have arrived; a chunked
    body is counted as it arrives and the rest of it is never read."""
    too_big = ServeError(413, "invalid_request_error", f"request body over {limit} bytes")
    size = request.headers.get("content-length")
    if size is not None and size.isdigit() and int(size) > limit:
        raise too_big
    chunks, n = [], 0
    async for chunk in request.stream():
        n += len(chunk)
        if n > limit:
            raise too_big
        chunks.append(chunk)
    return b"".join(chunks)


def question_of(req: ChatRequest) -> str:
    """The last user message's text (a list of parts: their text joined)."""
    for m in reversed(req.messages):
        if m.role == "user":
            text = (
                m.content
                if isinstance(m.content, str)
                else " ".join(p.text or "" for p in (m.content or []) if p.type == "text")
            )
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
    return {
        "route": t.route,
        "verdict": t.verdict,
        "verdict_score": t.verdict_score,
        "verdict_probs": dict(t.verdict_probs),
        "memory_answer": t.memory_answer,
        "context_answer": t.context_answer,
        "abstained": a.abstained,
        "notes": list(t.notes),
        "sources": [
            {"rank": i, "chunk_id": r.chunk.chunk_id, "source": r.chunk.source, "score": r.score}
            for i, r in enumerate(sources, 1)
        ],
    }


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
        return {
            "object": "list",
            "data": [{"id": settings.model_name, "object": "model", "created": 0, "owned_by": "lorarag"}],
        }

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> JSONResponse:
        nonlocal in_flight
        try:
            body = await read_body(request, settings.max_body_bytes)
        except ServeError as exc:
            return _error(exc.status, exc.kind, exc.message)
        if in_flight >= settings.max_concurrency:
            return _error(429, "rate_limit_error", f"more than {settings.max_concurrency} requests in flight")
        in_flight += 1
        try:
            req = ChatRequest.model_validate_json(body)
            if req.stream:
                raise ServeError(400, "invalid_request_error", "stream: true is not supported")
            if req.model != settings.model_name:
                raise ServeError(
                    404, "invalid_request_error", f"model {req.model!r} is not served (this server: {settings.model_name!r})"
                )
            answer = await batcher.ask(question_of(req))
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err.get("loc", ()))
            return _error(400, "invalid_request_error", f"{where}: {err.get('msg', 'invalid')}")
        except ServeError as exc:
            return _error(exc.status, exc.kind, exc.message)
        except ContextWindowError as exc:  # this question's prompt cannot fit the model's window
            return _error(400, "invalid_request_error", f"messages: {exc}")
        except (EndpointError, ConnectionError) as exc:
            log.warning("generator unavailable: %s", exc)
            return _error(503, "service_unavailable", f"the generator is unavailable: {exc}")
        except Exception as exc:  # this request's own failure, isolated from the rest of its batch
            log.error("answering one request failed", exc_info=exc)
            return _error(500, "server_error", f"internal error answering this request ({type(exc).__name__})")
        finally:
            in_flight -= 1
        return JSONResponse(
            {
                "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": settings.model_name,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": answer.text}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
                "lorarag": trace_of(answer),
            }
        )

    return app


def server_config(
    app: FastAPI, settings: ServeSettings, *, host: str = "127.0.0.1", port: int = 8000, log_level: str = "info"
):  # noqa: ANN201 - uvicorn.Config, imported lazily
    """The uvicorn config serving `app` with the request-head bounds of `settings` (serve/limits.py)."""
    import uvicorn

    from lorarag.serve.limits import bounded_protocol

    if not host.strip():
        raise ConfigError("host is empty: it would bind every interface; name one (127.0.0.1: this machine only)")
    if not 1 <= port <= 65535:
        raise ConfigError(f"port {port} is not a TCP port (1-65535)")
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        http=bounded_protocol(settings.max_header_bytes, settings.max_headers),
    )


def serve(system: AnswerSystem, settings: ServeSettings, *, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Run the server until interrupted (uvicorn; SIGINT/SIGTERM shut it down and close the models)."""
    import uvicorn

    config = server_config(create_app(system, settings), settings, host=host, port=port)
    uvicorn.Server(config).run()
