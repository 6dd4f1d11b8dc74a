"""`lorarag serve --run RUN_DIR`: the run's trained system behind an OpenAI-compatible API."""

from __future__ import annotations

from pathlib import Path

import typer


def check_port(port: int, option: str = "--port") -> None:
    """A TCP port a server can listen on (1-65535), refused before anything loads: with a larger one
    the server logged the number given while listening elsewhere, and 0 picks a port nobody is told."""
    from lorarag.core.errors import UserError

    if not 1 <= port <= 65535:
        raise UserError(f"{option}: {port} is not a TCP port (1-65535)")


def check_host(host: str) -> str | None:
    """Refuse an empty `--host` (an unset variable: it binds every interface, IPv4 and IPv6); the
    warning line for an address other machines can reach, None for loopback."""
    import ipaddress

    from lorarag.core.errors import UserError

    if not host.strip():
        raise UserError(
            "--host: empty (an unset variable?) would listen on every interface; give an "
            "address: 127.0.0.1 for this machine only, 0.0.0.0 to be reachable from others"
        )
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to any interface
        loopback = False
    if loopback:
        return None
    return f"warning: --host {host}: the server is reachable from other machines, and it asks no one for credentials"


def register(app: typer.Typer) -> None:
    """Add `serve`."""

    @app.command("serve")
    def serve_cmd(
        run: Path = typer.Option(..., "--run", help="a `lorarag run` dir"),
        host: str = typer.Option("127.0.0.1", help="bind address (loopback unless you mean it)"),
        port: int = typer.Option(8000, help="TCP port"),
        name: str = typer.Option("lorarag", help="the model name clients send"),
        max_batch: int = typer.Option(32, min=1, help="questions per generator call"),
        max_wait_ms: float = typer.Option(10.0, min=0.0, help="wait for a batch to fill (ms)"),
        max_concurrency: int = typer.Option(128, min=1, help="requests in flight before 429"),
        max_body_bytes: int = typer.Option(65536, min=256, help="largest request body (bytes)"),
    ) -> None:
        """Serve the run's AdvancedRAGSystem at /v1/chat/completions, /v1/models and /health."""
        check_port(port)
        warning = check_host(host)
        if warning:
            typer.echo(warning, err=True)
        from lorarag.serve.app import ServeSettings, serve
        from lorarag.trained.load import load_run

        system = load_run(run)
        serve(system, ServeSettings(name, max_batch, max_wait_ms, max_concurrency, max_body_bytes), host=host, port=port)
