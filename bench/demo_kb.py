"""The demo world as the benchmarks read it: written as a knowledge base (scenarios/world_kb.py)
and loaded by the KB's own loaders, labels mapped to chunks, so a benchmark measures the
study's data path and not a second one.

The world's questions carry each fact in `world.wordings` wordings (the question and its
paraphrases: `QAItem.all_wordings`), the organisation as the item's `cluster`, and one
unanswerable question per organisation.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lorarag.rag.config import ChunkerConfig
from lorarag.scenarios.config import CorpusSource, QuestionSource, SplitConfig, WorldConfig
from lorarag.scenarios.from_corpus import Versions, load_outdated
from lorarag.scenarios.kb_corpus import load_corpus
from lorarag.scenarios.kb_labels import map_labels
from lorarag.scenarios.kb_questions import load_questions
from lorarag.scenarios.kb_records import KBCorpus, QAItem
from lorarag.scenarios.kb_splits import split_by_fact
from lorarag.scenarios.world_kb import CORPUS, OLDER, QUESTIONS, write_world_kb
from lorarag.train.config import SFTConfig
from lorarag.train.sft import SFTRow, build_rows


@dataclass(frozen=True)
class WorldKB:
    """A written world, read back: its corpus (documents, chunks), labelled questions, older values."""

    corpus: KBCorpus
    items: list[QAItem]  # relevant_ids are chunk ids
    outdated: dict[str, Versions]  # fact id (`org003/ceo`) -> its older values (scenarios.from_corpus.load_outdated)


def load_world_kb(world: WorldConfig, chunker: ChunkerConfig, folder: str | Path, *, write: bool = True) -> WorldKB:
    """Write the world of `world` under `folder` and read it as a run's `data:` would; `write=False`
    reads the files an earlier call wrote there (processes started after it share them unwritten)."""
    folder = Path(folder)
    if write or not all((folder / name).is_file() for name in (CORPUS, QUESTIONS, OLDER)):
        write_world_kb(world, folder)
    corpus = load_corpus(CorpusSource(kind="beir", path=str(folder / CORPUS)), chunker)
    items, _ = map_labels(load_questions(QuestionSource(kind="jsonl", path=str(folder / QUESTIONS))), corpus)
    return WorldKB(corpus, items, load_outdated(str(folder / OLDER)))


def world_rows(kb: WorldKB, splits: SplitConfig, sft: SFTConfig) -> list[SFTRow]:
    """The SFT training rows of `kb` split by fact (every taught fact in all its wordings: no test
    wording is held out, these rows train no adapter that is evaluated)."""
    rows, _, _ = build_rows(
        split_by_fact(kb.items, splits), list(kb.corpus.chunks), sft, conflict_seed=splits.seed, outdated=kb.outdated
    )
    return rows
