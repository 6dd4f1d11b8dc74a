"""Configs of the fallback system and of the end-to-end run (`configs/run/*.yaml`).

`RunConfig` composes the other packages' sub-configs (rag, train, eval) by reference to their
own models; each stage receives only its own section.
"""

from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from rag.config import Strict


class PolicyConfig(Strict):
    """Thresholds of the routing policy (fallback/policy.py)."""

    flag_threshold: float = 0.5  # minimum 1 − P(supported) to act on conflicting/outdated
    on_invalid: Literal["context", "abstain"] = "abstain"
    unknown_conflict: Literal["context", "abstain"] = "context"  # doubt but no memory


class GateConfig(Strict):
    """The self-knowledge gate on P(" unknown") (fallback/gate.py)."""

    enabled: bool = True
    threshold: float | None = None  # None: read gate.json next to the adapter (calibrated)
    rule: Literal["youden", "unknown_recall"] = "youden"
    target: float = 0.95  # unknown_recall rule: share of never-learned dev items to reject


class DetectorConfig(Strict):
    """The scored verdict pass."""

    adapter: str | None = "lora"  # adapter name in the generator's `adapters` (None: base model)
    top_logprobs: int = 20  # alternatives read at each position (labels must be among them)
    max_new_tokens: int = 48
    tokenizer: str | None = None  # for openai kind: a local tokenizer path (default: model)

    @model_validator(mode="after")
    def _check(self) -> "DetectorConfig":
        if self.top_logprobs < 5:
            raise ValueError("top_logprobs must be >= 5 (the five verdict labels)")
        return self


class FallbackConfig(Strict):
    """AdvancedRAGSystem: the scored pass, the gate and the policy."""

    detector: DetectorConfig = DetectorConfig()
    gate: GateConfig = GateConfig()
    policy: PolicyConfig = PolicyConfig()
