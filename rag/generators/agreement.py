"""Greedy agreement across generator backends (`lorarag check-backends CONFIG`).

The same model, adapter and prompts are run through each configured generator (the first one is
the reference), greedy, one backend at a time (each is closed before the next is built, so only one
model is in memory). A LoRA that answers differently under PyTorch/peft, vLLM or a server shows up
as agreement below 1.0 for that adapter.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import Field, model_validator

from lorarag.core.config import Strict
from lorarag.core.errors import ConfigError
from lorarag.rag.config import GeneratorConfig
from lorarag.rag.generators.base import Message, same_answer
from lorarag.rag.generators.registry import build_generator


class BackendsCheckConfig(Strict):
    """Generators to compare (first = reference), the questions, and the adapters to check."""

    generators: dict[str, GeneratorConfig] = Field(
        description=("name -> generator config; the first is the reference the others are compared with")
    )
    questions: list[str] = Field([], description="questions asked greedily of every backend")
    questions_file: str | None = Field(None, description='one question per line (.txt) or {"question": ...} (.jsonl)')
    adapters: list[str] = Field([], description=("checked besides the base model; each must be declared by every generator"))
    system: str = Field("Answer the question briefly.", description="system prompt of every question")
    max_new_tokens: int = Field(32, description="tokens generated per answer")

    @model_validator(mode="after")
    def _check(self) -> BackendsCheckConfig:
        if len(self.generators) < 2:
            raise ValueError("generators: need at least two backends to compare")
        if not self.questions and not self.questions_file:
            raise ValueError("give `questions` or `questions_file`")
        for name, g in self.generators.items():
            missing = [a for a in self.adapters if a not in g.adapters]
            if missing:
                raise ValueError(f"generators.{name}: adapters {missing} not declared")
            if g.temperature != 0:
                raise ValueError(f"generators.{name}: temperature must be 0 (greedy) to compare")
        return self


@dataclass(frozen=True)
class AgreementRow:
    """Agreement of one backend with the reference for one adapter (None = base)."""

    backend: str
    adapter: str | None
    agree: int
    total: int
    examples: tuple[tuple[str, str, str], ...] = ()  # (question, reference text, this text)

    @property
    def rate(self) -> float:
        """Fraction of questions with the same greedy answer as the reference."""
        return self.agree / self.total if self.total else 0.0


def load_questions(cfg: BackendsCheckConfig) -> list[str]:
    """The configured questions plus those of `questions_file`."""
    import json

    qs = list(cfg.questions)
    if cfg.questions_file:
        path = Path(cfg.questions_file)
        try:
            lines = [x for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
        except OSError as exc:
            raise ConfigError(f"questions_file {path}: cannot read ({exc.strerror})") from None
        if path.suffix == ".jsonl":
            try:
                qs += [str(json.loads(x)["question"]) for x in lines]
            except (json.JSONDecodeError, KeyError, TypeError):
                raise ConfigError(f'questions_file {path}: each line must be {{"question": ...}}') from None
        else:
            qs += lines
    return qs


def check_backends(cfg: BackendsCheckConfig) -> tuple[list[AgreementRow], float]:
    """Rows per (backend, adapter) and the base-vs-adapter difference rate on the reference."""

    questions = load_questions(cfg)
    convs = [[Message("system", cfg.system), Message("user", q)] for q in questions]
    adapters: list[str | None] = [None, *cfg.adapters]
    outputs = {}
    for name, gcfg in cfg.generators.items():
        gen = build_generator(gcfg)
        try:
            for a in adapters:
                outputs[name, a] = gen.generate(convs, adapter=a, max_new_tokens=cfg.max_new_tokens)
        finally:
            gen.close()
    ref, *others = cfg.generators
    rows = []
    for name in others:
        for a in adapters:
            pairs = list(zip(questions, outputs[ref, a], outputs[name, a]))
            bad = tuple((q, r.text, o.text) for q, r, o in pairs if not same_answer(r, o))
            rows.append(AgreementRow(name, a, len(pairs) - len(bad), len(pairs), bad[:3]))
    differs = [not same_answer(b, t) for a in cfg.adapters for b, t in zip(outputs[ref, None], outputs[ref, a])]
    return rows, (sum(differs) / len(differs) if differs else 0.0)
