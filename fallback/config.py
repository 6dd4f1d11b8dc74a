"""Configs of the fallback system: the scored verdict pass, the self-knowledge gate, the policy."""

from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from lorarag.core.config import Strict


class PolicyConfig(Strict):
    """Thresholds of the routing policy (fallback/policy.py)."""

    flag_threshold: float = 0.5  # minimum 1 − P(supported) to act on conflicting/outdated
    on_invalid: Literal["context", "abstain"] = "abstain"
    unknown_conflict: Literal["context", "abstain"] = "context"  # doubt but no memory


class GateConfig(Strict):
    """The self-knowledge gate (fallback/gate.py): does the model's memory count?

    It reads the mean negative log-likelihood (nats/token) of the adapter's own greedy closed-book
    answer (higher = more likely never learned); above the threshold the memory counts as unknown.
    """

    enabled: bool = True
    threshold: float | None = None  # None: read gate.json next to the adapter (calibrated)
    rule: Literal["youden", "unknown_recall", "logistic"] = "logistic"  # see fallback/gate.calibrate
    target: float = 0.95  # unknown_recall rule: share of never-learned dev items to reject
    # A gate whose dev AUROC is below this carries no self-knowledge: it would only throw away real
    # memories, so it stays off.
    min_auroc: float = 0.6


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
