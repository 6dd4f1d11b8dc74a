"""A small JSON-over-HTTP client for OpenAI-compatible servers (vLLM, swift deploy, Ollama).

Retries with exponential backoff on connection errors, timeouts and 5xx/429 answers; then a
one-line `EndpointError` naming the endpoint. A 200 answer whose body is not the expected
JSON is also an `EndpointError` ("answered garbage"), never a KeyError deep in the caller.
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any

import httpx

log = logging.getLogger(__name__)


class EndpointError(RuntimeError):
    """A server that is down, too slow, or answers something unusable."""


class JSONClient:
    """POST/GET JSON to one base URL with timeouts, retries and backoff."""

    def __init__(self, base_url: str, *, timeout_s: float = 60.0, max_retries: int = 3,
                 backoff_s: float = 0.5, api_key_env: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        key = os.environ.get(api_key_env, "") if api_key_env else ""
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._client = httpx.Client(timeout=timeout_s, headers=headers)

    def close(self) -> None:
        """Close the underlying connection pool."""
        self._client.close()

    def get(self, path: str) -> Any:
        """GET base_url+path and return the parsed JSON."""
        return self._request("GET", path, None)

    def post(self, path: str, payload: dict[str, Any]) -> Any:
        """POST a JSON payload to base_url+path and return the parsed JSON."""
        return self._request("POST", path, payload)

    def _request(self, method: str, path: str, payload: dict[str, Any] | None) -> Any:
        url = self.base_url + path
        last = "no attempt"
        for attempt in range(self.max_retries + 1):
            if attempt:
                delay = self.backoff_s * 2 ** (attempt - 1)
                log.warning("%s %s failed (%s); retry %d/%d in %.1fs", method, url, last,
                            attempt, self.max_retries, delay)
                time.sleep(delay)
            try:
                resp = self._client.request(method, url, json=payload)
            except httpx.TimeoutException:
                last = f"timed out after {self.timeout_s:.0f}s"
                continue
            except httpx.TransportError as exc:
                last = f"cannot connect ({type(exc).__name__})"
                continue
            if resp.status_code == 429 or resp.status_code >= 500:
                last = f"HTTP {resp.status_code}"
                continue
            if resp.status_code >= 400:
                detail = resp.text[:200].replace("\n", " ")
                raise EndpointError(f"{url}: HTTP {resp.status_code}: {detail}")
            try:
                return resp.json()
            except (json.JSONDecodeError, ValueError):
                last = "answered non-JSON"
                continue
        raise EndpointError(f"{url}: {last} after {self.max_retries + 1} attempt(s)")


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
