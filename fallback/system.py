"""AdvancedRAGSystem: retrieve → rerank → LoRA scored pass → gate → policy → final answer.

The LoRA reads the question and the numbered sources and replies
`memory: … | source: … | verdict: … | answer: …` (fallback/format.py). One scored pass (forced
prefix `memory:`, or `memory: <closed-book answer> |`; top logprobs at every position) gives the
verdict distribution. If the calibrated gate (fallback/gate.py: P(" unknown") at the memory
position, or the closed-book answer's NLL) says the memory is not real knowledge, the reply
starts from `memory: unknown |` instead. The routing policy (a pure function) then picks the source
value, the memory value or abstention. Every decision lands in the Trace.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from typing import Any, Sequence

from fallback.config import FallbackConfig
from fallback.format import SYSTEM_RAG, SourceText, is_unknown, rag_user_turn
from fallback.gate import answer_nll, gate_fires
from fallback.policy import decide_route, route_answer
from fallback.verdict import Verdict, forced_unknown_prefix, memory_prefix, read_verdict
from rag.records import Answer, Retrieved, Trace

log = logging.getLogger(__name__)

Context = tuple[tuple[Retrieved, ...], tuple[Retrieved, ...]]  # (top-N retrieved, top-k reranked)


@dataclass(frozen=True)
class Judgement:
    """The detector's output for one question, after the gate."""

    verdict: Verdict  # final reply's verdict (after a gated regeneration, if any)
    gated: bool  # True when the gate forced `memory: unknown`
    first_memory: str  # the memory before the gate (the reply's, or the closed-book answer)
    prompt: str
    doubt: float | None = None  # the gate's reading (GateConfig.signal); None: not read
    lenient: bool = False  # the strict gate fired, but the lenient one kept the memory (its verdict)


@dataclass(frozen=True)
class ClosedBookAnswer:
    """The adapter's greedy closed-book answer and its mean NLL per token (nats)."""

    answer: str
    nll: float


def conversation(question: str, sources: Sequence[Retrieved], system: str = SYSTEM_RAG) -> list[Any]:
    """The LoRA's chat turns for a question and its final sources (same as the SFT data)."""
    from rag.generate import Message

    texts = [SourceText(r.chunk.text, r.chunk.date) for r in sources]
    return [Message("system", system), Message("user", rag_user_turn(question, texts))]


