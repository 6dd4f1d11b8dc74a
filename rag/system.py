"""`RAGSystem`: retrieve (top-N) -> rerank (top-k, threshold) -> grounded prompt -> generate -> parse.

Components are injected; `build_rag_system(cfg)` is the one place they are built from a config.
Every call is batch-first: one retrieval call, one rerank call and one generation call per batch of
questions. A question with no passage left after the threshold is answered with the abstention
sentence WITHOUT calling the model. Each Answer carries a Trace (both candidate lists, the prompt
actually sent, the raw output, batch wall times in seconds); with `trace_path` every Answer is
appended to a JSONL file as it is produced.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Protocol

from lorarag.core.errors import ConfigError
from lorarag.rag.config import RAGConfig, RetrievalConfig
from lorarag.rag.generators.base import Generator, Message
from lorarag.rag.generators.registry import build_generator
from lorarag.rag.index.store import check_fresh
from lorarag.rag.prompt import PromptBuilder, given_labels, parse_citations
from lorarag.rag.records import Answer, Retrieved, Trace, append_jsonl
from lorarag.rag.rerank import Reranker, build_reranker, rerank
from lorarag.rag.retrieve import load_retriever

log = logging.getLogger(__name__)


class Retriever(Protocol):
    """What RAGSystem needs from a retriever (rag.retrieve.Retriever)."""

    def retrieve(self, queries: list[str], k: int) -> list[list[Retrieved]]: ...


def _norm(text: str) -> str:
    return " ".join(text.split()).strip(' .。!！"“”«»').lower()


class RAGSystem:
    """The base retrieval-augmented generator."""

    def __init__(
        self,
        retriever: Retriever,
        generator: Generator,
        prompts: PromptBuilder,
        retrieval: RetrievalConfig,
        reranker: Reranker | None = None,
        trace_path: str | Path | None = None,
    ) -> None:
        self.retriever, self.generator, self.prompts = retriever, generator, prompts
        self.cfg, self.reranker = retrieval, reranker
        self.trace_path = Path(trace_path) if trace_path else None

    def retrieve_stages(self, questions: list[str]) -> tuple[list[list[Retrieved]], list[list[Retrieved]], float, float]:
        """(top-N candidates, final top-k context, retrieve seconds, rerank seconds)."""
        t0 = time.perf_counter()
        cands = self.retriever.retrieve(questions, self.cfg.top_n)
        t1 = time.perf_counter()
        if self.reranker is not None:
            final = rerank(self.reranker, questions, cands, self.cfg.top_k, self.cfg.min_score)
        else:  # no reranker: the threshold (a reranker probability) does not apply
            final = [c[: self.cfg.top_k] for c in cands]
        return cands, final, t1 - t0, time.perf_counter() - t1

    def retrieve(self, questions: list[str]) -> list[list[Retrieved]]:
        """The final context per question: top-N from the index, reranked to top-k."""
        return self.retrieve_stages(questions)[1]

    def answer(self, questions: list[str], *, adapter: str | None = None) -> list[Answer]:
        """Retrieve, rerank and answer a batch of questions."""
        cands, final, t_ret, t_rr = self.retrieve_stages(questions)
        timings = (("retrieve", t_ret), ("rerank", t_rr))
        return self.answer_with_context(questions, final, adapter=adapter, candidates=cands, timings=timings)

    def answer_with_context(
        self,
        questions: list[str],
        contexts: list[list[Retrieved]],
        adapter: str | None = None,
        *,
        candidates: list[list[Retrieved]] | None = None,
        timings: tuple[tuple[str, float], ...] = (),
        max_new_tokens: int | None = None,
    ) -> list[Answer]:
        """Answer each question from the given passages (one generation call for all that have any).

        `max_new_tokens` overrides the generator config's for this call (None: the config's).
        """
        if len(contexts) != len(questions):
            raise ValueError(f"{len(contexts)} contexts for {len(questions)} questions")
        built = [self.prompts.build(q, ctx) for q, ctx in zip(questions, contexts)]
        todo = [i for i, ctx in enumerate(contexts) if ctx]
        t0 = time.perf_counter()
        gens = (
            self.generator.generate(
                [[Message("system", built[i].system), Message("user", built[i].user)] for i in todo],
                adapter=adapter,
                max_new_tokens=max_new_tokens,
            )
            if todo
            else []
        )
        t_gen = time.perf_counter() - t0
        by_index = dict(zip(todo, gens))
        answers = []
        for i, q in enumerate(questions):
            gen = by_index.get(i)
            cand = tuple(candidates[i]) if candidates is not None else tuple(contexts[i])
            reranked = tuple(contexts[i]) if self.reranker is not None else ()
            if gen is None:  # nothing passed retrieval/threshold: abstain, no model call
                text, prompt, raw = self.prompts.abstention(q), "", ""
                cited, bad, files, abstained = (), (), (), True
                notes: tuple[str, ...] = ("no passage passed retrieval/threshold",)
            else:
                raw, text = gen.text, gen.text.strip()
                prompt = gen.prompt or f"{built[i].system}\n{built[i].user}"
                given = given_labels(prompt) or list(built[i].labels)
                labels = parse_citations(text)
                cited = tuple(x for x in labels if x in given)
                bad = tuple(x for x in labels if x not in given)
                use = cited or tuple(given)
                files = tuple(dict.fromkeys(contexts[i][int(x[1:]) - 1].chunk.source for x in use))
                abstained = _norm(self.prompts.abstention(q)) in _norm(text)
                if abstained:
                    files = ()
                notes = ("prompt truncated to fit max_model_len",) if gen.truncated_prompt else ()
            trace = Trace(
                question=q,
                retrieved=cand,
                reranked=reranked,
                prompt=prompt,
                raw_output=raw,
                timings_s=(*timings, ("generate", t_gen)),
                notes=notes,
            )
            ans = Answer(
                question=q, text=text, cited=cited, bad_citations=bad, sources=files, abstained=abstained, trace=trace
            )
            if self.trace_path is not None:
                append_jsonl(self.trace_path, ans)
            answers.append(ans)
        return answers

    def close(self) -> None:
        """Release the generator and reranker."""
        self.generator.close()
        if self.reranker is not None:
            self.reranker.close()


def build_rag_system(cfg: RAGConfig, *, trace_path: str | Path | None = None) -> RAGSystem:
    """Build every component of `cfg` (the one place they are built) and wire them together."""

    if cfg.generator is None:
        raise ConfigError("the config has no `generator` section; answering needs one")
    check_fresh(cfg.corpus, cfg.chunker, cfg.index)  # a stale index is an error, never served silently
    retriever = load_retriever(cfg.index, cfg.retrieval, cfg.embedder)
    reranker = build_reranker(cfg.reranker) if cfg.reranker is not None else None
    if reranker is None and cfg.retrieval.min_score is not None:
        raise ConfigError("retrieval.min_score is a reranker probability; it needs a `reranker`")
    generator = build_generator(cfg.generator)
    return RAGSystem(
        retriever, generator, PromptBuilder(cfg.prompt), cfg.retrieval, reranker=reranker, trace_path=trace_path
    )
