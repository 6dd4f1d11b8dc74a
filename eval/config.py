"""`lorarag eval` config: which scenarios, which system, where results go, optional judge.

The system is a `kind:` plus that kind's own keys (the `system:` mapping is handed unchanged to
the study's factory, `study.eval_system.build_eval_system`, which validates it with its own Strict
model); `eval/` itself only runs a system it is given, so it works without the study above it.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from lorarag.core.config import Strict


class JudgeConfig(Strict):
    """LLM-as-judge for faithfulness and answer relevance (any OpenAI-compatible endpoint)."""

    enabled: bool = Field(False, description="off by default: judging is a separate, slower phase")
    base_url: str = Field("http://127.0.0.1:8000/v1", description="the judge's OpenAI-compatible endpoint")
    model: str = Field("judge", description="served model name; recorded with every verdict")
    api_key_env: str | None = Field(None, description="name of the env var holding the key, never the key")
    max_tokens: int = Field(512, description="tokens the judge may generate per verdict")
    timeout_s: float = Field(120.0, description="seconds per request")
    max_retries: int = Field(3, description="retries of a failed request")
    cache_dir: str = Field("runs/judge-cache", description="disk cache keyed by hash(model, prompt)")


class EvalConfig(Strict):
    """One system over one scenario set."""

    scenarios: str = Field(description="scenario JSONL (scenarios/records.py format)")
    system: dict[str, Any] = Field(description="{kind: ..., name: ..., <the kind's own keys>}")
    components: str | None = Field(None, description="run config the system factory builds models/index from")
    out_dir: str = Field(description="run directory: results.jsonl (resumable), the config stamp, reports")
    batch_size: int = Field(16, description="scenarios per system call")
    limit: int | None = Field(None, description="evaluate only the first N scenarios (smoke runs)")
    closed_book_run: str | None = Field(None, description="run dir or results.jsonl of the same model, closed-book")
    judge: JudgeConfig = Field(
        JudgeConfig(), description=("LLM-as-judge for faithfulness and answer relevance (off by default)")
    )
    bootstrap_resamples: int = Field(2000, description=("paired-bootstrap resamples of the confidence intervals (>= 1000)"))
    seed: int = Field(0, description="seed of the bootstrap")

    @field_validator("system")
    @classmethod
    def _kind(cls, v: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(v.get("kind"), str) or not v["kind"]:
            raise ValueError("system needs a `kind:` (e.g. base_rag, lora_rag, closed_book)")
        return v

    @model_validator(mode="after")
    def _check(self) -> EvalConfig:
        if self.batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        if self.limit is not None and self.limit < 1:
            raise ValueError("limit must be >= 1")
        if self.bootstrap_resamples < 1000:
            raise ValueError("bootstrap_resamples must be >= 1000")
        return self
