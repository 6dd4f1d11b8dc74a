"""Stages 1-3 of a run: the demo world, the index of a run's chunks (the clean knowledge base), the scenarios."""

from __future__ import annotations

import random

from lorarag.rag.config import IndexConfig
from lorarag.rag.embed import Embedder, make_embedder
from lorarag.rag.index import build_from_chunks
from lorarag.rag.records import Chunk
from lorarag.rag.retrieve import Retriever, load_retriever
from lorarag.scenarios.from_world import ask_in_phrasings, index_world, world_scenarios
from lorarag.scenarios.records import Scenario, save_scenarios
from lorarag.scenarios.world import World, build_world, write_world
from lorarag.study.config import RunConfig
from lorarag.train.sft import trained_contexts
from lorarag.study.layout import Paths


def make_world(cfg: RunConfig, paths: Paths) -> World:
    """Generate the demo world and write its corpus (deterministic by `train.world.seed`)."""
    world = build_world(cfg.train.world)
    write_world(world, paths.world)
    return world


def index_chunks(cfg: RunConfig, chunks: list[Chunk], n_documents: int, index_cfg: IndexConfig,
                 embedder: Embedder | None = None) -> Retriever:
    """Index `chunks` under `index_cfg.dir` with the run's retrieval settings; open a retriever
    (`embedder`: an already loaded one to reuse, else one is built when the index is dense)."""
    if index_cfg.dense is not None and embedder is None:
        embedder = make_embedder(cfg.rag.embedder)
    build_from_chunks(chunks, index_cfg, embedder=embedder, embedder_cfg=cfg.rag.embedder, n_documents=n_documents)
    return load_retriever(index_cfg, cfg.rag.retrieval, cfg.rag.embedder, embedder=embedder)


def sample_cells(items: list[Scenario], per_cell: int | None, seed: int) -> list[Scenario]:
    """A seeded sample of at most `per_cell` items per (scenario, knowledge) cell."""
    if per_cell is None:
        return items
    cells: dict[tuple[str, str], list[Scenario]] = {}
    for s in items:
        cells.setdefault((s.scenario, s.knowledge), []).append(s)
    out: list[Scenario] = []
    for key in sorted(cells):
        group = sorted(cells[key], key=lambda s: s.qid)
        random.Random(f"{seed}/{key[0]}/{key[1]}").shuffle(group)
        out.extend(sorted(group[:per_cell], key=lambda s: s.qid))
    return out


def make_scenarios(cfg: RunConfig, world: World, paths: Paths) -> tuple[list[Scenario], list[Scenario], list[Scenario]]:
    """(test, dev known, dev never-learned) scenarios of the world, saved as JSONL."""
    wi = index_world(world)
    undated = cfg.train.world.undated_outdated_fraction
    # what the SFT rows' contexts assert and show stays out of the test's flawed contexts
    trained = trained_contexts(world, cfg.train.sft)  # as study/training.build_sft builds the rows
    test = world_scenarios(world, wi, ["known", "unknown"], "test", seed=cfg.seed, undated_fraction=undated,
                           types=cfg.eval.scenarios, phrasings=cfg.eval.test_phrasings, trained=trained)
    test = sample_cells([s for s in test if s.knowledge in cfg.eval.knowledge], cfg.eval.max_per_cell,
                        cfg.eval.seed)
    dev = []
    for groups, seed in ((["known"], cfg.seed + 1), (["unknown_dev"], cfg.seed + 2)):
        items = world_scenarios(world, wi, groups, "dev", seed=seed, undated_fraction=undated,
                                types=cfg.calibration.scenarios)
        items = sorted(items, key=lambda s: s.qid)
        random.Random(seed).shuffle(items)
        dev.append(ask_in_phrasings(items[: cfg.calibration.max_items], world, cfg.dev_phrasings()))
    save_scenarios(paths.scenarios / "test.jsonl", test)
    save_scenarios(paths.scenarios / "dev-known.jsonl", dev[0])
    save_scenarios(paths.scenarios / "dev-unseen.jsonl", dev[1])
    return test, dev[0], dev[1]
