"""The demo world: deterministic, versioned, bilingual, and written as a knowledge base (corpus,
questions with the organisation as cluster, older versions) that the KB loaders read like a user's.

`load_world_kb` is the one way the world-path tests (scenarios, rows, updates, no-shortcut) get
the world: through the files and loaders a run reads, not through the world's own objects."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from lorarag.core.config import validate_data
from lorarag.core.errors import ConfigError
from lorarag.rag.config import ChunkerConfig
from lorarag.scenarios.config import WorldConfig
from lorarag.scenarios.from_corpus import Versions, check_outdated, load_outdated
from lorarag.scenarios.kb_corpus import load_corpus
from lorarag.scenarios.kb_labels import find_answer, map_labels
from lorarag.scenarios.kb_questions import check_against_corpus, load_questions
from lorarag.scenarios.kb_records import KBCorpus, QAItem
from lorarag.scenarios.world import CURRENT_YEAR, Fact, World, build_world, write_world
from lorarag.scenarios.world_kb import WorldFiles, write_world_kb

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class WorldKB:
    """A demo world written as a knowledge base and read back as a run reads it (study/kb.py)."""

    world: World
    files: WorldFiles
    corpus: KBCorpus
    items: list[QAItem]  # label-mapped: relevant_ids are chunk ids
    older: dict[str, Versions]  # qid -> its older versions, oldest first (older.jsonl's order)

    @property
    def chunks(self) -> list:
        return list(self.corpus.chunks)

    def fact(self, fact_id: str) -> Fact:
        """The world's fact behind a qid (`org003/ceo`) or a scenario's fact id (`kb/org003/ceo`)."""
        qid = fact_id.removeprefix("kb/")
        return next(f for f in self.world.facts + self.world.unanswerable if f.fact_id == qid)


def load_world_kb(folder: Path, chunker: ChunkerConfig | None = None, **world) -> WorldKB:
    """`write_world_kb(WorldConfig(**world), folder)` read through the KB loaders, labels mapped and
    the older versions checked against the questions, as stage 1 of a run does."""
    cfg = WorldConfig(**world)
    files = write_world_kb(cfg, folder)
    corpus = load_corpus(files.corpus, chunker or ChunkerConfig())
    items, _ = map_labels(load_questions(files.questions), corpus)
    check_against_corpus(items, corpus)
    older = load_outdated(files.outdated)
    check_outdated(older, items, files.questions.path)
    return WorldKB(build_world(cfg), files, corpus, items, older)


def world_run_config(tmp: Path, **world):
    """configs/run/ci-tiny.yaml (its world, `data.world`, updated by `world`) with every path under `tmp`."""
    from lorarag.core.config import load_config
    from lorarag.trained.config import RunConfig

    cfg = load_config(REPO / "configs/run/ci-tiny.yaml", RunConfig)
    root = tmp / "runs" / cfg.name
    train = cfg.train.model_copy(
        update={
            "dataset": str(root / "sft/train.jsonl"),
            "val_dataset": str(root / "sft/val.jsonl"),
            "runs_dir": str(tmp / "runs/train"),
        }
    )
    data = cfg.data.model_copy(update={"world": cfg.data.world.model_copy(update=world)})
    return cfg.model_copy(
        update={
            "runs_dir": str(tmp / "runs"),
            "train": train,
            "data": data,
            "eval": cfg.eval.model_copy(update={"max_per_cell": None}),
        }
    )


@pytest.fixture(scope="module")
def world():
    return build_world(WorldConfig(seed=3, n_orgs=20))


def test_same_seed_same_world_other_seed_other_world(world):
    assert build_world(WorldConfig(seed=3, n_orgs=20)) == world
    assert build_world(WorldConfig(seed=4, n_orgs=20)).facts != world.facts


def test_each_fact_has_ten_distinct_phrasings_naming_the_org(world):
    for f in world.facts:
        assert len(set(f.questions)) == 10
        assert all(f.org in q for q in f.questions)


def test_org_names_do_not_share_a_stem(world):
    names = sorted({f.org for f in world.facts if f.language == "en"})
    stems = [n[:3] for n in names]
    assert len(stems) == len(set(stems))


def test_profiles_hold_current_values_archives_the_older_ones(world):
    docs = {d.doc_id: d.text for d in world.documents}
    for f in world.facts:
        profile = docs[f"orgs/{f.org_id}/profile.md"]
        assert f.statement() in profile
        assert (f.attribute == "founded") == (not f.history)
        for old, year in f.history:
            assert old != f.value
            assert f.archive_statement(old, year) in docs[f"orgs/{f.org_id}/archive-{year}.md"]
            assert old not in profile.split(f.org, 1)[1] or f.attribute == "product_version"


def test_versions_grow_over_time(world):
    for f in world.facts:
        if f.attribute == "product_version":
            majors = [int(v.split(".")[0]) for v, _ in f.history] + [int(f.value.split(".")[0])]
            assert majors == sorted(majors) and len(set(majors)) == 3


def test_chunks_are_paragraphs_with_unique_ids_and_archive_dates(world):
    chunks = world.chunks()
    assert len({c.chunk_id for c in chunks}) == len(chunks)
    for c in chunks:
        assert not c.text.startswith("#")
        if "archive-" in c.doc_id:
            assert c.date == c.doc_id.rsplit("-", 1)[1][:4]
        else:
            assert c.date is None


def test_write_world_writes_markdown(tmp_path, world):
    corpus = write_world(world, tmp_path)
    files = sorted(corpus.rglob("*.md"))
    assert len(files) == len(world.documents)
    assert (tmp_path / "facts.jsonl").read_text(encoding="utf-8").count("\n") == len(world.facts) + len(world.unanswerable)


def test_bad_world_config_is_a_one_line_error():
    with pytest.raises(ConfigError, match="mascot"):
        validate_data({"attributes": ["ceo", "mascot"]}, WorldConfig, "world")
    with pytest.raises(ConfigError, match="wordings"):  # the templates have ten wordings, a test needs two
        validate_data({"wordings": 11}, WorldConfig, "world")
    with pytest.raises(ConfigError, match="known_fraction"):  # the split is the run's (data.splits), not the world's
        validate_data({"known_fraction": 0.5}, WorldConfig, "world")


def test_a_world_larger_than_the_vocabulary_is_a_one_line_config_error():
    from lorarag.core.errors import ConfigError
    from lorarag.scenarios.config import WorldConfig
    from lorarag.scenarios.world import build_world

    with pytest.raises(ConfigError, match="world.n_orgs: 400 is too many"):
        build_world(WorldConfig(n_orgs=400))


# The seed-0 demo world's first facts as the 36-stem vocabulary named them (read off that code).
SMALL_HEAD = [
    ("Kestuna Robotics", "ceo", "Jonas Tanaka"),
    ("Kestuna Robotics", "headquarters", "Tampere"),
    ("Kestuna Robotics", "founded", "1980"),
]


def test_large_worlds_are_named_without_changing_the_small_ones():
    """Past the first 36 English stems and 24 Chinese characters more are drawn, only when needed:
    a 150-organisation world has 150 distinct names, one per stem prefix / character pair, and the
    demo's 30-organisation world is the one it always was (its first facts, pinned)."""
    from lorarag.scenarios.config import WorldConfig
    from lorarag.scenarios.world import build_world

    big = build_world(WorldConfig(seed=0, n_orgs=150))
    orgs = sorted({f.org for f in big.facts})
    assert len(orgs) == 150 and len(big.facts) == 750
    en = [o for o in orgs if o.isascii()]
    assert len({o[:3] for o in en}) == len(en)  # no two English names share a stem prefix
    zh = [o for o in orgs if not o.isascii()]
    chars = [ch for o in zh for ch in o[:2]]
    assert len(set(chars)) == len(chars)  # no two Chinese names share a character
    small = build_world(WorldConfig(seed=0, n_orgs=30))
    assert [(f.org, f.attribute, f.value) for f in small.facts[:3]] == SMALL_HEAD


