"""Where a run's knowledge comes from: a knowledge base (`data:`: the user's files, or the demo
world written as one).

It gives the pipeline the KB's chunks (stage 2 indexes them), the test and dev scenarios (stage 3)
and the SFT rows the LoRA is trained on (stage 4), plus the files that run.json hashes. The rows
are written and leak-checked at stage 3 every time (cheap, deterministic), so a reused adapter's
report still says what it was trained on, and its reuse is proven on their hashes. Where the
dev split's answers run to sentences, stage 3 warns that `read_support` withholds many right readings.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import replace
from functools import partial

from lorarag.fallback.policy import own_words
from lorarag.rag.generators.registry import build_generator
from lorarag.rag.records import Chunk
from lorarag.rag.retrieve import Retriever
from lorarag.scenarios.perturb import Searcher, bm25_searcher, retriever_searcher
from lorarag.scenarios.records import Scenario
from lorarag.study.kb import KB, build_kb_sft, kb_scenarios, prepare_kb
from lorarag.study.paraphrase import paraphrases_for, single_wording, tally, with_paraphrases
from lorarag.study.run_folder import Echo, Paths
from lorarag.trained.config import RunConfig

Split = tuple[list[Scenario], list[Scenario], list[Scenario]]  # test, dev known, dev never-learned


def pool_searcher(retriever: Retriever, pool: Sequence[Chunk]) -> Searcher:
    """`retriever` limited to the chunks of `pool` (the SFT rows' distractors)."""
    return retriever_searcher(retriever, {c.chunk_id for c in pool})


SENTENCE_WORDS = 3  # more own words than this in the median dev answer: answers are sentences, not spans


def read_support_cost(cfg: RunConfig, dev: Sequence[Scenario]) -> str | None:
    """A warning where `read_support` is on and the dev split's answers are sentences (median own words,
    `fallback.policy.own_words`, above SENTENCE_WORDS), else None. `read_support` keeps a base-model
    reading only where its own words occur in the sources: a span answer (a name, a year) is copied from
    them, a sentence is paraphrased, so most right readings are withheld (measured on ConflictNQ's
    sentence answers: docs/results.md)."""
    share = cfg.fallback.policy.read_support
    lengths = [len(own_words(s.question, s.gold_answers[0])) for s in dev if s.gold_answers]
    lora_rag = any(s.kind == "lora_rag" and not s.is_variant for s in cfg.systems)
    median = statistics.median(lengths) if lengths else 0
    if share is None or not lora_rag or median <= SENTENCE_WORDS:
        return None
    return (
        f"the dev split's answers are sentences ({median:g} words of their own, median): "
        f"fallback.policy.read_support ({share:g}) abstains where a reading's "
        "words are not in the sources, and withholds many right sentence readings; null keeps them, and "
        "answers unanswerable questions too"
    )


class KBSource:
    """A corpus + labelled questions (stage 1: `data`, study/kb.py)."""

    step = "data"
    what = "reading the corpus and the labelled questions"

    def __init__(self, cfg: RunConfig, paths: Paths) -> None:
        self.cfg, self.paths = cfg, paths
        self.kb = prepare_kb(cfg, paths)
        self.chunks = self.kb.chunks
        self.n_documents = self.kb.n_documents
        self.files = self.kb.files
        w = cfg.data.world
        self.seeds = {"splits": cfg.data.splits.seed, **({"world": w.seed} if w is not None else {})}

    def scenarios(self, echo: Echo, retriever: Retriever) -> Split:
        """Test and dev scenarios and the SFT rows; `data.distractors: retrieval` draws the
        distractors from `retriever` (the run's index, dense or hybrid as configured)."""
        if self.cfg.data.distractors == "retrieval":
            search, searcher = retriever_searcher(retriever), partial(pool_searcher, retriever)
        else:
            search, searcher = None, bm25_searcher
        self.kb = kb = self._paraphrased(echo)  # owners() then knows the generated wordings too
        split = kb_scenarios(self.cfg, kb, self.paths, search)
        cost = read_support_cost(self.cfg, [*split[1], *split[2]])
        if cost is not None:
            echo(f"          warning: {cost}")
        build_kb_sft(self.cfg, kb, split[0], echo, searcher)
        return split

    def _paraphrased(self, echo: Echo) -> KB:
        """The KB, its single-wording taught questions given generated wordings when enabled (a
        known one is then trained in those and tested in the set's own: scenarios/kb_wordings.py)."""
        para = self.cfg.data.paraphrase
        if not para.enabled or self.kb.generated:
            return self.kb
        gen_cfg = self.cfg.rag.generator
        rows = paraphrases_for(
            self.kb.groups,
            self.paths.root / "data",
            gen_cfg.model_dump(),
            para.prompts,
            lambda: build_generator(gen_cfg),
            para.max_new_tokens,
        )
        self.kb.summary["paraphrase"] = t = tally(rows)
        echo(
            f"          paraphrases: {t['kept']} of {t['replies']} kept for {t['questions']} single-wording "
            f"question(s); rejected {t['rejected']}"
        )
        return replace(
            self.kb,
            groups=with_paraphrases(self.kb.groups, rows),
            generated=frozenset(it.qid for it in single_wording(self.kb.groups)),
        )

    def owners(self) -> dict[str, tuple[str, str]]:
        """Every wording of every labelled question -> (its fact, its cluster: the item's `cluster`, else
        the document of its first relevant chunk), for the overlap check (the fact ids of study/kb.py's
        scenarios: `kb/<qid>`)."""
        doc = {c.chunk_id: c.doc_id for c in self.chunks}

        def cluster(it) -> str:
            return it.cluster or (doc.get(it.relevant_ids[0], f"kb/{it.qid}") if it.relevant_ids else f"kb/{it.qid}")

        return {
            w: (f"kb/{it.qid}", cluster(it)) for items in self.kb.groups.values() for it in items for w in it.all_wordings
        }
