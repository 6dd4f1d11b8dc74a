"""Config of the demo world: fictional organisations with versioned facts (scenarios/world.py)."""

from __future__ import annotations

from pydantic import Field, model_validator

from lorarag.core.config import Strict

# What a fact of the demo world can be about; the world's templates cover exactly these.
ATTRIBUTES = ("ceo", "headquarters", "founded", "net_profit", "product_version")


class WorldConfig(Strict):
    """The seeded demo world: fictional organisations with versioned facts."""

    seed: int = 0
    n_orgs: int = 40
    zh_fraction: float = 0.2  # share of organisations written in Chinese
    # Organisation groups (fractions of n_orgs, the rest is `unknown`): `known` facts are taught
    # closed-book; `context_only` facts appear in training only with a source to copy;
    # `unknown` facts never appear in training (half of them form the dev split for thresholds).
    known_fraction: float = 0.5
    context_only_fraction: float = 0.2
    # Draw the groups within each language (same fractions), so never-learned facts, the gate's dev
    # split and over-fallback include Chinese ones. Off: one draw over all organisations, as the
    # measured demo world (seed 0: its 6 Chinese organisations are all known or context-only).
    stratify_languages: bool = False
    attributes: list[str] = Field(default_factory=lambda: list(ATTRIBUTES))
    undated_outdated_fraction: float = 0.5  # outdated contexts that carry no date at all

    @model_validator(mode="after")
    def _check(self) -> "WorldConfig":
        if self.n_orgs < 4:
            raise ValueError("n_orgs must be at least 4")
        if self.known_fraction + self.context_only_fraction >= 1.0:
            raise ValueError("known_fraction + context_only_fraction must leave room for unknown orgs")
        bad = [a for a in self.attributes if a not in ATTRIBUTES]
        if bad:
            raise ValueError(f"unknown attribute(s) {bad} (known: {', '.join(ATTRIBUTES)})")
        return self
