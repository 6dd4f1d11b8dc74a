"""`lorarag eval` config: which scenarios, which system, where results go, optional judge.

The system is a `kind:` plus that kind's own keys (the `system:` mapping is handed unchanged to
the study's factory, `study.systems.build_eval_system`, which validates it with its own Strict
model); `eval/` itself only runs a system it is given, so it works without the study above it.
"""

from __future__ import annotations

from typing import Any

from pydantic import field_validator, model_validator

from lorarag.core.config import Strict


class JudgeConfig(Strict):
    """LLM-as-judge for faithfulness and answer relevance (any OpenAI-compatible endpoint)."""

    enabled: bool = False  # off by default: judging is a separate, slower phase
    base_url: str = "http://127.0.0.1:8000/v1"
    model: str = "judge"  # served model name; recorded with every verdict
    api_key_env: str | None = None  # name of the env var holding the key, never the key
    max_tokens: int = 512
    timeout_s: float = 120.0
    max_retries: int = 3
    cache_dir: str = "runs/judge-cache"  # disk cache keyed by hash(model, prompt)


class EvalConfig(Strict):
    """One system over one scenario set."""

    scenarios: str  # scenario JSONL (scenarios/records.py format)
    system: dict[str, Any]  # {kind: ..., name: ..., <the kind's own keys>}
    components: str | None = None  # run config the system factory builds models/index from
    out_dir: str
    batch_size: int = 16
    limit: int | None = None  # evaluate only the first N scenarios (smoke runs)
    closed_book_run: str | None = None  # run dir or results.jsonl of the same model, closed-book
    judge: JudgeConfig = JudgeConfig()
    bootstrap_resamples: int = 2000
    seed: int = 0

    @field_validator("system")
    @classmethod
    def _kind(cls, v: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(v.get("kind"), str) or not v["kind"]:
            raise ValueError("system needs a `kind:` (e.g. base_rag, lora_rag, closed_book)")
        return v

    @model_validator(mode="after")
    def _check(self) -> "EvalConfig":
        if self.batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        if self.limit is not None and self.limit < 1:
            raise ValueError("limit must be >= 1")
        if self.bootstrap_resamples < 1000:
            raise ValueError("bootstrap_resamples must be >= 1000")
        return self

