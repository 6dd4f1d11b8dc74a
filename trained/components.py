"""The components every scenario system shares, built once: generator, RAGSystem, contexts."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from lorarag.core.errors import ConfigError
from lorarag.fallback.config import FallbackConfig
from lorarag.fallback.verdict import label_first_tokens
from lorarag.rag.config import GeneratorConfig, RAGConfig
from lorarag.rag.generators.base import Generator
from lorarag.rag.generators.registry import build_generator
from lorarag.rag.prompt import PromptBuilder
from lorarag.rag.records import Chunk
from lorarag.rag.rerank import Reranker, build_reranker
from lorarag.rag.retrieve import Retriever
from lorarag.rag.system import RAGSystem
from lorarag.trained.config import RAG_SFT, RunConfig
from lorarag.trained.contexts import ScenarioContexts

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


@dataclass(frozen=True)
class Parts:
    """Components built once and injected into every scenario system."""

    generator: Generator
    first_tokens: dict[str, str]  # verdict label -> its first token (fallback/verdict.py)
    fallback: FallbackConfig
    rag: RAGSystem
    contexts: ScenarioContexts
    gate_threshold: float | None = None  # None: the gate is off (or not yet calibrated)
    override_threshold: float | None = None  # a kept memory at or below it overrides sources that disagree
    rag_sft: Path | None = None  # the RAG-SFT adapter's folder, declared to the generator as RAG_SFT
    snapshot: int | None = None  # data.snapshot: the year the LoRA's knowledge is current to (date_rule)


def with_adapter_name(gen_cfg: GeneratorConfig, adapter_path: str, name: str = "lora") -> GeneratorConfig:
    """The generator config with the trained adapter declared under `name`."""
    return gen_cfg.model_copy(update={"adapters": {**gen_cfg.adapters, name: adapter_path}})


def build_parts(
    cfg: RunConfig, retriever: Retriever | None, adapter: Path | None, kb: list[Chunk], rag_sft: Path | None = None
) -> Parts:
    """One generator (base + the trained adapter and the RAG-SFT adapter, those given), the
    RAGSystem and the scenario contexts (`kb`: the clean knowledge base's chunks, for the oracle)."""
    name = cfg.fallback.detector.adapter or "lora"
    gen_cfg = cfg.rag.generator if adapter is None else with_adapter_name(cfg.rag.generator, str(adapter), name)
    if rag_sft is not None:
        gen_cfg = with_adapter_name(gen_cfg, str(rag_sft), RAG_SFT)
    generator = build_generator(gen_cfg)
    reranker = None
    if cfg.rag.reranker is not None:
        reranker = build_reranker(cfg.rag.reranker)
    rag = _rag_system(cfg.rag.model_copy(update={"generator": gen_cfg}), retriever, reranker, generator)
    ctx = ScenarioContexts(retriever, reranker, cfg.rag.retrieval, {c.chunk_id: c for c in kb})
    return Parts(
        generator,
        label_first_tokens(_tokenizer(cfg, generator)),
        cfg.fallback,
        rag,
        ctx,
        rag_sft=rag_sft,
        snapshot=cfg.data.snapshot,
    )


def _rag_system(
    rag_cfg: RAGConfig, retriever: Retriever | None, reranker: Reranker | None, generator: Generator
) -> RAGSystem:
    return RAGSystem(retriever, generator, PromptBuilder(rag_cfg.prompt), rag_cfg.retrieval, reranker=reranker)


def _tokenizer(cfg: RunConfig, generator: Generator) -> PreTrainedTokenizerBase:
    """The generator's own tokenizer; a local one for a server-side generator (the openai kind)."""
    tok = getattr(generator, "tokenizer", None)
    if tok is not None:
        return tok
    from transformers import AutoTokenizer

    where = cfg.fallback.detector.tokenizer
    if where is None:  # RunConfig refuses this for the openai kind; a generator without a tokenizer
        raise ConfigError(
            f"the {cfg.rag.generator.kind} generator has no local tokenizer: set "
            "fallback.detector.tokenizer to a folder holding one"
        )
    try:
        return AutoTokenizer.from_pretrained(where)
    except (OSError, ValueError) as exc:
        first = next((x.strip() for x in str(exc).splitlines() if x.strip()), type(exc).__name__)
        raise ConfigError(f"fallback.detector.tokenizer: cannot load a tokenizer from {where!r} ({first[:160]})") from None
