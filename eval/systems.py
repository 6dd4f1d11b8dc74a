"""Scenario systems for evaluation: each a config `kind:` in a small registry.

Every system is an `eval.runner.ScenarioSystem` (a `name` and `answer_scenarios(items:
list[Scenario]) -> list[Answer]`), what `eval.runner.run_eval` runs. The context a system sees per
scenario comes from trained/contexts.py: `retrieved` (the clean KB, then poisoned into the
scenario's world) or `presented` (the scenario's own chunks).

Kinds: `lora_rag` (AdvancedRAGSystem), `base_rag` (plain grounded RAG, no detection),
`prompted_detection` (the same verdict format asked for by prompt), `astute_rag` (the model's own
closed-book answer consolidated with the sources, prompt only), `closed_book` (no retrieval),
`memory_or_context` (the LoRA's closed-book answer where the gate keeps it, else base RAG from the
context: no verdict), `date_rule` (on a dated KB: sources dated after `data.snapshot` read by base
RAG, those dated by it dropped, memory_or_context over the rest: no verdict), `rag_sft` (base
RAG's prompt answered by the RAG-SFT adapter: the same facts taught, every source answered from;
study/training.py) and `oracle` (the gold chunk only, answered by the base RAG prompt).
`prompted_detection`, `astute_rag` and `closed_book` run on the base model, or with `adapter: lora`
on the trained adapter: a baseline that knows what the LoRA knows.
Components (generator, retrieval, tokenizer) are built once in trained/components.py and injected.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace

from lorarag.core.errors import ConfigError
from lorarag.eval.runner import ScenarioSystem
from lorarag.fallback.format import SYSTEM_RAG, SourceText, is_unknown, rag_user_turn
from lorarag.fallback.gate import gate_fires
from lorarag.fallback.system import AdvancedRAGSystem, Context, Detector, closed_book, closed_book_conversation
from lorarag.rag.generators.base import Generator, Message
from lorarag.rag.prompt import neutralise
from lorarag.rag.records import Answer, Retrieved, Trace
from lorarag.rag.system import RAGSystem
from lorarag.scenarios.records import Scenario
from lorarag.trained.components import Parts
from lorarag.trained.config import RAG_SFT, SystemConfig
from lorarag.trained.contexts import ScenarioContexts

# The prompted-detection baseline gets the format spelled out (the LoRA learned it from data).
PROMPTED_SYSTEM = (
    SYSTEM_RAG + " Reply in exactly one line of this form: memory: <what you remember, "
    "or unknown> | source: <what the sources say, or none> | verdict: <supported, "
    "conflicting, outdated, irrelevant or insufficient> | answer: <your final answer>"
)


# Astute-RAG-style consolidation (Wang et al. 2024, prompt-only): the model's own answer, elicited
# closed-book first, is set beside the sources as one more passage; the model reconciles them.
ASTUTE_SYSTEM = (
    "You answer questions from numbered sources and from your own knowledge. Sources can be "
    "wrong, outdated or irrelevant, and so can your own knowledge. Compare them, keep what is "
    "consistent and reliable, then give only the final answer in a few words."
)


def astute_user_turn(question: str, sources: list[SourceText], own: str) -> str:
    """The consolidation turn: the numbered sources, then the model's own answer, then the question."""
    turn = rag_user_turn(question, sources)
    head, _, tail = turn.rpartition("\nQuestion: ")
    own_line = f"Your own knowledge: {' '.join(neutralise(own).split())}"
    return f"{head}\n{own_line}\nQuestion: {tail}" if head else f"{own_line}\n{turn}"


class AstuteRAG:
    """A prompt-only baseline: elicit the model's own answer, consolidate it with the sources."""

    def __init__(
        self,
        name: str,
        generator: Generator,
        ctx: ScenarioContexts,
        mode: str,
        max_new_tokens: int,
        adapter: str | None = None,
    ) -> None:
        self.name, self.generator, self.ctx, self.mode, self.max_new = name, generator, ctx, mode, max_new_tokens
        self.adapter = adapter  # None: the base model; the LoRA's name: what it learned is its own knowledge

    def answer_scenarios(self, items: list[Scenario]) -> list[Answer]:
        """Closed-book answers (a memo hit after the closed-book system of the same model), then one
        consolidation pass over each scenario's context."""
        questions = [s.question for s in items]
        ctxs = self.ctx.contexts(items, self.mode)
        own = closed_book(self.generator, self.adapter, questions)
        convs = [
            [
                Message("system", ASTUTE_SYSTEM),
                Message("user", astute_user_turn(q, [SourceText(r.chunk.text, r.chunk.date) for r in c[1]], o.answer)),
            ]
            for q, c, o in zip(questions, ctxs, own)
        ]
        gens = self.generator.generate(convs, adapter=self.adapter, max_new_tokens=self.max_new)
        return [
            Answer(
                question=q,
                text=g.text.strip(),
                sources=tuple(dict.fromkeys(r.chunk.source for r in c[1])),
                trace=Trace(
                    question=q,
                    retrieved=tuple(c[0]),
                    reranked=tuple(c[1]),
                    prompt=g.prompt,
                    raw_output=g.text,
                    memory_answer=o.answer,
                    notes=(f"own knowledge (closed-book): {o.answer!r}",),
                ),
            )
            for q, c, o, g in zip(questions, ctxs, own, gens)
        ]


