"""`lorarag serve --run RUN_DIR` (the run's trained system behind an OpenAI-compatible API), and the
benchmarks of what runs beyond one process: `bench serve`, `bench engine`, `bench scale`."""

from __future__ import annotations

from pathlib import Path

import typer


def check_port(port: int, option: str = "--port") -> None:
    """A TCP port a server can listen on (1-65535), refused before anything loads: with a larger one
    the server logged the number given while listening elsewhere, and 0 picks a port nobody is told."""
    from lorarag.core.errors import UserError

    if not 1 <= port <= 65535:
        raise UserError(f"{option}: {port} is not a TCP port (1-65535)")


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    """Add `serve` and `bench serve`."""

    @app.command("serve")
    def serve_cmd(run: Path = typer.Option(..., "--run", help="a `lorarag run` dir"),
                  host: str = typer.Option("127.0.0.1", help="bind address (loopback unless you mean it)"),
                  port: int = typer.Option(8000, help="TCP port"),
                  name: str = typer.Option("lorarag", help="the model name clients send"),
                  max_batch: int = typer.Option(32, min=1, help="questions per generator call"),
                  max_wait_ms: float = typer.Option(10.0, min=0.0, help="wait for a batch to fill (ms)"),
                  max_concurrency: int = typer.Option(128, min=1, help="requests in flight before 429"),
                  max_body_bytes: int = typer.Option(65536, min=256, help="largest request body (bytes)")) -> None:
        """Serve the run's AdvancedRAGSystem at /v1/chat/completions, /v1/models and /health."""
        check_port(port)
        from lorarag.serve.app import ServeSettings, serve
        from lorarag.study.trained import load_run

        system = load_run(run)
        serve(system, ServeSettings(name, max_batch, max_wait_ms, max_concurrency, max_body_bytes),
              host=host, port=port)

    @bench_app.command("serve")
    def bench_serve_cmd(run: Path = typer.Option(None, "--run", help="a `lorarag run` dir (default: build "
                                                  "a small one on SmolLM2 with an untrained adapter)"),
                        requests: int = typer.Option(64, min=8, help="questions per measurement"),
                        out: Path = typer.Option(Path("runs/bench/serve.json"), help="results JSON")) -> None:
        """Throughput and p50/p95 latency at 1, 8 and 32 concurrent clients against one request at a time."""
        from lorarag.bench.serve import run as run_bench

        run_bench(run, requests, out, echo=typer.echo)

    @bench_app.command("engine")
    def bench_engine_cmd(questions: int = typer.Option(16, min=2, help="distinct questions, one at a time"),
                         engines: str = typer.Option("", help="comma-separated names from bench/engine.py "
                                                     "ENGINES, the first the reference (default: all)"),
                         out: Path = typer.Option(Path("runs/bench/engine.json"), help="results JSON")) -> None:
        """The fast generator settings against transformers fp32: p50/p95 per answer and agreement."""
        from lorarag.bench.engine import run as run_engine

        run_engine(questions, out, [n for n in engines.split(",") if n], echo=typer.echo)

    @bench_app.command("scale")
    def bench_scale_cmd(sizes: str = typer.Option("100000,1000000", help="index sizes (vectors), comma-separated"),
                        dim: int = typer.Option(128, min=8, help="vector dimension"),
                        shards: int = typer.Option(2, min=1, help="shard processes for the eval part (1: skip it)"),
                        out: Path = typer.Option(Path("runs/bench/scale.json"), help="results JSON")) -> None:
        """Milvus Lite vs FAISS (build, queries/s, recall@10) and sharded vs one-process evaluation."""
        from lorarag.bench.scale import run as run_scale
        from lorarag.core.errors import UserError

        try:
            values = [int(x) for x in sizes.split(",") if x.strip()]
        except ValueError:
            raise UserError(f"--sizes takes comma-separated integers, got {sizes!r}") from None
        if not values or min(values) < 1000:
            raise UserError("--sizes: at least one size, each >= 1000")
        run_scale(values, dim, shards, out, echo=typer.echo)
