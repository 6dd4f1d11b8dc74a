"""Stages 1, 3 and 4 of a run over a user's knowledge base (`data:` in the run config).

1 data       the demo world written as a KB (`data.world`: scenarios/world_kb.py) or the user's files;
             corpus -> chunks (the run's chunker), questions -> labels mapped to chunk ids
             (`<run>/data/labels.jsonl`), seeded splits by fact (`<run>/data/splits/`), the KB's
             chunks (`<run>/data/chunks.jsonl`); every input and written file is hashed into run.json
3 scenarios  test: known (taught) and never-learned facts x `eval.scenarios` over the whole KB (a
             known fact taught in its older version on the `update` cell only: kb_updates.py), a
             known item asked in the wording training leaves out (scenarios/kb_wordings.py);
             dev: the gate's known-dev and never-learned-dev questions, each in every wording
4 train      SFT rows from the taught facts (train/sft.py), leak-checked against the held-out
             facts, the known items' held-out test wordings and the test scenarios' passages,
             written to `train.dataset` and checked again as read back (train and val)
`<run>/data/summary.json` records what the report must say: the label rules used, the split sizes,
how many wordings each taught question is trained in, how many known test items are asked in a
wording training never used, and what had to be left out.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from lorarag.eval.shortcut import context_probes
from lorarag.eval.stats import nan_to_none
from lorarag.rag.records import Chunk, write_jsonl
from lorarag.scenarios.config import CorpusSource, QuestionSource
from lorarag.scenarios.from_corpus import OlderValue, Versions, check_outdated, corpus_scenarios, load_outdated, undated
from lorarag.scenarios.kb_corpus import load_corpus
from lorarag.scenarios.kb_labels import map_labels
from lorarag.scenarios.kb_questions import check_against_corpus, load_questions
from lorarag.scenarios.kb_records import KBCorpus, QAItem
from lorarag.scenarios.kb_splits import HELD_OUT, RETRIEVAL_ONLY, save_splits, split_by_fact
from lorarag.scenarios.kb_updates import asked_updates, stale_taught
from lorarag.scenarios.kb_wordings import KnownWording, as_tested, held_out, plan_wordings, training_groups, wording_summary
from lorarag.scenarios.perturb import Searcher, bm25_searcher
from lorarag.scenarios.records import Scenario, save_scenarios
from lorarag.scenarios.world_kb import write_world_kb
from lorarag.study.leaks import check_dev_wordings, check_written_wordings
from lorarag.study.prepare import sample_cells
from lorarag.study.run_folder import Echo, Paths
from lorarag.study.training import write_rag_sft
from lorarag.train.sft import build_rows, edited_chunks, leak_check, summary, tested_claims, write_sft
from lorarag.trained.config import RunConfig

SUMMARY = "summary.json"


@dataclass
class KB:
    """A loaded, labelled and split knowledge base, and the files behind it."""

    corpus: KBCorpus
    groups: dict[str, list[QAItem]]
    outdated: dict[str, Versions]
    files: list[Path]
    summary: dict = field(default_factory=dict)
    generated: frozenset[str] = frozenset()  # qids whose wordings besides the question data.paraphrase wrote
    stale: dict[str, OlderValue] = field(default_factory=dict)  # taught in the older version (kb_updates)

    @property
    def chunks(self) -> list[Chunk]:
        return list(self.corpus.chunks)

    @property
    def n_documents(self) -> int:
        return len(self.corpus.documents)


@dataclass(frozen=True)
class Sources:
    """The run's knowledge base files: the user's, or those the demo world wrote."""

    corpus: CorpusSource
    questions: QuestionSource
    outdated: str | None


def sources(cfg: RunConfig, paths: Paths) -> Sources:
    """`data:`'s corpus, questions and older versions; with `data.world` the world is written first."""
    d = cfg.data
    if d.world is not None:
        w = write_world_kb(d.world, paths.world)
        return Sources(w.corpus, w.questions, w.outdated)
    assert d.corpus is not None and d.questions is not None  # DataConfig's validator: world or both
    return Sources(d.corpus, d.questions, d.outdated)


def input_files(src: Sources) -> list[Path]:
    """The data files of the run (hashed into run.json)."""
    files = [Path(src.corpus.path), Path(src.questions.path)]
    if src.questions.kind == "beir":
        files.append(Path(src.questions.path) / "qrels" / f"{src.questions.split}.tsv")
    if src.outdated:
        files.append(Path(src.outdated))
    return files


