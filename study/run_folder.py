"""Where one run's artefacts live, and the step banners of a long run."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

Echo = Callable[[str], None]

STEPS = ("data", "index", "scenarios", "train", "calibrate", "evaluate", "report")


@dataclass(frozen=True)
class Paths:
    """Where one run's artefacts live."""

    root: Path

    @property
    def world(self) -> Path:
        """Where `data.world` writes the demo world's knowledge base (scenarios/world_kb.py)."""
        return self.root / "world"

    @property
    def scenarios(self) -> Path:
        return self.root / "scenarios"

    @property
    def eval(self) -> Path:
        return self.root / "eval"

    @property
    def report(self) -> Path:
        return self.root / "report"


class Progress:
    """Step banners with elapsed wall time, so a long run is visible throughout."""

    def __init__(self, echo: Echo, steps: tuple[str, ...] = STEPS) -> None:
        self.echo = echo
        self.steps = steps
        self.t0 = time.perf_counter()

    def step(self, name: str, what: str) -> None:
        """Print `[i/7] name what (t=…s)`."""
        i = self.steps.index(name) + 1
        self.echo(f"[{i}/{len(self.steps)}] {name:<9} {what}   (t={time.perf_counter() - self.t0:.0f}s)")