class Detector:
    """The scored verdict pass plus the self-knowledge gate, batched.

    memory `reply`: the model writes its memory in the scored pass; where the gate fires, the reply
    is regenerated from `memory: unknown |`. memory `closed_book`: a closed-book pass of the same
    adapter answers first and the scored pass is forced to start `memory: <that answer> |` (or
    `memory: unknown |` where the gate fires) — one scored pass either way.
    """

    def __init__(self, generator: Any, first_tokens: dict[str, str], cfg: FallbackConfig,
                 gate_threshold: float | None, *, system_prompt: str = SYSTEM_RAG,
                 memory: str = "reply", lenient_threshold: float | None = None) -> None:
        self.generator = generator
        self.system_prompt = system_prompt
        self.memory = memory  # "reply" | "closed_book" (see SystemConfig.memory)
        self.first_tokens = first_tokens
        self.cfg = cfg
        self.gate_threshold = gate_threshold if cfg.gate.enabled else None
        # GateConfig.lenient: where the strict gate fires but the doubt is under this threshold,
        # the memory still counts if the memory-informed verdict is one of these
        self.lenient_threshold = lenient_threshold if self.gate_threshold is not None else None
        self.lenient_verdicts = frozenset(cfg.gate.lenient.verdicts) if cfg.gate.lenient else frozenset()
        self.invalid = 0  # replies that did not parse, counted over the detector's lifetime

    @property
    def _needs_closed_book(self) -> bool:
        return self.memory == "closed_book" or (self.cfg.gate.signal == "closed_book_nll"
                                                and self.gate_threshold is not None)

    def _pass(self, convs: list[list[Any]], prefixes: Sequence[str]) -> list[tuple[Verdict, str]]:
        d = self.cfg.detector
        gens = self.generator.generate(convs, adapter=d.adapter, max_new_tokens=d.max_new_tokens,
                                       top_logprobs=d.top_logprobs, prefixes=list(prefixes))
        return [(read_verdict(g, self.first_tokens, prefix=p), g.prompt) for g, p in zip(gens, prefixes)]

    def _fires(self, doubt: float | None) -> bool:
        return self.gate_threshold is not None and gate_fires(doubt, self.gate_threshold)

    def _probe(self, doubt: float | None) -> bool:
        """The strict gate fires but the lenient one would not: try the memory, keep it by verdict."""
        loose = self.lenient_threshold
        return self._fires(doubt) and loose is not None and not gate_fires(doubt, loose)

    def _redo_unknown(self, convs: list, redo: list[int]) -> dict[int, tuple[Verdict, str]]:
        """The scored pass again from `memory: unknown |` for the items `redo`, by index."""
        if not redo:  # no empty generate call (vLLM rejects an empty prompt list)
            return {}
        return dict(zip(redo, self._pass([convs[i] for i in redo], [forced_unknown_prefix()] * len(redo))))

    def gate_scores(self, questions: Sequence[str], sources: Sequence[Sequence[Retrieved]]) -> list[float | None]:
        """The gate's doubt score per question (GateConfig.signal), for calibration on dev; None
        where the closed-book answer itself is "unknown" (no memory for the gate to judge)."""
        if self.cfg.gate.signal == "closed_book_nll":
            cb = closed_book(self.generator, self.cfg.detector.adapter, questions)
            return [None if is_unknown(c.answer) else c.nll for c in cb]
        convs = [conversation(q, s, self.system_prompt) for q, s in zip(questions, sources)]
        first = self._pass(convs, [memory_prefix()] * len(convs))
        return [v.p_unknown if v.p_unknown is not None else 0.0 for v, _ in first]

    def judge(self, questions: Sequence[str], sources: Sequence[Sequence[Retrieved]]) -> list[Judgement]:
        """One scored pass for every question; a gated second pass only where the gate fires."""
        convs = [conversation(q, s, self.system_prompt) for q, s in zip(questions, sources)]
        adapter = self.cfg.detector.adapter
        if self.memory == "closed_book":
            return self._judge_closed_book_memory(convs, closed_book(self.generator, adapter, questions))
        cb = closed_book(self.generator, adapter, questions) if self._needs_closed_book else None
        first = self._pass(convs, [memory_prefix()] * len(convs))
        doubts = [c.nll for c in cb] if cb is not None and self.cfg.gate.signal == "closed_book_nll" \
            else [v.p_unknown for v, _ in first]
        redo = [i for i, (v, _) in enumerate(first)
                if self._fires(doubts[i]) and not (v.valid and is_unknown(v.memory))
                and not (self._probe(doubts[i]) and v.label in self.lenient_verdicts)]
        second = self._redo_unknown(convs, redo)
        out = []
        for i, (v, prompt) in enumerate(first):
            final = v
            if i in second:
                # keep the first pass's gate reading on the regenerated verdict
                final = replace(second[i][0], p_unknown=v.p_unknown)
            self.invalid += not final.valid
            kept = self._fires(doubts[i]) and i not in second and not (v.valid and is_unknown(v.memory))
            out.append(Judgement(final, i in second, v.memory, prompt, doubts[i], lenient=kept))
        return out

    def _judge_closed_book_memory(self, convs: list, cb: list[ClosedBookAnswer]) -> list[Judgement]:
        """The scored pass forced to start with the closed-book memory (or unknown, if gated)."""
        doubts = [c.nll for c in cb] if self.cfg.gate.signal == "closed_book_nll" else [None] * len(cb)
        probe = [self._probe(x) and not is_unknown(c.answer) for x, c in zip(doubts, cb)]
        gated = [(self._fires(x) or is_unknown(c.answer)) and not p for x, c, p in zip(doubts, cb, probe)]
        prefixes = [forced_unknown_prefix() if g else f"{memory_prefix()} {c.answer} |" for g, c in zip(gated, cb)]
        first = self._pass(convs, prefixes)
        # probed memories whose verdict is not lenient are judged again from `memory: unknown |`
        redo = [i for i, (v, _) in enumerate(first) if probe[i] and v.label not in self.lenient_verdicts]
        second = self._redo_unknown(convs, redo)
        out = []
        for i, ((v, prompt), g, c, x) in enumerate(zip(first, gated, cb, doubts)):
            if i in second:
                (v, prompt), g = second[i], True
            self.invalid += not v.valid
            out.append(Judgement(v, g and not is_unknown(c.answer), c.answer, prompt, x,
                                 lenient=probe[i] and i not in second))
        return out