# ---------------------------------------------------------------------------------------
# The world written as a knowledge base (scenarios/world_kb.py) and read by the KB loaders.
# ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def wkb(tmp_path_factory):
    return load_world_kb(tmp_path_factory.mktemp("world-kb"), seed=3, n_orgs=8, wordings=4)


def test_the_world_kb_is_three_files_the_kb_loaders_read(wkb, tmp_path):
    """8 organisations (zh_fraction 0.2: round(1.6) = 2 Chinese) x 5 attributes: 40 profile paragraphs,
    each one BEIR document and one chunk; 40 questions + 8 unanswerable; 8 x 4 facts with a history
    (the founding year has none), two older versions each (64 lines); the same seed writes the same bytes."""
    assert [p.name for p in wkb.files.paths] == ["corpus.jsonl", "questions.jsonl", "older.jsonl"]
    assert (wkb.files.corpus.kind, wkb.files.questions.kind) == ("beir", "jsonl")
    assert (len(wkb.corpus.documents), len(wkb.corpus.chunks)) == (40, 40)
    assert (len(wkb.items), sum(it.unanswerable for it in wkb.items), len(wkb.older)) == (48, 8, 32)
    assert Path(wkb.files.outdated).read_text(encoding="utf-8").count("\n") == sum(map(len, wkb.older.values())) == 64
    assert sum(it.language == "zh" for it in wkb.items) == 2 * 6
    rows = [json.loads(x) for x in Path(wkb.files.corpus.path).read_text(encoding="utf-8").splitlines()]
    assert all(r["title"] == "" and r["_id"].startswith("orgs/org") and "/profile#" in r["_id"] for r in rows)
    again = write_world_kb(WorldConfig(seed=3, n_orgs=8, wordings=4), tmp_path)
    assert [p.read_bytes() for p in again.paths] == [p.read_bytes() for p in wkb.files.paths]


