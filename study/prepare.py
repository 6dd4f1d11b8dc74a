"""Stage 2 of a run: the index of the KB's chunks (the clean knowledge base); the seeded sample of test cells."""

from __future__ import annotations

import random

from lorarag.rag.config import IndexConfig
from lorarag.rag.embed import Embedder, make_embedder
from lorarag.rag.index.store import build_from_chunks
from lorarag.rag.records import Chunk
from lorarag.rag.retrieve import Retriever, load_retriever
from lorarag.scenarios.records import Scenario
from lorarag.trained.config import RunConfig


def index_chunks(
    cfg: RunConfig, chunks: list[Chunk], n_documents: int, index_cfg: IndexConfig, embedder: Embedder | None = None
) -> Retriever:
    """Index `chunks` under `index_cfg.dir` with the run's retrieval settings; open a retriever
    (`embedder`: an already loaded one to reuse, else one is built when the index is dense)."""
    if index_cfg.dense is not None and embedder is None:
        embedder = make_embedder(cfg.rag.embedder)
    build_from_chunks(chunks, index_cfg, embedder=embedder, embedder_cfg=cfg.rag.embedder, n_documents=n_documents)
    return load_retriever(index_cfg, cfg.rag.retrieval, cfg.rag.embedder, embedder=embedder)


def sample_cells(items: list[Scenario], per_cell: int | None, seed: int) -> list[Scenario]:
    """A seeded sample of at most `per_cell` items per (scenario, knowledge) cell, drawn in one seeded
    order of the facts of each knowledge group, so the cells ask the same facts where they can: a
    fact asked in one flawed cell has its chunk's edits kept out of training (train/sft.build_rows),
    and the fewer facts the flawed cells hold out, the more the LoRA learns detection from."""
    if per_cell is None:
        return items
    cells: dict[tuple[str, str], list[Scenario]] = {}
    for s in items:
        cells.setdefault((s.scenario, s.knowledge), []).append(s)
    rank: dict[str, dict[str, int]] = {}
    for knowledge in sorted({k for _, k in cells}):
        facts = sorted({s.fact_id for (_, k), group in cells.items() if k == knowledge for s in group})
        random.Random(f"{seed}/{knowledge}").shuffle(facts)
        rank[knowledge] = {f: i for i, f in enumerate(facts)}
    out: list[Scenario] = []
    for key in sorted(cells):
        group = sorted(cells[key], key=lambda s: (rank[key[1]][s.fact_id], s.qid))
        out.extend(sorted(group[:per_cell], key=lambda s: s.qid))
    return out
