"""Scenario systems for evaluation: each a config `kind:` in a small registry.

Every system has a `name` and `answer_scenarios(items: list[Scenario]) -> list[Answer]`, the
interface of `eval.runner.run_eval`. The context a system sees per scenario is either
- `retrieved`: retrieve from the clean KB index, then `poison` the list into the scenario's world
  (the perturbed copy takes the gold chunk's rank, removed chunks drop out), or
- `presented`: the scenario's presented chunks as they are.

Kinds: `lora_rag` (AdvancedRAGSystem), `base_rag` (plain grounded RAG, no detection),
`prompted_detection` (the base model asked for the same verdict format, no LoRA), `closed_book`
(base or LoRA, no retrieval) and `oracle` (the gold chunk only, answered by the base RAG prompt).
Components (generator, retrieval, tokenizer) are built once by `Components` and injected.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any, Callable, Sequence

from fallback.config import FallbackConfig, SystemConfig
from fallback.format import SYSTEM_CLOSED_BOOK, SYSTEM_RAG, closed_book_user_turn
from fallback.scenarios import Scenario, poison, presented_as_retrieved
from fallback.system import AdvancedRAGSystem, Context, Detector
from rag.records import Answer, Chunk, Retrieved, Trace

log = logging.getLogger(__name__)

# The prompted-detection baseline gets the format spelled out (the LoRA learned it from data).
PROMPTED_SYSTEM = (SYSTEM_RAG + " Reply in exactly one line of this form: memory: <what you remember, "
                   "or unknown> | source: <what the sources say, or none> | verdict: <supported, "
                   "conflicting, outdated, irrelevant or insufficient> | answer: <your final answer>")


class ScenarioContexts:
    """Turns scenarios into (retrieved, reranked) contexts: poisoned retrieval or presented chunks.

    Retrieved mode: top-N from the clean index, `poison`ed into the scenario's world, then reranked
    to top-k (the reranker sees the perturbed chunk, as it would in that world); without a
    reranker the final sources are the poisoned top-k, so a removed chunk is replaced by the next
    candidate rather than leaving a hole.
    """

    def __init__(self, retriever: Any, reranker: Any, retrieval_cfg: Any, kb: dict[str, Chunk]) -> None:
        self.retriever = retriever
        self.reranker = reranker
        self.cfg = retrieval_cfg
        self.kb = kb

    def contexts(self, items: Sequence[Scenario], mode: str) -> list[Context]:
        """The context of each scenario in `mode` (`retrieved` or `presented`)."""
        if mode == "presented":
            return [((), tuple(presented_as_retrieved(s))) for s in items]
        if self.retriever is None:
            raise ValueError("retrieved-context mode needs a retriever (rag section of the run config)")
        questions = [s.question for s in items]
        cands = [poison(r, s) for s, r in zip(items, self.retriever.retrieve(questions, self.cfg.top_n))]
        if self.reranker is not None:
            from rag.rerank import rerank

            final = rerank(self.reranker, questions, cands, self.cfg.top_k, self.cfg.min_score)
        else:
            final = [c[: self.cfg.top_k] for c in cands]
        return [(tuple(c), tuple(f)) for c, f in zip(cands, final)]

    def oracle(self, items: Sequence[Scenario]) -> list[Context]:
        """The gold (current, true) chunk(s) only, from the clean KB."""
        out = []
        for s in items:
            gold = [self.kb[c] for c in s.relevant_ids if c in self.kb]
            out.append(((), tuple(Retrieved(c, 1.0, i, "oracle") for i, c in enumerate(gold, 1))))
        return out


class LoRARAG:
    """AdvancedRAGSystem on scenario contexts."""

    def __init__(self, name: str, system: AdvancedRAGSystem, ctx: ScenarioContexts, mode: str) -> None:
        self.name, self.system, self.ctx, self.mode = name, system, ctx, mode

    def answer_scenarios(self, items: list[Scenario]) -> list[Answer]:
        """Judge and route each scenario's context."""
        return self.system.answer_with_context([s.question for s in items], self.ctx.contexts(items, self.mode))


class BaseRAG:
    """The plain grounded RAG prompt (no detection) on scenario or oracle contexts."""

    def __init__(self, name: str, rag: Any, ctx: ScenarioContexts, mode: str, max_new_tokens: int) -> None:
        self.name, self.rag, self.ctx, self.mode, self.max_new = name, rag, ctx, mode, max_new_tokens

    def answer_scenarios(self, items: list[Scenario]) -> list[Answer]:
        """Answer from the context, as the base RAGSystem does."""
        ctxs = self.ctx.oracle(items) if self.mode == "oracle" else self.ctx.contexts(items, self.mode)
        answers = self.rag.answer_with_context([s.question for s in items], [list(c[1]) for c in ctxs],
                                               candidates=[list(c[0] or c[1]) for c in ctxs],
                                               max_new_tokens=self.max_new)
        # Record the sources actually given as the final list (RAGSystem leaves `reranked` empty
        # without a reranker, which would make the top-N candidates look like the model's input).
        return [replace(a, trace=replace(a.trace, reranked=tuple(c[1]))) if a.trace else a
                for a, c in zip(answers, ctxs)]


