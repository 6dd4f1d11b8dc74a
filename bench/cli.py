"""`lorarag` subcommands of the bench package (heavy imports stay inside the commands)."""

from __future__ import annotations

import typer


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    """Add this package's commands to the main app and to `lorarag bench`."""
