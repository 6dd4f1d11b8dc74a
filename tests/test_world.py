"""The demo world: deterministic, versioned, bilingual, with disjoint groups and four phrasings."""

from __future__ import annotations

import pytest

from lorarag.core.config import validate_data
from lorarag.core.errors import ConfigError
from lorarag.scenarios.config import WorldConfig
from lorarag.scenarios.world import GROUPS, build_world, write_world


@pytest.fixture(scope="module")
def world():
    return build_world(WorldConfig(seed=3, n_orgs=20))


def test_same_seed_same_world_other_seed_other_world(world):
    assert build_world(WorldConfig(seed=3, n_orgs=20)) == world
    assert build_world(WorldConfig(seed=4, n_orgs=20)).facts != world.facts


def test_groups_sizes_and_languages(world):
    orgs = {f.org_id: f for f in world.facts}
    by_group = {g: sum(1 for f in orgs.values() if f.group == g) for g in GROUPS}
    # 20 orgs: known 0.5 -> 10, context_only 0.2 -> 4, the other 6 alternate unknown/unknown_dev.
    assert by_group == {"known": 10, "context_only": 4, "unknown_dev": 3, "unknown": 3}
    langs = [f.language for f in orgs.values()]
    assert langs.count("zh") == 4 and langs.count("en") == 16  # zh_fraction 0.2


def test_demo_world_leaves_chinese_out_of_never_learned_and_stratified_draw_does_not():
    """Seed 0, 30 organisations (the CPU demo's world): one draw puts its 6 Chinese organisations in
    known (2) and context-only (4); `stratify_languages` draws each language's groups with the same
    fractions: zh 6 -> known 3, context-only round(1.2) = 1, unknown 1, unknown_dev 1; en 24 -> 12,
    round(4.8) = 5, then 7 alternating unknown (4) / unknown_dev (3)."""
    from collections import Counter

    def counts(w):
        return Counter((f.group, f.language) for f in {f.org_id: f for f in w.facts}.values())

    plain = counts(build_world(WorldConfig(seed=0, n_orgs=30)))
    assert {g for g, lang in plain if lang == "zh"} == {"known", "context_only"}
    assert plain[("known", "zh")] == 2 and plain[("context_only", "zh")] == 4
    strat_world = build_world(WorldConfig(seed=0, n_orgs=30, stratify_languages=True))
    strat = counts(strat_world)
    assert strat == Counter({("known", "zh"): 3, ("context_only", "zh"): 1, ("unknown", "zh"): 1,
                             ("unknown_dev", "zh"): 1, ("known", "en"): 12, ("context_only", "en"): 5,
                             ("unknown", "en"): 4, ("unknown_dev", "en"): 3})
    # only the groups move: same organisations, same values
    plain_w = build_world(WorldConfig(seed=0, n_orgs=30))
    assert [(f.fact_id, f.value) for f in strat_world.facts] == [(f.fact_id, f.value) for f in plain_w.facts]


def test_each_fact_has_ten_distinct_phrasings_naming_the_org(world):
    for f in world.facts:
        assert len(set(f.questions)) == 10
        assert all(f.org in q for q in f.questions)


def test_closed_book_paraphrases_avoid_the_held_out_wording():
    """Phrasings 6-9 are trained closed-book: none may reuse the dev (2) or test (3) phrasing's
    distinctive words, or the held-out split would measure template overlap, not recall."""
    from lorarag.scenarios.world import QUESTIONS

    held_out = {"start operating", "home to", "latest annual", "most recent release", "current version number",
                "head offices", "founding year", "currently leads", "runs", "post most recently",
                "开始运营", "所在地", "年度净利润", "最新发布", "目前谁担任", "设在哪座", "创立年份", "领导"}
    for lang in QUESTIONS.values():
        for templates in lang.values():
            assert len(templates) == 10
            for t in templates[6:]:
                assert not [w for w in held_out if w in t], t


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
    with pytest.raises(ConfigError):
        validate_data({"known_fraction": 0.9, "context_only_fraction": 0.2}, WorldConfig, "world")


def test_a_world_larger_than_the_vocabulary_is_a_one_line_config_error():
    from lorarag.core.errors import ConfigError
    from lorarag.scenarios.config import WorldConfig
    from lorarag.scenarios.world import build_world

    with pytest.raises(ConfigError, match="world.n_orgs: 400 is too many"):
        build_world(WorldConfig(n_orgs=400))


# The seed-0 demo world's first facts as the 36-stem vocabulary named them (read off that code).
SMALL_HEAD = [("Kestuna Robotics", "ceo", "Jonas Tanaka"), ("Kestuna Robotics", "headquarters", "Tampere"),
              ("Kestuna Robotics", "founded", "1980")]


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