class LoRARAG:
    """AdvancedRAGSystem on scenario contexts."""

    def __init__(self, name: str, system: AdvancedRAGSystem, ctx: ScenarioContexts, mode: str) -> None:
        self.name, self.system, self.ctx, self.mode = name, system, ctx, mode

    def answer_scenarios(self, items: list[Scenario]) -> list[Answer]:
        """Judge and route each scenario's context."""
        return self.system.answer_with_context([s.question for s in items], self.ctx.contexts(items, self.mode))


class BaseRAG:
    """The plain grounded RAG prompt (no detection) on scenario or oracle contexts, answered by the
    base model or by `adapter` (the RAG-SFT adapter)."""

    def __init__(
        self, name: str, rag: RAGSystem, ctx: ScenarioContexts, mode: str, max_new_tokens: int, adapter: str | None = None
    ) -> None:
        self.name, self.rag, self.ctx, self.mode, self.max_new = name, rag, ctx, mode, max_new_tokens
        self.adapter = adapter

    def answer_scenarios(self, items: list[Scenario]) -> list[Answer]:
        """Answer from the context, as the base RAGSystem does."""
        ctxs = self.ctx.oracle(items) if self.mode == "oracle" else self.ctx.contexts(items, self.mode)
        answers = self.rag.answer_with_context(
            [s.question for s in items],
            [list(c[1]) for c in ctxs],
            self.adapter,
            candidates=[list(c[0] or c[1]) for c in ctxs],
            max_new_tokens=self.max_new,
        )
        # Record the sources actually given as the final list (RAGSystem leaves `reranked` empty
        # without a reranker, which would make the top-N candidates look like the model's input).
        return [replace(a, trace=replace(a.trace, reranked=tuple(c[1]))) if a.trace else a for a, c in zip(answers, ctxs)]


class ClosedBook:
    """The model alone: no sources. Scenarios share questions; the generator's memo (rag/generators/memo.py)
    answers a question asked again without the model."""

    def __init__(self, name: str, generator: Generator, adapter: str | None, max_new_tokens: int) -> None:
        self.name, self.generator, self.adapter, self.max_new = name, generator, adapter, max_new_tokens

    def answer_scenarios(self, items: list[Scenario]) -> list[Answer]:
        """One closed-book generation per scenario (a repeated question is a memo hit)."""

        convs = [closed_book_conversation(s.question) for s in items]
        # top_logprobs=1 as `fallback.system.closed_book` asks: the LoRA-RAG memory pass is then
        # the same request, answered from the memo
        gens = self.generator.generate(convs, adapter=self.adapter, max_new_tokens=self.max_new, top_logprobs=1)
        return [
            Answer(
                question=s.question,
                text=g.text.strip(),
                trace=Trace(question=s.question, prompt=g.prompt, raw_output=g.text),
            )
            for s, g in zip(items, gens)
        ]


