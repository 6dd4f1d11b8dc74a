"""Held out by construction: no SFT row shows an edited copy of a flawed test passage's chunk under a
flawed verdict, on a SQuAD 2.0-shaped knowledge base (several questions a paragraph) through the
shipped KB recipe, at passage lengths of 8 to 400 tokens, in English and Chinese; and the leak check
refuses a twin planted by hand.

The reference for "edited twin" here is the plain rule, written apart from train/overlap.py: a
training source that is not the chunk itself and keeps, before and after one changed span, at least
60 % of the tokens of the longer of the two."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lorarag.core.config import load_config
from lorarag.trained.config import RunConfig
from tests.squad_shaped import write_squad

REPO = Path(__file__).resolve().parent.parent
FLAWED_VERDICTS = ("conflicting", "outdated")


def kb_recipe(tmp: Path, squad: Path, model: Path, name: str = "conflictnq-kb.yaml") -> RunConfig:
    """The shipped KB recipe with `data:` on the SQuAD file, every path under `tmp`, the tiny model."""
    cfg = load_config(REPO / "configs/run" / name, RunConfig)
    root = tmp / "runs" / cfg.name
    from lorarag.scenarios.config import CorpusSource, QuestionSource

    data = cfg.data.model_copy(
        update={
            "corpus": CorpusSource(kind="squad", path=str(squad)),
            "questions": QuestionSource(kind="squad", path=str(squad)),
        }
    )
    train = cfg.train.model_copy(
        update={
            "model": str(model),
            "dataset": str(root / "sft/train.jsonl"),
            "val_dataset": str(root / "sft/val.jsonl"),
            "runs_dir": str(tmp / "runs/train"),
        }
    )
    rag = cfg.rag.model_copy(
        update={
            "index": cfg.rag.index.model_copy(update={"dir": str(root / "index")}),
            "generator": cfg.rag.generator.model_copy(update={"model": str(model)}),
        }
    )
    return cfg.model_copy(
        update={"runs_dir": str(tmp / "runs"), "prepare_base": None, "data": data, "train": train, "rag": rag}
    )


def _tokens(text: str) -> list[str]:
    import re

    return re.findall(r"[\u4e00-\u9fff]|\w+|[^\w\s]", text.casefold())


def one_span_edit(source: str, chunk: str) -> bool:
    """`source` is `chunk` with one span changed: the tokens kept before and after it are >= 60 % of the
    longer of the two (a copy of similar length, not another passage that happens to end alike)."""
    s, c = _tokens(source), _tokens(chunk)
    if s == c:
        return False
    pre = next((i for i, (a, b) in enumerate(zip(s, c)) if a != b), min(len(s), len(c)))
    suf = next((i for i, (a, b) in enumerate(zip(reversed(s), reversed(c))) if a != b), min(len(s), len(c)))
    return min(pre + suf, min(len(s), len(c))) >= 0.6 * max(len(s), len(c))


def flawed_sources(rows: list[dict]) -> list[str]:
    from lorarag.fallback.format import parse_reply
    from lorarag.rag.prompt import prompt_passages

    out = []
    for r in rows:
        if parse_reply(r["messages"][-1]["content"]).verdict in FLAWED_VERDICTS:
            out += [line for m in r["messages"] if m["role"] == "user" for line in prompt_passages(m["content"])]
    return out


def _prepared(tmp: Path, lang: str, tokens: int, model: Path):
    from lorarag.rag.records import Chunk, read_jsonl
    from lorarag.scenarios.records import load_scenarios
    from lorarag.study.pipeline import prepare_rows
    from lorarag.train.sft import read_sft

    cfg = kb_recipe(tmp, write_squad(tmp / "data", lang=lang, tokens=tokens), model)
    lines: list[str] = []
    prepare_rows(cfg, echo=lines.append)  # refuses (ConfigError) on a twin, a leak or a labelled claim
    root = Path(cfg.runs_dir) / cfg.name
    chunks = {c.chunk_id: c.text for c in read_jsonl(root / "data/chunks.jsonl", Chunk)}
    test = load_scenarios(root / "scenarios/test.jsonl")
    rows = read_sft(cfg.train.dataset) + read_sft(cfg.train.val_dataset)
    return cfg, root, chunks, test, rows, lines


@pytest.mark.parametrize("lang,tokens", [("en", 8), ("en", 40), ("en", 400), ("zh", 8), ("zh", 40), ("zh", 400)])
def test_no_flawed_test_passage_has_an_edited_twin_labelled_flawed(tmp_path, tiny_models, lang, tokens):
    _, _, chunks, test, rows, lines = _prepared(tmp_path, lang, tokens, tiny_models["lm"])
    flawed = [s for s in test if s.scenario in ("factual_error", "outdated") and s.knowledge == "known"]
    assert flawed, "the recipe tests flawed known items"
    sources = flawed_sources(rows)
    assert sources, "detection is still taught, from the other chunks' edits"
    for s in flawed:
        for cid in s.relevant_ids:
            twins = [t for t in sources if one_span_edit(t, chunks[cid])]
            assert not twins, (s.qid, twins[:1])
    assert any("edit a chunk a flawed test context edits" in ln for ln in lines), lines


def test_fakes_keep_the_answers_type(tmp_path, tiny_models):
    """A person is replaced by a person, a place by a place, a year by a nearby year."""
    from tests.squad_shaped import PEOPLE_EN, PLACES_EN

    _, _, _, test, _, _ = _prepared(tmp_path, "en", 40, tiny_models["lm"])
    fakes = [(s.gold_answers[0], s.context_answer) for s in test if s.scenario == "factual_error"]
    assert fakes
    for gold, fake in fakes:
        if gold in PEOPLE_EN:
            assert fake in PEOPLE_EN, (gold, fake)
        elif gold in PLACES_EN:
            assert fake in PLACES_EN, (gold, fake)
        else:
            assert fake.isdigit() and 0 < abs(int(fake) - int(gold)) <= 30, (gold, fake)


def test_the_leak_check_refuses_an_edited_twin_planted_by_hand(tmp_path, tiny_models):
    """An edit of a tested chunk at another span than the test's, labelled conflicting for another
    question of the same paragraph: the run stops before training and names the item."""
    from lorarag.core.errors import ConfigError
    from lorarag.fallback.format import SYSTEM_RAG, SourceText, rag_user_turn
    from lorarag.study.leaks import check_test_contexts
    from lorarag.study.run_folder import Paths

    cfg, root, chunks, test, _, _ = _prepared(tmp_path, "en", 400, tiny_models["lm"])
    item = next(s for s in test if s.scenario == "factual_error" and s.knowledge == "known")
    edited = next(p.replaces for p in item.presented if p.replaces)  # the chunk the test passage edits
    chunk = chunks[edited]
    words = chunk.split(" ")
    k = len(words) // 2 if words[len(words) // 2] not in item.gold_answers[0] else len(words) // 2 + 1
    planted = " ".join(words[:k] + ["Zanzibar"] + words[k + 1 :])
    assert one_span_edit(planted, chunk)
    user = rag_user_turn(item.question, [SourceText(planted)])
    reply = f"memory: {item.gold_answers[0]} | source: Zanzibar | verdict: conflicting | answer: {item.gold_answers[0]}"
    with open(cfg.train.dataset, "a", encoding="utf-8") as f:
        f.write(
            json.dumps(
                {
                    "messages": [
                        {"role": "system", "content": SYSTEM_RAG},
                        {"role": "user", "content": user},
                        {"role": "assistant", "content": reply},
                    ]
                }
            )
            + "\n"
        )
    owners = {s.question: (s.fact_id, s.cluster) for s in test}
    # every tested factual error that edits the same chunk (another question of the same paragraph) is hit
    same = sorted(
        s.qid
        for s in test
        if (s.scenario, s.knowledge) == ("factual_error", "known") and edited in {p.replaces for p in s.presented}
    )
    with pytest.raises(
        ConfigError,
        match=rf"test item {same[0]}: its factual_error context is one the SFT rows "
        rf"show, verbatim or as an edited twin \({len(same)} of \d+ factual_error "
        r"\(known\)",
    ):
        check_test_contexts(cfg, Paths(root), test, owners, chunks, lambda _: None)
    table = json.loads((root / "data/overlap.json").read_text())
    assert {(r["scenario"], r["knowledge"]): r["edited"] for r in table}[("factual_error", "known")] == len(same)


def test_sampled_cells_ask_the_same_facts_so_few_chunks_are_held_out_of_training():
    """Ten known facts in three cells (outdated for eight of them), four items a cell: the consistent
    and factual-error cells draw the same four facts, the outdated cell the first four of the same
    seeded order that have an older version; the flawed cells together hold out at most 4 + 2 facts,
    never the 4 x 2 of two independent draws when they differ."""
    from lorarag.scenarios.records import PresentedChunk, Scenario
    from lorarag.study.prepare import sample_cells

    def sc(f: int, kind: str) -> Scenario:
        return Scenario(
            qid=f"kb/f{f}/{kind}",
            fact_id=f"kb/f{f}",
            question="q?",
            gold_answers=("a",),
            relevant_ids=(f"c{f}",),
            scenario=kind,
            presented=(PresentedChunk(f"c{f}", "t"),),
            context_answer="a",
        )

    items = [sc(f, k) for f in range(10) for k in ("consistent", "factual_error")]
    items += [sc(f, "outdated") for f in range(8)]
    out = sample_cells(items, 4, seed=0)
    facts = {k: {s.fact_id for s in out if s.scenario == k} for k in ("consistent", "factual_error", "outdated")}
    assert all(len(v) == 4 for v in facts.values())
    assert facts["consistent"] == facts["factual_error"]
    assert len(facts["factual_error"] | facts["outdated"]) <= 6
    assert sample_cells(items, 4, seed=0) == out and sample_cells(items, None, 0) == items


@pytest.mark.slow
def test_a_squad_shaped_kb_runs_end_to_end(tmp_path, tiny_models):
    """The reduced KB recipe (configs/run/ci-kb-tiny.yaml) on the SQuAD 2.0-shaped set, nothing else
    changed but the paths: every stage runs, every system answers every test item, and the headline
    reports the unanswerable cell."""
    from lorarag.scenarios.records import load_scenarios
    from lorarag.study.pipeline import run

    cfg = kb_recipe(
        tmp_path,
        write_squad(tmp_path / "data", lang="en", tokens=40, articles=10),
        tiny_models["lm"],
        name="ci-kb-tiny.yaml",
    )
    lines: list[str] = []
    table = run(cfg, echo=lines.append)
    assert [ln.split()[1] for ln in lines if ln.startswith("[")] == [
        "data",
        "index",
        "scenarios",
        "train",
        "calibrate",
        "evaluate",
        "report",
    ]
    root = Path(cfg.runs_dir) / cfg.name
    test = load_scenarios(root / "scenarios/test.jsonl")
    assert {"factual_error", "unanswerable"} <= {s.scenario for s in test}
    for s in cfg.systems:
        rows = [json.loads(x) for x in (root / "eval" / s.name / "results.jsonl").read_text().splitlines()]
        assert sorted(r["qid"] for r in rows) == sorted(x.qid for x in test)
    assert "### Abstention on unanswerable questions" in table
