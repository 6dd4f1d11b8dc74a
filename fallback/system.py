"""AdvancedRAGSystem: retrieve → rerank → LoRA scored pass → gate → policy → final answer.

The LoRA reads the question and the numbered sources and replies `memory: … | source: … | verdict: …
| answer: …` (fallback/format.py). One scored pass (forced prefix `memory:`, or `memory: <closed-
book answer> |`; top logprobs at every position) gives the verdict distribution. If the calibrated
gate (fallback/gate.py: the closed-book answer's NLL) says the memory is not real knowledge, the
reply starts from `memory: unknown |` instead; where it finds the memory confident (at or below the
override threshold), that memory overrides sources whose answer differs from it. The routing policy
(a pure function) then picks the source value, the memory value or abstention; with no memory, where
the policy would abstain (`no_memory: verdict_read`, the default) or always (`read`), the wrapped
RAGSystem's base model reads the same sources instead, as base RAG would. Every decision lands in
the Trace.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal, Protocol

from lorarag.fallback.config import FallbackConfig
from lorarag.fallback.format import (
    SYSTEM_CLOSED_BOOK,
    SYSTEM_RAG,
    SourceText,
    closed_book_user_turn,
    is_unknown,
    rag_user_turn,
)
from lorarag.fallback.gate import SIGNAL, answer_nll, gate_fires
from lorarag.fallback.policy import (
    CONFIDENT_NOTE,
    DISOWNED_NOTE,
    OVERRIDE_NOTE,
    UNSUPPORTED_NOTE,
    final_answer,
    memory_in_use,
    read_note,
    reads_sources,
    route_with_override,
    supported,
)
from lorarag.fallback.verdict import (
    Verdict,
    field_value,
    forced_unknown_prefix,
    memory_prefix,
    read_forced_verdict,
    read_verdict,
)
from lorarag.rag.generators.base import Generator, Message
from lorarag.rag.records import Answer, Retrieved, Trace

log = logging.getLogger(__name__)

Context = tuple[tuple[Retrieved, ...], tuple[Retrieved, ...]]  # (top-N retrieved, top-k reranked)


@dataclass(frozen=True)
class Judgement:
    """The detector's output for one question, after the gate."""

    verdict: Verdict  # the scored reply's verdict
    gated: bool  # True when the gate forced `memory: unknown`
    first_memory: str  # the memory before the gate (the closed-book answer, or the reply's own)
    prompt: str
    doubt: float | None = None  # the gate's reading (closed-book NLL); None: not read
    confident: bool = False  # the kept memory's doubt is at or below the override threshold (policy rule 5)


@dataclass(frozen=True)
class ClosedBookAnswer:
    """The adapter's greedy closed-book answer and its mean NLL per token (nats)."""

    answer: str
    nll: float


def conversation(question: str, sources: Sequence[Retrieved], system: str = SYSTEM_RAG) -> list[Message]:
    """The LoRA's chat turns for a question and its final sources (same as the SFT data)."""
    texts = [SourceText(r.chunk.text, r.chunk.date) for r in sources]
    return [Message("system", system), Message("user", rag_user_turn(question, texts))]


