"""Dated sources (`data.snapshot`): every prompt shows a source's date, an update is dated after the
year the LoRA's knowledge base is current to, and the leak and overlap checks still see the passage
behind the date label. Without a snapshot every source is shown undated."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lorarag.core.config import load_config
from lorarag.fallback.format import SourceText, rag_user_turn
from lorarag.rag.config import PromptConfig
from lorarag.rag.prompt import PromptBuilder, prompt_passages
from lorarag.rag.records import Chunk, Retrieved
from lorarag.scenarios.config import DataConfig
from lorarag.scenarios.from_corpus import corpus_scenarios, undated
from lorarag.scenarios.kb_splits import split_by_fact
from lorarag.scenarios.kb_updates import asked_updates, stale_taught
from lorarag.train.config import SFTConfig
from lorarag.train.sft import LeakError, build_rows, leak_check
from lorarag.trained.config import RunConfig
from tests.test_kb_updates import SPLIT, _kb

TEXT = "Since 2027 the Kelso lighthouse keeper is Ann Vale."


def test_both_prompts_show_a_date_and_the_checks_read_the_passage_behind_it():
    lora = rag_user_turn("Who keeps it?", [SourceText(TEXT, "2027"), SourceText("The market opens on Mondays.")])
    assert f"[S1] (dated 2027) {TEXT}" in lora and "[S2] The market opens on Mondays." in lora
    assert prompt_passages(lora) == [TEXT, "The market opens on Mondays."]
    chunk = Chunk("c1", "d1", "kelso.md", TEXT, 0, len(TEXT), date="2027")
    built = PromptBuilder(PromptConfig()).build("Who keeps it?", [Retrieved(chunk, 1.0, 1, "presented")])
    user = built.user
    assert f"(kelso.md) (dated 2027) {TEXT}" in user and prompt_passages(user) == [TEXT]
    # a date cannot forge another source's label or open a nested label of its own
    odd = rag_user_turn("?", [SourceText(TEXT, "2027) [S9] (x")])
    assert prompt_passages(odd) == [TEXT] and "[S9]" not in odd.split("\n")[1]


def test_a_dated_held_out_passage_is_still_a_leak():
    chunks, items, _ = _kb()
    held = items[:1]
    row = {
        "messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": rag_user_turn("Who?", [SourceText(chunks[0].text, "2026")])},
            {"role": "assistant", "content": "a"},
        ]
    }
    with pytest.raises(LeakError, match="held-out q0"):
        leak_check([row], held, {c.chunk_id: c for c in chunks})


def test_an_update_is_dated_after_the_snapshot_and_an_older_version_before_it():
    chunks, items, older = _kb()
    groups = split_by_fact(items, SPLIT)
    stale = stale_taught(groups, older, 1.0, 0)
    test = corpus_scenarios(
        groups["known"], chunks, name="kb", knowledge="known", stale=stale, types=("update",), snapshot=2024
    )
    years = {p.date for s in test for p in s.presented if p.chunk_id.startswith("c")}
    assert test and years <= {"2025", "2026", "2027"} and len(years) > 1  # one to three years after, per fact
    plain = corpus_scenarios(groups["known"], chunks, name="kb", knowledge="known", stale=stale, types=("update",))
    assert {p.date for s in plain for p in s.presented} == {None}  # the chunk's own date: none here
    old = corpus_scenarios(groups["known_dev"], chunks, name="kb", types=("outdated",), outdated=older)
    assert {p.date for s in old for p in s.presented if p.replaces} == {"2019"}
    assert {p.date for s in undated(old) for p in s.presented} == {None}


def test_training_rows_show_dates_only_with_a_snapshot():
    chunks, items, older = _kb()
    groups = split_by_fact(items, SPLIT)
    stale = stale_taught(groups, older, 0.5, 0)
    assert set(stale) - asked_updates(groups, stale)  # some update rows to train the judgement
    cfg = SFTConfig(seed=0, knowledge_repeats=1, distractors=1)
    dated, _, _ = build_rows(groups, chunks, cfg, conflict_seed=0, outdated=older, stale=stale, snapshot=2024)
    label = re.compile(r"\(dated (\d{4})\)")

    def years(rows, verdict):
        return {int(y) for r in rows if r.verdict == verdict for y in label.findall(dict(r.messages)["user"])}

    updates = [r for r in dated if r.kind == "rag" and r.fact_id.removeprefix("kb/") in stale]
    assert updates and years(updates, "supported") and min(years(updates, "supported")) > 2024
    assert years(dated, "outdated") == {2019}
    assert not years(dated, "conflicting")  # a wrong current paragraph is shown as the KB holds it: undated
    plain, _, _ = build_rows(groups, chunks, cfg, conflict_seed=0, outdated=older, stale=stale)
    assert not any("(dated" in dict(r.messages).get("user", "") for r in plain)


def test_the_snapshot_is_a_data_setting():
    d = DataConfig.model_validate(
        {"corpus": {"kind": "folder", "path": "c"}, "questions": {"kind": "jsonl", "path": "q.jsonl"}, "snapshot": 2024}
    )
    assert d.snapshot == 2024
    with pytest.raises(ValueError):
        DataConfig.model_validate(
            {
                "corpus": {"kind": "folder", "path": "c"},
                "questions": {"kind": "jsonl", "path": "q.jsonl"},
                "snapshot": "last year",
            }
        )


def test_update_twins_date_a_factual_error_passage_into_a_right_newer_source():
    chunks, items, older = _kb()
    groups = split_by_fact(items, SPLIT)
    label = re.compile(r"\(dated (\d{4})\) (.*)")
    plain_cfg = SFTConfig(seed=0, knowledge_repeats=1, distractors=1)
    plain, _, _ = build_rows(groups, chunks, plain_cfg, conflict_seed=0, outdated=older, snapshot=2024)
    twins, _, stats = build_rows(
        groups,
        chunks,
        SFTConfig(seed=0, knowledge_repeats=1, distractors=1, update_twins=1.0),
        conflict_seed=0,
        outdated=older,
        snapshot=2024,
    )
    wrong = {}  # fact -> the substituted passage its factual-error row shows, undated
    for r in plain:
        if r.verdict == "conflicting" and r.scenario.knowledge == "known":
            wrong[r.fact_id] = next(p.text for p in r.scenario.presented if p.replaces)
    new = [r for r in twins if r.verdict == "supported" and label.search(dict(r.messages)["user"])]
    assert wrong and stats["update_twins"] == len(wrong) == len({r.fact_id for r in new})
    for r in new:
        year, text = label.search(dict(r.messages)["user"]).groups()
        assert int(year) > 2024 and text == wrong[r.fact_id]  # the same passage, dated newer
        memory = r.scenario.superseded[0]
        reply = dict(r.messages)["assistant"]
        # the taught value is stated as memory, the passage's value is the answer
        assert f"memory: {memory}" in reply and reply.endswith(f"answer: {r.scenario.context_answer}")
        assert memory in {a for it in items for a in it.answers} and r.scenario.context_answer != memory
    assert len(twins) - len(plain) == len(new)  # the twins are added; every other row is as before
    with pytest.raises(ValueError, match="update_twins needs data.snapshot"):  # never dropped silently
        build_rows(groups, chunks, SFTConfig(update_twins=0.5), conflict_seed=0, outdated=older)
    raw = load_config(Path(__file__).resolve().parent.parent / "configs/run/ci-tiny.yaml", RunConfig).model_dump()
    raw["train"]["sft"] = {**(raw["train"]["sft"] or {}), "update_twins": 0.5}
    with pytest.raises(ValueError, match="update_twins: a twin is told from a factual error by its date"):
        RunConfig.model_validate({**raw, "data": {**raw["data"], "snapshot": None}})
    assert RunConfig.model_validate({**raw, "data": {**raw["data"], "snapshot": 2024}}).train.sft.update_twins == 0.5
