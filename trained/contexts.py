"""The context each scenario system sees: poisoned retrieval over the clean KB, or presented chunks."""

from __future__ import annotations

from collections.abc import Sequence

from lorarag.fallback.system import Context
from lorarag.rag.config import RetrievalConfig
from lorarag.rag.records import Chunk, Retrieved
from lorarag.rag.rerank import Reranker, rerank
from lorarag.rag.retrieve import Retriever
from lorarag.scenarios.records import Scenario, poison, presented_as_retrieved


class ScenarioContexts:
    """Turns scenarios into (retrieved, reranked) contexts: poisoned retrieval or presented chunks.

    Retrieved mode: top-N from the clean index, `poison`ed into the scenario's world, then reranked
    to top-k (the reranker sees the perturbed chunk, as it would in that world); without a
    reranker the final sources are the poisoned top-k, so a removed chunk is replaced by the next
    candidate rather than leaving a hole.
    """

    def __init__(
        self, retriever: Retriever | None, reranker: Reranker | None, retrieval_cfg: RetrievalConfig, kb: dict[str, Chunk]
    ) -> None:
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