class Detector:
    """The scored verdict pass plus the self-knowledge gate, batched.

    memory `closed_book` (the LoRA): a closed-book pass of the same adapter answers first and the
    scored pass is forced to start `memory: <that answer> |`, or `memory: unknown |` where the
    gate fires on that answer's NLL — one scored pass per question. memory `reply` (a prompted base
    model, no gate): the model writes its own memory in the scored pass. memory `fields` (a prompted
    base model that cannot keep the reply format): the closed-book answer is the memory, a pass
    forced to `memory: <it> | source:` writes the source field, and a pass forced to `... |
    verdict:` gives the label probabilities at its first position — so the verdict is always read,
    as the LoRA's is, however the model would have continued.
    """

    def __init__(
        self,
        generator: Generator,
        first_tokens: dict[str, str],
        cfg: FallbackConfig,
        gate_threshold: float | None,
        *,
        system_prompt: str = SYSTEM_RAG,
        memory: Literal["closed_book", "reply", "fields"] = "closed_book",
        override_threshold: float | None = None,
    ) -> None:
        self.gate_threshold = gate_threshold if cfg.gate.enabled else None
        # a memory at or below it overrides sources that disagree (policy rule 5); only beside a gate in use
        self.override_threshold = override_threshold if self.gate_threshold is not None else None
        if memory != "closed_book" and self.gate_threshold is not None:
            raise ValueError("a memory written in the reply has no closed-book reading to gate")
        self.generator = generator
        self.system_prompt = system_prompt
        self.memory = memory
        self.first_tokens = first_tokens
        self.cfg = cfg
        self.invalid = 0  # replies that did not parse, counted over the detector's lifetime

    def _pass(self, convs: list[list[Message]], prefixes: Sequence[str]) -> list[tuple[Verdict, str]]:
        d = self.cfg.detector
        gens = self.generator.generate(
            convs, adapter=d.adapter, max_new_tokens=d.max_new_tokens, top_logprobs=d.top_logprobs, prefixes=list(prefixes)
        )
        return [(read_verdict(g, self.first_tokens, prefix=p), g.prompt) for g, p in zip(gens, prefixes)]

    def _fires(self, doubt: float | None) -> bool:
        return self.gate_threshold is not None and gate_fires(doubt, self.gate_threshold)

    def gate_scores(self, questions: Sequence[str]) -> list[float | None]:
        """The gate's doubt score per question, for calibration on dev; None where the closed-book
        answer itself is "unknown" (no memory for the gate to judge)."""
        cb = closed_book(self.generator, self.cfg.detector.adapter, questions)
        return [None if is_unknown(c.answer) else c.nll for c in cb]

    def judge(self, questions: Sequence[str], sources: Sequence[Sequence[Retrieved]]) -> list[Judgement]:
        """One scored pass for every question, its memory from the closed-book pass (or the reply)."""
        convs = [conversation(q, s, self.system_prompt) for q, s in zip(questions, sources)]
        if self.memory == "fields":
            return self._judge_by_fields(convs, closed_book(self.generator, self.cfg.detector.adapter, questions))
        if self.memory == "reply":
            first = self._pass(convs, [memory_prefix()] * len(convs))
            self.invalid += sum(not v.valid for v, _ in first)
            return [Judgement(v, False, v.memory, prompt) for v, prompt in first]
        cb = closed_book(self.generator, self.cfg.detector.adapter, questions)
        doubts = [c.nll for c in cb]
        gated = [self._fires(x) or is_unknown(c.answer) for x, c in zip(doubts, cb)]
        prefixes = [forced_unknown_prefix() if g else f"{memory_prefix()} {c.answer} |" for g, c in zip(gated, cb)]
        out = []
        for (v, prompt), g, c, x in zip(self._pass(convs, prefixes), gated, cb, doubts):
            self.invalid += not v.valid
            sure = not g and self.override_threshold is not None and x <= self.override_threshold
            out.append(Judgement(v, g and not is_unknown(c.answer), c.answer, prompt, x, sure))
        return out

    def _judge_by_fields(self, convs: list[list[Message]], cb: list[ClosedBookAnswer]) -> list[Judgement]:
        """memory `fields`: the source field, then the verdict, each from a pass forced up to it."""
        d = self.cfg.detector
        heads = [f"{memory_prefix()} {c.answer} | source:" for c in cb]
        src = self.generator.generate(convs, adapter=d.adapter, max_new_tokens=d.max_new_tokens, prefixes=heads)
        sources = [field_value(g.text) for g in src]
        heads = [f"{memory_prefix()} {c.answer} | source: {s} | verdict:" for c, s in zip(cb, sources)]
        gens = self.generator.generate(
            convs, adapter=d.adapter, max_new_tokens=2, top_logprobs=d.top_logprobs, prefixes=heads
        )
        out = []
        for c, s, g in zip(cb, sources, gens):
            v = read_forced_verdict(g, self.first_tokens, c.answer, s)
            self.invalid += not v.valid
            out.append(Judgement(v, False, c.answer, g.prompt))
        return out


def closed_book_conversation(question: str) -> list[Message]:
    """The closed-book request of one question (system prompt + question, no sources)."""
    return [Message("system", SYSTEM_CLOSED_BOOK), Message("user", closed_book_user_turn(question))]


def closed_book(generator: Generator, adapter: str | None, questions: Sequence[str]) -> list[ClosedBookAnswer]:
    """The adapter's closed-book answers and their NLL (its recall there beats the RAG reply's memory)."""
    convs = [closed_book_conversation(q) for q in questions]
    # top_logprobs=1 asks every backend (openai kind included) for the chosen tokens' logprobs
    gens = generator.generate(convs, adapter=adapter, max_new_tokens=24, top_logprobs=1)
    return [ClosedBookAnswer(" ".join(g.text.replace("|", " ").split()) or "unknown", answer_nll(g.logprobs)) for g in gens]


