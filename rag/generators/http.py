"""A small JSON-over-HTTP client for OpenAI-compatible servers (vLLM, swift deploy, Ollama).

Retries with exponential backoff on connection errors, timeouts and 5xx/429 answers; then a
one-line `EndpointError` naming the endpoint (a `UserError`: the CLI prints it as one line). A 200
answer whose body is not the expected JSON is also an `EndpointError` ("answered garbage"), never
a KeyError deep in the caller.

`timeout_s` bounds each request as a whole, not each read: a server that trickles its answer a
byte at a time still ends the request at the deadline. Every socket read of the attempt (status
line, headers, body) gets only the time left until the deadline, and the body is streamed with
the deadline checked between chunks. Retries are separate requests, each with its own deadline.
Once one request of a client has given up on a server that cannot be reached, the requests still
in flight give up at their next retry instead of each retrying (and warning) on their own. That
failure is `EndpointDown` (an `EndpointError`): the server is down for every request, not just this one.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from typing import Any

import httpx

from lorarag.core.errors import UserError

log = logging.getLogger(__name__)


class EndpointError(UserError, RuntimeError):
    """A server that is down, too slow, or answers something unusable."""


class EndpointDown(EndpointError):
    """A server that cannot be reached or never answers in time: every request to it fails alike
    (a caller serving many requests hands this one failure to all of them instead of retrying each)."""


class _Deadline(Exception):
    """The request's total time budget ran out."""


_local = threading.local()  # the deadline of the request this thread is making


def _capped_read(read):
    """A network stream's `read` whose timeout never goes past the current request's deadline."""
    import httpcore

    def capped(max_bytes: int, timeout: float | None = None) -> bytes:
        deadline = getattr(_local, "deadline", None)
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise httpcore.ReadTimeout("request deadline passed")
            timeout = left if timeout is None else min(timeout, left)
        return read(max_bytes, timeout)

    return capped


def _trace(event: str, info: dict) -> None:
    """httpcore trace hook: every new connection's reads are capped by the request deadline."""
    if event in ("connection.connect_tcp.complete", "connection.start_tls.complete"):
        stream = info.get("return_value")
        if stream is not None and not getattr(stream, "_lorarag_capped", False):
            stream.read = _capped_read(stream.read)
            stream._lorarag_capped = True


class JSONClient:
    """POST/GET JSON to one base URL with a total deadline per request, retries and backoff."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = 60.0,
        max_retries: int = 3,
        backoff_s: float = 0.5,
        api_key_env: str | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        key = os.environ.get(api_key_env, "") if api_key_env else ""
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._client = httpx.Client(timeout=timeout_s, headers=headers)
        self._lock = threading.Lock()
        self._down: str | None = None  # why the server was given up on (cleared by a success)
        self._retrying = 0  # requests of this client now between attempts

    def close(self) -> None:
        """Close the underlying connection pool."""
        self._client.close()

    def get(self, path: str) -> Any:
        """GET base_url+path and return the parsed JSON."""
        return self._request("GET", path, None)

    def post(self, path: str, payload: dict[str, Any]) -> Any:
        """POST a JSON payload to base_url+path and return the parsed JSON."""
        return self._request("POST", path, payload)

    def _attempt(self, method: str, url: str, payload: dict[str, Any] | None) -> tuple[int, bytes]:
        """One request within `timeout_s` overall: (status, body); _Deadline when it runs out."""
        deadline = time.monotonic() + self.timeout_s
        _local.deadline = deadline
        try:
            with self._client.stream(method, url, json=payload, extensions={"trace": _trace}) as resp:
                chunks = []
                for chunk in resp.iter_bytes():
                    chunks.append(chunk)
                    if time.monotonic() > deadline:
                        raise _Deadline
                return resp.status_code, b"".join(chunks)
        finally:
            _local.deadline = None

    def _request(self, method: str, path: str, payload: dict[str, Any] | None) -> Any:
        url = self.base_url + path
        last = "no attempt"
        for attempt in range(self.max_retries + 1):
            if attempt:
                if self._down is not None:  # another request already gave up on this server
                    raise EndpointDown(f"{url}: {self._down}")
                delay = self.backoff_s * 2 ** (attempt - 1)
                with self._lock:
                    first = self._retrying == 0
                    self._retrying += 1
                log.log(
                    logging.WARNING if first else logging.DEBUG,
                    "%s %s failed (%s); retry %d/%d in %.1fs",
                    method,
                    url,
                    last,
                    attempt,
                    self.max_retries,
                    delay,
                )
                time.sleep(delay)
                with self._lock:
                    self._retrying -= 1
            try:
                status, body = self._attempt(method, url, payload)
            except (httpx.TimeoutException, _Deadline):
                last = f"timed out after {self.timeout_s:g}s"
                continue
            except httpx.TransportError as exc:
                last = f"cannot connect ({type(exc).__name__})"
                continue
            if status == 429 or status >= 500:
                last = f"HTTP {status}"
                continue
            if status >= 400:
                detail = body[:200].decode("utf-8", "replace").replace("\n", " ")
                raise EndpointError(f"{url}: HTTP {status}: {detail}")
            try:
                data = json.loads(body)
            except (json.JSONDecodeError, UnicodeDecodeError):
                last = "answered non-JSON"
                continue
            self._down = None
            return data
        why = f"{last} after {self.max_retries + 1} attempt(s)"
        if last.startswith(("cannot connect", "timed out")):
            self._down = why
            raise EndpointDown(f"{url}: {why}")
        raise EndpointError(f"{url}: {why}")


def field(obj: Any, *path: str | int, endpoint: str) -> Any:
    """Walk `obj` by keys/indices; EndpointError naming the endpoint if the shape is wrong."""
    cur = obj
    for p in path:
        try:
            cur = cur[p]
        except (KeyError, IndexError, TypeError):
            where = "".join(f"[{p!r}]" for p in path)
            raise EndpointError(f"{endpoint}: unexpected answer, missing {where}") from None
    return cur