class MemoryOrContext:
    """The simple rule beside LoRA-RAG: the LoRA's greedy closed-book answer where the gate keeps
    it (a memory, its mean NLL at or under the calibrated threshold), else the plain RAG prompt's
    answer from the context, read by `reader` (None: the base model; or an adapter's name: the
    LoRA itself, or the RAG-SFT adapter). It knows what the LoRA knows but never compares the
    source with its memory, so LoRA-RAG beats it only where reading the source against memory
    pays: a newer source over an older memory, or a memory the gate keeps wrongly."""

    def __init__(
        self,
        name: str,
        rag: RAGSystem,
        generator: Generator,
        adapter: str | None,
        threshold: float | None,
        ctx: ScenarioContexts,
        mode: str,
        max_new_tokens: int,
        reader: str | None = None,
    ) -> None:
        self.name, self.rag, self.generator, self.adapter = name, rag, generator, adapter
        self.threshold, self.ctx, self.mode, self.max_new = threshold, ctx, mode, max_new_tokens
        self.reader = reader

    def answer_scenarios(self, items: list[Scenario]) -> list[Answer]:
        """One closed-book pass for all (a memo hit after closed_book_lora), one RAG pass for the rest."""
        ctxs = self.ctx.contexts(items, self.mode)
        return self.route([s.question for s in items], ctxs, [list(c[1]) for c in ctxs])

    def route(
        self,
        questions: list[str],
        shown: list[Context],
        read: list[list[Retrieved]],
        notes: list[tuple[str, ...]] | None = None,
    ) -> list[Answer]:
        """Memory where the gate keeps it, else the reader over `read` (a subset of each `shown`
        context; none left: abstain). Traces record `shown`, with `notes` per question."""
        cb = closed_book(self.generator, self.adapter, questions)
        keep = [not is_unknown(c.answer) and (self.threshold is None or not gate_fires(c.nll, self.threshold)) for c in cb]
        rest = [i for i, k in enumerate(keep) if not k]
        answered = self.rag.answer_with_context(
            [questions[i] for i in rest],
            [read[i] for i in rest],
            self.reader,
            candidates=[list(shown[i][0] or shown[i][1]) for i in rest],
            max_new_tokens=self.max_new,
        )
        from_context = dict(zip(rest, answered))
        out = []
        for i, (q, c, m) in enumerate(zip(questions, shown, cb)):
            note = (
                f"gate doubt={m.nll:.4f} memory {m.answer!r} " + ("kept" if keep[i] else "rejected"),
                *(notes[i] if notes else ()),
            )
            if keep[i]:
                out.append(
                    Answer(
                        question=q,
                        text=m.answer,
                        trace=Trace(
                            question=q,
                            retrieved=tuple(c[0]),
                            reranked=tuple(c[1]),
                            route="fallback",
                            memory_answer=m.answer,
                            notes=note,
                        ),
                    )
                )
            else:
                a = from_context[i]
                out.append(
                    replace(
                        a,
                        trace=replace(
                            a.trace or Trace(question=q),
                            retrieved=tuple(c[0]),
                            reranked=tuple(c[1]),
                            route="context",
                            notes=note,
                        ),
                    )
                )
        return out


_YEAR = re.compile(r"(?<!\d)(\d{4})(?!\d)")


def source_year(date: str | None) -> int | None:
    """The year a source's date names (its first four-digit number: `2021`, `2019-05-01`), None
    for an undated source or a date without a year."""
    m = _YEAR.search(date or "")
    return int(m.group(1)) if m else None


class DateRule:
    """The rule a dated knowledge base invites, beside LoRA-RAG: no verdict, only each source's
    date against `snapshot`, the year the LoRA's knowledge is current to (`data.snapshot`).

    - A source dated after the snapshot supersedes the memory: the plain RAG prompt answers from
      the newer sources alone, read by memory_or_context's reader (the base model, the LoRA or
      the RAG-SFT adapter).
    - A source dated at or before it is superseded by the memory and dropped; memory_or_context
      then answers over the undated rest (the memory where the gate keeps it, else the reader over
      the undated sources, none left: abstain).
    It reads the same dates LoRA-RAG's prompt shows, so LoRA-RAG beats it only where the text must be
    read: a factual error in an undated source, a never-learned fact's right source, a memory the
    gate rejects. With the LoRA as its reader, what is left of the gap is the verdict's own."""

    def __init__(self, name: str, moc: MemoryOrContext, snapshot: int) -> None:
        self.name, self.moc, self.snapshot = name, moc, snapshot

    def answer_scenarios(self, items: list[Scenario]) -> list[Answer]:
        """One RAG pass over the newer sources of the items that have any; memory_or_context for the rest."""
        questions = [s.question for s in items]
        ctxs = self.moc.ctx.contexts(items, self.moc.mode)
        years = [[source_year(r.chunk.date) for r in c[1]] for c in ctxs]
        newer = [[r for r, y in zip(c[1], ys) if y is not None and y > self.snapshot] for c, ys in zip(ctxs, years)]
        read = [i for i, n in enumerate(newer) if n]
        rest = [i for i, n in enumerate(newer) if not n]
        answered = self.moc.rag.answer_with_context(
            [questions[i] for i in read],
            [newer[i] for i in read],
            self.moc.reader,
            candidates=[list(ctxs[i][0] or ctxs[i][1]) for i in read],
            max_new_tokens=self.moc.max_new,
        )
        out: dict[int, Answer] = {}
        for i, a in zip(read, answered):
            note = (f"date rule: {len(newer[i])} source(s) dated after {self.snapshot}: read those",)
            out[i] = replace(
                a,
                trace=replace(
                    a.trace or Trace(question=questions[i]),
                    retrieved=tuple(ctxs[i][0]),
                    reranked=tuple(ctxs[i][1]),
                    route="context",
                    notes=note,
                ),
            )
        undated = [[r for r, y in zip(ctxs[i][1], years[i]) if y is None] for i in rest]
        notes = [
            (f"date rule: {len(ctxs[i][1]) - len(u)} source(s) dated by {self.snapshot} dropped",)
            for i, u in zip(rest, undated)
        ]
        out.update(zip(rest, self.moc.route([questions[i] for i in rest], [ctxs[i] for i in rest], undated, notes)))
        return [out[i] for i in range(len(items))]