def _answer(question: str, ctx: Context, j: Judgement, cfg: FallbackConfig, seconds: float) -> Answer:
    """Apply the policy to one judgement and record every decision in the Trace."""
    v = j.verdict
    memory_known = v.valid and not is_unknown(v.memory)  # the gate kept it: the record holds it for replays
    uses = memory_in_use(v.label, memory_known, cfg.policy)
    source_value = v.source if not is_unknown(v.source) else v.answer
    confident = memory_known and j.confident
    route, overridden = route_with_override(
        v.label, v.flag_score, uses, confident and uses, v.memory, source_value, cfg.policy
    )
    text = final_answer(route, v.memory, source_value, v.answer, cfg.policy)
    notes = [f"p_unknown={v.p_unknown:.4f}" if v.p_unknown is not None else "p_unknown=none"]
    if j.doubt is not None:
        notes.append(f"gate doubt ({SIGNAL})={j.doubt:.4f}")
    if j.gated:
        notes.append(f"gate: memory {j.first_memory!r} -> unknown")
    if confident:
        notes.append(CONFIDENT_NOTE)
    if memory_known and not uses:
        notes.append(DISOWNED_NOTE)
    if overridden:
        notes.append(OVERRIDE_NOTE)
    if not v.valid:
        # the reply's opening, so a run's results say what the model wrote instead of the format
        notes.append(f"invalid reply: {' '.join(v.raw.split())[:160]!r}")
    trace = Trace(
        question=question,
        retrieved=tuple(ctx[0]),
        reranked=tuple(ctx[1]),
        prompt=j.prompt,
        raw_output=v.raw,
        timings_s=(("detect", seconds),),
        verdict=v.label,
        verdict_score=v.score,
        verdict_probs=v.probs,
        route=route,
        context_answer=source_value if v.valid else None,
        memory_answer=v.memory if memory_known else None,
        notes=tuple(notes),
    )
    sources = tuple(dict.fromkeys(r.chunk.source for r in (ctx[1] or ctx[0])))
    return Answer(
        question=question,
        text=text,
        sources=sources if route == "context" else (),
        abstained=route == "abstain",
        trace=trace,
    )


class Retrieval(Protocol):
    """What the system needs of the wrapped RAGSystem (rag/system.py): its two retrieval stages."""

    def retrieve_stages(self, questions: list[str]) -> tuple[list[list[Retrieved]], list[list[Retrieved]], float, float]: ...

    def answer_with_context(
        self,
        questions: list[str],
        contexts: list[list[Retrieved]],
        adapter: str | None = None,
        *,
        candidates: list[list[Retrieved]] | None = None,
        max_new_tokens: int | None = None,
    ) -> list[Answer]: ...

    def close(self) -> None: ...


class AdvancedRAGSystem:
    """RAGSystem (injected) for retrieval and the base model's reading; the LoRA detector, gate and
    policy for the answer. `read_max_new_tokens`: the reading's budget (None: the generator's)."""

    def __init__(
        self, rag: Retrieval, detector: Detector, cfg: FallbackConfig, *, read_max_new_tokens: int | None = None
    ) -> None:
        self.rag = rag
        self.detector = detector
        self.cfg = cfg
        self.read_max_new_tokens = read_max_new_tokens

    def answer(self, questions: list[str]) -> list[Answer]:
        """Retrieve and rerank with the wrapped RAGSystem, then judge and route."""
        cands, final, _, _ = self.rag.retrieve_stages(questions)
        return self.answer_with_context(questions, [(tuple(c), tuple(f)) for c, f in zip(cands, final)])

    def answer_with_context(self, questions: Sequence[str], contexts: Sequence[Context]) -> list[Answer]:
        """Judge each question against its given (retrieved, reranked) context and route."""
        t0 = time.perf_counter()
        final = [c[1] for c in contexts]
        judged = self.detector.judge(questions, final)
        per = (time.perf_counter() - t0) / max(len(questions), 1)
        answers = [_answer(q, c, j, self.cfg, per) for q, c, j in zip(questions, contexts, judged)]
        read = [
            i
            for i, (j, a) in enumerate(zip(judged, answers))
            if reads_sources(
                j.verdict.valid,
                memory_in_use(j.verdict.label, not is_unknown(j.verdict.memory), self.cfg.policy),
                a.trace.route,
                self.cfg.policy,
            )
        ]
        if read:
            self._read(questions, contexts, answers, read)
        return answers

    def _read(self, questions: Sequence[str], contexts: Sequence[Context], answers: list[Answer], read: list[int]) -> None:
        """Replace `answers[i]` for i in `read` by the base model's answer from the same sources
        (the plain RAG prompt, no adapter); the detector's trace stays, with the reading noted."""
        t0 = time.perf_counter()
        got = self.rag.answer_with_context(
            [questions[i] for i in read],
            [list(contexts[i][1]) for i in read],
            None,
            candidates=[list(contexts[i][0] or contexts[i][1]) for i in read],
            max_new_tokens=self.read_max_new_tokens,
        )
        per = (time.perf_counter() - t0) / len(read)
        share = self.cfg.policy.read_support
        for i, a in zip(read, got):
            tr = answers[i].trace or Trace(question=questions[i])
            tr = replace(
                tr, route="context", timings_s=(*tr.timings_s, ("read", per)), notes=(*tr.notes, read_note(self.cfg.policy))
            )
            if not a.abstained and not supported(questions[i], a.text, [r.chunk.text for r in contexts[i][1]], share):
                tr = replace(tr, route="abstain", notes=(*tr.notes, UNSUPPORTED_NOTE))
                a = replace(a, text="", cited=(), bad_citations=(), abstained=True)
            answers[i] = replace(a, trace=tr)

    def close(self) -> None:
        """Free the models (the generator is shared with the wrapped RAGSystem)."""
        self.rag.close()