class ClosedBook:
    """The model alone: no sources. Scenarios share questions; the generator's memo (rag/memo.py)
    answers a question asked again without the model."""

    def __init__(self, name: str, generator: Any, adapter: str | None, max_new_tokens: int) -> None:
        self.name, self.generator, self.adapter, self.max_new = name, generator, adapter, max_new_tokens

    def answer_scenarios(self, items: list[Scenario]) -> list[Answer]:
        """One closed-book generation per scenario (a repeated question is a memo hit)."""
        from rag.generate import Message

        convs = [[Message("system", SYSTEM_CLOSED_BOOK), Message("user", closed_book_user_turn(s.question))]
                 for s in items]
        # top_logprobs=1 as `fallback.system.closed_book` asks: the LoRA-RAG memory pass is then
        # the same request, answered from the memo
        gens = self.generator.generate(convs, adapter=self.adapter, max_new_tokens=self.max_new, top_logprobs=1)
        return [Answer(question=s.question, text=g.text.strip(),
                       trace=Trace(question=s.question, prompt=g.prompt, raw_output=g.text))
                for s, g in zip(items, gens)]


def build_system(cfg: SystemConfig, parts: Any) -> Any:
    """The scenario system for `cfg.kind`, from shared, already-built components (`parts`)."""
    return SYSTEMS[cfg.kind](cfg, parts)


def _lora_rag(cfg: SystemConfig, parts: Any) -> LoRARAG:
    # A memory given by the closed-book pass can only be gated on that pass's own confidence.
    gated = cfg.memory == "reply" or parts.fallback.gate.signal == "closed_book_nll"
    gate = parts.gate_threshold if gated else None
    det = Detector(parts.generator, parts.first_tokens, parts.fallback, gate, memory=cfg.memory,
                   lenient_threshold=parts.lenient_threshold if gated else None)
    return LoRARAG(cfg.name, AdvancedRAGSystem(parts.rag, det, parts.fallback), parts.contexts, cfg.context)


def _prompted(cfg: SystemConfig, parts: Any) -> LoRARAG:
    fb: FallbackConfig = parts.fallback
    # Same format and policy, base model, no gate (there is no calibrated threshold for the base).
    fb = fb.model_copy(update={"detector": fb.detector.model_copy(update={"adapter": None}),
                               "gate": fb.gate.model_copy(update={"enabled": False})})
    det = Detector(parts.generator, parts.first_tokens, fb, None, system_prompt=PROMPTED_SYSTEM)
    return LoRARAG(cfg.name, AdvancedRAGSystem(parts.rag, det, fb), parts.contexts, cfg.context)


SYSTEMS: dict[str, Callable[[SystemConfig, Any], Any]] = {
    "lora_rag": _lora_rag,
    "prompted_detection": _prompted,
    "base_rag": lambda cfg, p: BaseRAG(cfg.name, p.rag, p.contexts, cfg.context, cfg.max_new_tokens),
    "oracle": lambda cfg, p: BaseRAG(cfg.name, p.rag, p.contexts, "oracle", cfg.max_new_tokens),
    "closed_book": lambda cfg, p: ClosedBook(cfg.name, p.generator, cfg.adapter, cfg.max_new_tokens),
}


def with_adapter_name(gen_cfg: Any, adapter_path: str, name: str = "lora") -> Any:
    """The generator config with the trained adapter declared under `name`."""
    return gen_cfg.model_copy(update={"adapters": {**gen_cfg.adapters, name: adapter_path}})




def build_eval_system(cfg: Any) -> Any:
    """The system for `lorarag eval`: models, index and adapter from the run config in `components`.

    Reuses what `lorarag run` built (world, index, trained adapter, saved gate calibration); the
    gate is used only if its saved dev calibration passed `gate.min_auroc`, as in the run itself.
    """
    from pathlib import Path

    from fallback import calibration, pipeline
    from fallback.config import RunConfig
    from fallback.gate import GATE_FILE, load_gate
    from rag.config import ConfigError, load_config, validate_data

    if cfg.components is None:
        raise ConfigError("eval config: `components:` must name a run config (configs/run/*.yaml) "
                          f"to build the {cfg.system['kind']} system from")
    run_cfg = load_config(cfg.components, RunConfig)
    sc = validate_data(cfg.system, SystemConfig, "eval config: system")
    adapter = pipeline.find_adapter(run_cfg)
    if sc.uses_adapter and adapter is None:
        raise ConfigError(f"system {sc.name!r} needs the trained adapter of run "
                          f"'{run_cfg.train.run_name}': run `lorarag run {cfg.components}` first")
    paths = pipeline.Paths(Path(run_cfg.runs_dir) / run_cfg.name)
    world = pipeline.make_world(run_cfg, paths)
    retriever = pipeline.make_index(run_cfg, world)
    parts = calibration.build_parts(run_cfg, retriever, adapter, world)
    gate = run_cfg.fallback.gate
    if gate.threshold is not None:
        parts.gate_threshold, parts.lenient_threshold = calibration.fixed_thresholds(gate)
    elif adapter is not None and (adapter / GATE_FILE).is_file():
        cal = load_gate(adapter)
        if gate.enabled and (stale := calibration.gate_mismatch(cal, gate, run_cfg.rag.generator)):
            raise ConfigError(f"{adapter / GATE_FILE}: calibrated with {'; '.join(stale)}: "
                              f"run `lorarag calibrate {cfg.components}` first")
        parts.gate_threshold, parts.lenient_threshold = calibration.thresholds_in_use(cal, gate, log.info)
    return build_system(sc, parts)