def prepare_kb(cfg: RunConfig, paths: Paths) -> KB:
    """Stage 1 (see the module docstring)."""
    d, src = cfg.data, sources(cfg, paths)
    corpus = load_corpus(src.corpus, cfg.rag.chunker)
    items, mapping = map_labels(load_questions(src.questions), corpus)
    check_against_corpus(items, corpus)
    outdated = load_outdated(src.outdated) if src.outdated else {}
    check_outdated(outdated, items, src.questions.path)
    groups = split_by_fact(items, d.splits)
    stale = stale_taught(groups, outdated, d.update_fraction, d.splits.seed)
    out = paths.root / "data"
    write_jsonl(out / "labels.jsonl", mapping)
    write_jsonl(out / "chunks.jsonl", corpus.chunks)
    files = [
        *input_files(src),
        out / "labels.jsonl",
        out / "chunks.jsonl",
        *save_splits(groups, out / "splits", d.splits.seed),
    ]
    rules: dict[str, int] = {}
    for m in mapping:
        rules[m.rule] = rules.get(m.rule, 0) + 1
    kb = KB(
        corpus,
        groups,
        outdated,
        files,
        {
            "documents": len(corpus.documents),
            "chunks": len(corpus.chunks),
            "left_out_files": list(corpus.problems),
            "questions": len(items),
            "label_rules": rules,
            "splits": {g: len(v) for g, v in groups.items()},
            "updates": {
                "taught_older": len(stale),
                "tested": len(asked_updates(groups, stale)),
                "older_versions": sum(map(len, outdated.values())),
                "fraction": d.update_fraction,
            },
        },
        stale=stale,
    )
    _write_summary(paths, kb.summary)
    return kb


def _write_summary(paths: Paths, summary: dict) -> None:
    (paths.root / "data").mkdir(parents=True, exist_ok=True)
    (paths.root / "data" / SUMMARY).write_text(json.dumps(summary, indent=1, ensure_ascii=False), encoding="utf-8")


def read_summary(root: Path) -> dict:
    """`<run>/data/summary.json`, or {} for a run without one."""
    p = root / "data" / SUMMARY
    return json.loads(p.read_text(encoding="utf-8")) if p.is_file() else {}


def wording_plan(cfg: RunConfig, kb: KB) -> dict[str, KnownWording]:
    """Which wording each known test item is asked in and which its SFT rows use (seeded by
    `data.splits.seed`, stable per item)."""
    return plan_wordings(kb.groups, cfg.data.splits.seed, kb.generated)


def _dev(cfg: RunConfig, kb: KB, group: str, knowledge: str, seed: int, plan: dict[str, KnownWording]) -> list[Scenario]:
    """The gate's dev scenarios of `group`: a known dev fact in its held-out wording where it has one
    (the test's condition), else in every wording; a never-learned one in every wording."""
    items = [it for it in kb.groups[group] if it.answers]
    random.Random(seed).shuffle(items)
    sc = corpus_scenarios(
        items[: cfg.calibration.max_items],
        kb.chunks,
        name="kb",
        knowledge=knowledge,
        seed=seed,
        types=("consistent",),
        distractors=0,
    )
    by = {f"kb/{it.qid}": it for it in items}

    def asked(it: QAItem) -> tuple[str, ...]:
        p = plan.get(it.qid)
        return (p.test,) if p is not None and p.held_out else it.all_wordings

    return [replace(s, question=w, qid=f"{s.qid}/w{i}", phrasing=i) for s in sc for i, w in enumerate(asked(by[s.fact_id]))]