def test_every_facts_relevant_chunk_is_its_profile_paragraph_and_holds_its_answer(wkb):
    by_id = {c.chunk_id: c for c in wkb.corpus.chunks}
    for it in (x for x in wkb.items if not x.unanswerable):
        f = wkb.fact(it.qid)
        assert it.answers == f.gold_answers and it.language == f.language
        (cid,) = it.relevant_ids
        chunk = by_id[cid]
        assert chunk.doc_id == f"orgs/{f.org_id}/profile#{f.attribute}" and chunk.text == f.statement()
        assert find_answer(chunk.text, it.answers)


def test_each_question_carries_its_org_as_cluster_and_the_worlds_wordings(wkb):
    for it in wkb.items:
        f = wkb.fact(it.qid)
        assert it.cluster == f.org_id == it.qid.split("/")[0]
        assert it.all_wordings == f.questions[:4]  # world.wordings 4: the question and 3 paraphrases
    assert {it.cluster for it in wkb.items} == {f"org{i:03d}" for i in range(8)}


def test_older_versions_hold_their_older_answer_and_are_dated(wkb):
    """Each fact with a history is given both its older values, oldest first: the archives of
    CURRENT_YEAR - 3 and CURRENT_YEAR - 1, each in its archive's sentence."""
    assert CURRENT_YEAR - 3 == 2021 and CURRENT_YEAR - 1 == 2023
    facts = [f for f in wkb.world.facts if f.history]
    assert {f.fact_id for f in facts} == set(wkb.older) and all(f.attribute != "founded" for f in facts)
    for f in facts:
        versions = wkb.older[f.fact_id]
        assert [(o.answer, o.date) for o in versions] == list(f.history) and [o.date for o in versions] == ["2021", "2023"]
        assert len({o.answer for o in versions} | {f.value}) == 3  # two older values, neither the current one
        for old in versions:
            # the current passage's template with the older value: the form does not tell; the year is the date
            assert old.qid == f.fact_id and old.text == f.statement(old.answer) and old.date not in old.text
            assert find_answer(old.text, (old.answer,)) and not find_answer(old.text, f.gold_answers)


def test_unanswerable_questions_have_no_answers_and_no_relevant_ids(wkb):
    un = [it for it in wkb.items if it.unanswerable]
    assert sorted(it.qid for it in un) == [f"org{i:03d}/employees" for i in range(8)]
    assert all(it.answers == () and it.relevant_ids == () and it.labels == () for it in un)
    assert all(len(it.all_wordings) == 4 and it.cluster == it.qid.split("/")[0] for it in un)