def build_system(cfg: SystemConfig, parts: Parts) -> ScenarioSystem:
    """The scenario system for `cfg.kind`, from shared, already-built components (`parts`)."""
    return SYSTEMS[cfg.kind](cfg, parts)


def _lora_rag(cfg: SystemConfig, parts: Parts) -> LoRARAG:
    fb = parts.fallback if cfg.policy is None else parts.fallback.model_copy(update={"policy": cfg.policy})
    over = parts.override_threshold
    det = Detector(parts.generator, parts.first_tokens, fb, parts.gate_threshold, override_threshold=over)
    # the base model's reading where the gate rejects the memory: base RAG's prompt and budget
    return LoRARAG(
        cfg.name, AdvancedRAGSystem(parts.rag, det, fb, read_max_new_tokens=cfg.max_new_tokens), parts.contexts, cfg.context
    )


def _prompted(cfg: SystemConfig, parts: Parts) -> LoRARAG:
    fb = parts.fallback
    # Same format and policy, the base model (or `adapter`), no gate (memory `fields` has no gated
    # closed-book reading); each field forced in turn, so the verdict is read even where the model
    # cannot keep the format.
    fb = fb.model_copy(
        update={
            "detector": fb.detector.model_copy(update={"adapter": cfg.adapter}),
            "gate": fb.gate.model_copy(update={"enabled": False}),
        }
    )
    det = Detector(parts.generator, parts.first_tokens, fb, None, system_prompt=PROMPTED_SYSTEM, memory="fields")
    return LoRARAG(cfg.name, AdvancedRAGSystem(parts.rag, det, fb), parts.contexts, cfg.context)


def _rag_sft(cfg: SystemConfig, parts: Parts) -> BaseRAG:
    if parts.rag_sft is None:
        raise ConfigError(
            f"system {cfg.name!r} (rag_sft) needs the RAG-SFT adapter: `lorarag run` trains it "
            "when the config lists the system"
        )
    return BaseRAG(cfg.name, parts.rag, parts.contexts, cfg.context, cfg.max_new_tokens, adapter=RAG_SFT)


def _memory_or_context(cfg: SystemConfig, parts: Parts) -> MemoryOrContext:
    if cfg.adapter == RAG_SFT and parts.rag_sft is None:
        raise ConfigError(
            f"system {cfg.name!r} reads with the RAG-SFT adapter: `lorarag run` trains it when the config lists the system"
        )
    return MemoryOrContext(
        cfg.name,
        parts.rag,
        parts.generator,
        parts.fallback.detector.adapter,
        parts.gate_threshold if parts.fallback.gate.enabled else None,
        parts.contexts,
        cfg.context,
        cfg.max_new_tokens,
        reader=cfg.adapter,
    )


def _date_rule(cfg: SystemConfig, parts: Parts) -> DateRule:
    if parts.snapshot is None:
        raise ConfigError(f"system {cfg.name!r} (date_rule) reads sources' dates against data.snapshot: set it")
    return DateRule(cfg.name, _memory_or_context(cfg, parts), parts.snapshot)


SYSTEMS: dict[str, Callable[[SystemConfig, Parts], ScenarioSystem]] = {
    "lora_rag": _lora_rag,
    "prompted_detection": _prompted,
    "base_rag": lambda cfg, p: BaseRAG(cfg.name, p.rag, p.contexts, cfg.context, cfg.max_new_tokens),
    "oracle": lambda cfg, p: BaseRAG(cfg.name, p.rag, p.contexts, "oracle", cfg.max_new_tokens),
    "rag_sft": _rag_sft,
    "closed_book": lambda cfg, p: ClosedBook(cfg.name, p.generator, cfg.adapter, cfg.max_new_tokens),
    "astute_rag": lambda cfg, p: AstuteRAG(cfg.name, p.generator, p.contexts, cfg.context, cfg.max_new_tokens, cfg.adapter),
    "memory_or_context": _memory_or_context,
    "date_rule": _date_rule,
}