def kb_scenarios(
    cfg: RunConfig, kb: KB, paths: Paths, search: Searcher | None = None
) -> tuple[list[Scenario], list[Scenario], list[Scenario]]:
    """Stage 3: (test, dev known, dev never-learned) scenarios, saved as JSONL; distractors from
    `search` (default: BM25 over the KB's chunks)."""
    d, distract = cfg.data, cfg.train.sft.distractors if cfg.train.sft else 1
    common = dict(
        name="kb",
        seed=cfg.seed,
        distractors=distract,
        types=cfg.eval.scenarios,
        outdated=kb.outdated,
        conflicts_per_item=d.conflicts_per_item,
        conflict_seed=d.splits.seed,
        search=search or bm25_searcher(kb.chunks),
    )
    plan = wording_plan(cfg, kb)
    test = corpus_scenarios(
        as_tested(kb.groups["known"], plan), kb.chunks, knowledge="known", stale=kb.stale, snapshot=d.snapshot, **common
    )
    test += corpus_scenarios(kb.groups["unseen"], kb.chunks, knowledge="unknown", **common)
    test = test if d.snapshot is not None else undated(test)
    test = sample_cells([s for s in test if s.knowledge in cfg.eval.knowledge], cfg.eval.max_per_cell, cfg.eval.seed)
    dev_known = _dev(cfg, kb, "known_dev", "known", cfg.seed + 1, plan)
    dev_unseen = _dev(cfg, kb, "unseen_dev", "unknown", cfg.seed + 2, plan)
    check_dev_wordings([*dev_known, *dev_unseen], held_out(plan, {it.qid for it in kb.groups["known"]}))
    save_scenarios(paths.scenarios / "test.jsonl", test)
    save_scenarios(paths.scenarios / "dev-known.jsonl", dev_known)
    save_scenarios(paths.scenarios / "dev-unseen.jsonl", dev_unseen)
    scored = {"known": kb.groups["known"], "unknown": kb.groups["unseen"]}
    kb.summary["test_items"] = {
        f"{s}/{k}": sum(x.scenario == s and x.knowledge == k for x in test)
        for s in cfg.eval.scenarios
        for k in cfg.eval.knowledge
    }
    kb.summary["without_factual_error"] = (
        {
            k: len(
                {it.qid for it in v if it.answers}
                - {x.fact_id.removeprefix("kb/") for x in test if x.scenario == "factual_error"}
            )
            for k, v in scored.items()
        }
        if cfg.eval.max_per_cell is None
        else None
    )  # a sample leaves items out anyway
    kb.summary["test_wordings"] = wording_summary(
        plan, {s.fact_id.removeprefix("kb/") for s in test if s.knowledge == "known"}
    )
    kb.summary["shortcuts"] = {cell: nan_to_none(asdict(p)) for cell, p in context_probes(test).items()}
    _write_summary(paths, kb.summary)
    return test, dev_known, dev_unseen


def build_kb_sft(
    cfg: RunConfig, kb: KB, test: list[Scenario], echo: Echo, searcher: Callable[[Sequence[Chunk]], Searcher] = bm25_searcher
) -> None:
    """Stage 4's data: the SFT rows from the KB, leak-checked, written to `train.dataset`."""
    d = cfg.data
    passages = [p.text for s in test for p in s.presented if p.replaces]
    irrelevant: dict[str, set[str]] = {}  # the test's irrelevant chunks per fact: no training row shows them
    for s in test:
        if s.scenario == "irrelevant":
            irrelevant.setdefault(s.fact_id, set()).update(p.chunk_id for p in s.presented)
    plan = wording_plan(cfg, kb)
    wordings = held_out(plan)
    rows, val, stats = build_rows(
        training_groups(kb.groups, plan),
        kb.chunks,
        cfg.train.sft,
        conflict_seed=d.splits.seed,
        conflicts_per_item=d.conflicts_per_item,
        outdated=kb.outdated,
        test_passages=passages,
        test_irrelevant=irrelevant,
        searcher=searcher,
        stale=kb.stale,
        snapshot=d.snapshot,
        test_claims=tested_claims(test),
        tested_chunks=edited_chunks(test),
    )
    held = [it for g in HELD_OUT for it in kb.groups[g]]
    by_id = {c.chunk_id: c for c in kb.chunks}
    leak_check(rows, held, by_id, passages, wordings)
    write_sft(rows, cfg.train.dataset)
    if cfg.train.val_dataset:
        write_sft(val, cfg.train.val_dataset)
    check_written_wordings(cfg, wordings)
    kb.summary["sft"] = {"rows": len(rows), **summary(rows), **stats}
    _write_summary(Paths(Path(cfg.runs_dir) / cfg.name), kb.summary)
    tw = kb.summary.get("test_wordings") or {}
    echo(f"          SFT: {len(rows)} rows {summary(rows)}; trained wordings per taught question {stats['wordings']}")
    if stats["edited_twin_of_test"]:
        echo(
            f"          {stats['edited_twin_of_test']} flawed context(s) left out of training: they edit a chunk a "
            f"flawed test context edits (the other chunks' edits teach detection)"
        )
    if stats["same_claim_as_test"]:
        echo(
            f"          {stats['same_claim_as_test']} flawed context(s) left out of training: they assert the wrong "
            f"value a test context of the same fact asserts"
        )
    if tw:
        by = tw["by"]
        echo(
            f"          known test items asked in a wording training never used: {tw['held_out']} of {tw['items']} "
            f"(one of the set's wordings held out: {by['set']}; the set's own held out, generated ones trained: "
            f"{by['paraphrase']}); in a trained wording: {by['trained']}"
        )
    if kb.groups[RETRIEVAL_ONLY]:
        echo(f"          {len(kb.groups[RETRIEVAL_ONLY])} question(s) without answers: retrieval only")
    write_rag_sft(cfg, rows, val, kb.chunks, lambda rs: leak_check(rs, held, by_id, passages, wordings), echo)