def closed_book(generator: Any, adapter: str | None, questions: Sequence[str]) -> list[ClosedBookAnswer]:
    """The adapter's closed-book answers and their NLL (its recall there beats the RAG reply's memory)."""
    from rag.generate import Message

    from fallback.format import SYSTEM_CLOSED_BOOK, closed_book_user_turn

    convs = [[Message("system", SYSTEM_CLOSED_BOOK), Message("user", closed_book_user_turn(q))] for q in questions]
    # top_logprobs=1 asks every backend (openai kind included) for the chosen tokens' logprobs
    gens = generator.generate(convs, adapter=adapter, max_new_tokens=24, top_logprobs=1)
    return [ClosedBookAnswer(" ".join(g.text.replace("|", " ").split()) or "unknown", answer_nll(g.logprobs))
            for g in gens]


def _answer(question: str, ctx: Context, j: Judgement, cfg: FallbackConfig, seconds: float) -> Answer:
    """Apply the policy to one judgement and record every decision in the Trace."""
    v = j.verdict
    memory_known = v.valid and not is_unknown(v.memory)
    route = decide_route(v.label, v.flag_score, memory_known, cfg.policy)
    source_value = v.source if not is_unknown(v.source) else v.answer
    text = route_answer(route, v.memory, source_value)
    notes = [f"p_unknown={v.p_unknown:.4f}" if v.p_unknown is not None else "p_unknown=none"]
    if j.doubt is not None:
        notes.append(f"gate doubt ({cfg.gate.signal})={j.doubt:.4f}")
    if j.gated:
        notes.append(f"gate: memory {j.first_memory!r} -> unknown")
    if j.lenient:
        notes.append(f"gate: memory {j.first_memory!r} kept by the lenient threshold ({v.label} verdict)")
    if not v.valid:
        # the reply's opening, so a run's results say what the model wrote instead of the format
        notes.append(f"invalid reply: {' '.join(v.raw.split())[:160]!r}")
    trace = Trace(question=question, retrieved=tuple(ctx[0]), reranked=tuple(ctx[1]), prompt=j.prompt,
                  raw_output=v.raw, timings_s=(("detect", seconds),), verdict=v.label,
                  verdict_score=v.score, verdict_probs=v.probs, route=route,
                  context_answer=source_value if v.valid else None,
                  memory_answer=v.memory if memory_known else None, notes=tuple(notes))
    sources = tuple(dict.fromkeys(r.chunk.source for r in (ctx[1] or ctx[0])))
    return Answer(question=question, text=text, sources=sources if route == "context" else (),
                  abstained=route == "abstain", trace=trace)


class AdvancedRAGSystem:
    """RAGSystem (injected) for retrieval; the LoRA detector, gate and policy for the answer."""

    def __init__(self, rag: Any, detector: Detector, cfg: FallbackConfig) -> None:
        self.rag = rag
        self.detector = detector
        self.cfg = cfg

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
        return [_answer(q, c, j, self.cfg, per) for q, c, j in zip(questions, contexts, judged)]
