"""`lorarag run` over a user's knowledge base (`data:`): config rules, dry runs of the shipped KB
configs, and the reduced CI config end to end on a tiny Qwen3 over a small set written here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lorarag.core.config import load_config
from lorarag.core.errors import ConfigError
from lorarag.trained.config import RunConfig, SystemConfig

REPO = Path(__file__).resolve().parent.parent
TOWNS = ["Elmira", "Dunmore", "Kelso", "Arden", "Brill", "Corfe", "Dover", "Eske", "Flint", "Garth", "Holt", "Ivel"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"]


def _kb_files(tmp: Path) -> dict[str, Path]:
    """A folder of Markdown documents, JSONL questions (two wordings for some, conflict passages
    for some, one unanswerable) and older versions of a few answers."""
    docs = tmp / "kb-docs"
    docs.mkdir()
    rows, old = [], []
    for i, town in enumerate(TOWNS):
        year, day = 1901 + 7 * i, DAYS[i % len(DAYS)]
        (docs / f"{town.lower()}.md").write_text(
            f"# {town}\n\nThe {town} lighthouse was first lit in {year}.\n\n"
            f"The {town} market is held every {day} on the square.\n",
            encoding="utf-8",
        )
        rows.append(
            {
                "id": f"{town}-light",
                "question": f"When was the {town} lighthouse first lit?",
                "answers": [str(year)],
                "relevant_ids": [f"{town.lower()}.md"],
                **({"paraphrases": [f"In which year did the {town} light start?"]} if i % 2 else {}),
                **(
                    {
                        "conflicts": [
                            {"text": f"The {town} lighthouse was first lit in {year + 40}.", "answer": str(year + 40)}
                        ]
                    }
                    if i % 3 == 0
                    else {}
                ),
            }
        )
        rows.append(
            {
                "id": f"{town}-market",
                "question": f"On which day is the {town} market held?",
                "answers": [day],
                "relevant_ids": [f"{town.lower()}.md"],
            }
        )
        if i % 2 == 0:
            old.append({"id": f"{town}-light", "answer": str(year - 3), "date": str(year - 3)})
    rows.append(
        {
            "id": "nowhere",
            "question": "Who painted the lighthouses red?",
            "answers": [],
            "relevant_ids": [],
            "unanswerable": True,
        }
    )
    qa = tmp / "kb-qa.jsonl"
    qa.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    older = tmp / "kb-older.jsonl"
    older.write_text("".join(json.dumps(r) + "\n" for r in old), encoding="utf-8")
    return {"docs": docs, "qa": qa, "older": older}


def _in_tmp(tmp: Path) -> RunConfig:
    """configs/run/ci-kb-tiny.yaml with every path under `tmp` and `data:` on the set written there."""
    from lorarag.scenarios.config import CorpusSource, DataConfig, QuestionSource, SplitConfig

    cfg = load_config(REPO / "configs/run/ci-kb-tiny.yaml", RunConfig)
    files = _kb_files(tmp)
    root = tmp / "runs" / cfg.name
    train = cfg.train.model_copy(
        update={
            "model": str(tmp / "tiny-qwen3"),
            "dataset": str(root / "sft/train.jsonl"),
            "val_dataset": str(root / "sft/val.jsonl"),
            "runs_dir": str(tmp / "runs/train"),
        }
    )
    rag = cfg.rag.model_copy(
        update={
            "chunker": cfg.rag.chunker.model_copy(update={"kind": "heading", "chunk_size": 500}),
            "index": cfg.rag.index.model_copy(update={"dir": str(root / "index")}),
            "generator": cfg.rag.generator.model_copy(update={"model": str(tmp / "tiny-qwen3")}),
        }
    )
    data = DataConfig(
        corpus=CorpusSource(kind="folder", path=str(files["docs"])),
        questions=QuestionSource(kind="jsonl", path=str(files["qa"])),
        outdated=str(files["older"]),
        splits=SplitConfig(seed=0, known_fraction=0.5, context_only_fraction=0.1, dev_fraction=0.2),
        update_fraction=0.5,
        snapshot=2024,
    )
    eval_ = cfg.eval.model_copy(
        update={"scenarios": ["consistent", "factual_error", "outdated", "irrelevant", "unanswerable", "update"]}
    )
    rule = SystemConfig(name="date_rule", kind="date_rule", context="presented", max_new_tokens=8)
    # the same rule with the RAG-SFT adapter reading the sources (the LoRA's memory kept)
    rule_sft = SystemConfig(
        name="date_rule_rag_sft", kind="date_rule", context="presented", max_new_tokens=8, adapter="rag_sft"
    )
    return cfg.model_copy(
        update={
            "runs_dir": str(tmp / "runs"),
            "train": train,
            "rag": rag,
            "data": data,
            "eval": eval_,
            "systems": [*cfg.systems, rule, rule_sft],
        }
    )


def test_a_run_config_names_either_the_demo_world_or_a_kb(tmp_path):
    from lorarag.core.config import validate_data

    demo = load_config(REPO / "configs/run/ci-tiny.yaml", RunConfig).model_dump()
    kb = load_config(REPO / "configs/run/ci-kb-tiny.yaml", RunConfig).model_dump()
    with pytest.raises(ConfigError, match="give either world or corpus \\+ questions \\(\\+ outdated\\), not both"):
        validate_data({**demo, "data": {**kb["data"], "world": demo["data"]["world"]}}, RunConfig, "x.yaml")
    with pytest.raises(ConfigError, match="give corpus and questions .*, or world"):
        validate_data({**kb, "data": {**kb["data"], "corpus": None}}, RunConfig, "x.yaml")
    with pytest.raises(ConfigError, match="rag.corpus.paths: must be \\[\\] with data:"):
        validate_data({**kb, "rag": {**kb["rag"], "corpus": {"paths": ["docs"]}}}, RunConfig, "x.yaml")
    with pytest.raises(ConfigError, match="rag.corpus.paths: must be \\[\\] with data:"):
        validate_data({**demo, "rag": {**demo["rag"], "corpus": {"paths": ["docs"]}}}, RunConfig, "x.yaml")
    with pytest.raises(ConfigError, match="data.questions.kind"):
        validate_data({**kb, "data": {**kb["data"], "questions": {"kind": "csv", "path": "q"}}}, RunConfig, "x.yaml")


@pytest.mark.parametrize("name", ["conflictnq-kb", "qwen3-4b-kb", "ci-kb-tiny"])
def test_shipped_kb_configs_validate_and_dry_run_on_the_users_data(name):
    from lorarag.study.pipeline import run

    cfg = load_config(REPO / f"configs/run/{name}.yaml", RunConfig)
    assert cfg.data.world is None and cfg.data.corpus is not None and cfg.data.questions is not None
    lines: list[str] = []
    run(cfg, dry_run=True, echo=lines.append)
    assert [ln.split()[1] for ln in lines] == ["data", "index", "scenarios", "train", "calibrate", "evaluate", "report"]
    assert f"questions {cfg.data.questions.kind} {cfg.data.questions.path}" in lines[0]
    assert f"--dataset {cfg.train.dataset}" in lines[3] and cfg.train.dataset.startswith(f"runs/{name}/")
    if name == "qwen3-4b-kb":
        assert "swift sft --model Qwen/Qwen3-4B --tuner_type lora" in lines[3]


@pytest.mark.slow
def test_reduced_kb_run_end_to_end(tmp_path):
    import torch

    torch.set_num_threads(1)
    from lorarag.fallback.gate import adapter_sha256
    from lorarag.rag.records import Chunk, read_jsonl
    from lorarag.scenarios.kb_records import QAItem
    from lorarag.scenarios.records import load_scenarios
    from lorarag.study.pipeline import run
    from lorarag.train.sft import leak_check, read_sft
    from lorarag.trained.adapters import find_rag_sft

    cfg = _in_tmp(tmp_path)
    lines: list[str] = []
    table = run(cfg, echo=lines.append)
    root = tmp_path / "runs" / cfg.name
    assert [ln.split()[1] for ln in lines if ln.startswith("[")] == [
        "data",
        "index",
        "scenarios",
        "train",
        "calibrate",
        "evaluate",
        "report",
    ]
    # the run ends with one question of a known fact to ask the trained system, and where it lives
    assert lines[-1].startswith("try: lorarag ask ") and lines[-1].endswith(f"--run {tmp_path / 'runs' / cfg.name}")
    # labels mapped to the chunk holding the answer (heading chunks: one per paragraph here)
    labels = [json.loads(x) for x in (root / "data/labels.jsonl").read_text().splitlines()]
    assert len(labels) == 2 * len(TOWNS) and {r["rule"] for r in labels} == {"answer"}
    chunks = {c.chunk_id: c for c in read_jsonl(root / "data/chunks.jsonl", Chunk)}
    assert all(len(r["chunk_ids"]) == 1 for r in labels)
    # splits saved and hashed with the inputs
    splits = {
        g: read_jsonl(root / f"data/splits/{g}.jsonl", QAItem)
        for g in ("known", "known_dev", "context_only", "unseen_dev", "unseen")
    }
    hashes = json.loads((root / "run.json").read_text())["data_hashes"]
    assert str(root / "data/splits/unseen.jsonl") in hashes and str(cfg.data.questions.path) in hashes
    assert str(cfg.data.outdated) in hashes
    # the SFT rows as written: no held-out question, chunk or test passage
    test = load_scenarios(root / "scenarios/test.jsonl")
    held = splits["unseen_dev"] + splits["unseen"]
    leak_check(read_sft(cfg.train.dataset), held, chunks, [p.text for s in test for p in s.presented if p.replaces])
    assert {s.scenario for s in test} >= {"consistent", "factual_error", "irrelevant"}
    assert {s.knowledge for s in test} == {"known", "unknown"} and all(s.source_set == "kb" for s in test)
    dev = load_scenarios(root / "scenarios/dev-unseen.jsonl")
    assert dev and {s.fact_id.removeprefix("kb/") for s in dev} <= {it.qid for it in splits["unseen_dev"]}
    # every system answered every test item once; retrieved systems saw the poisoned index
    for s in cfg.systems:
        rows = [json.loads(x) for x in (root / "eval" / s.name / "results.jsonl").read_text().splitlines()]
        assert sorted(r["qid"] for r in rows) == sorted(x.qid for x in test)
        if s.name == "base_rag_retrieved":
            for r in rows:
                if r["scenario"] == "factual_error":
                    assert not set(r["relevant_ids"]) & set(r["retrieved_ids"])
                if r["scenario"] == "irrelevant":
                    assert not set(r["relevant_ids"]) & set(r["retrieved_ids"])
    # the KB headline: both context modes, the targets, attribution by labelled chunk id
    assert "### presented context: base_rag vs lora_rag" in table
    assert "### retrieved context: base_rag_retrieved vs lora_rag_retrieved" in table
    assert "### Targets (presented context)" in table and "factual error (known) >= 0.40" in table
    assert "### Error attribution by labelled chunk id: lora_rag_retrieved" in table
    assert "Known test items asked in a wording no SFT row uses" in table
    # knowledge updates: facts taught in their older version, the current chunk on the update cell
    upd = json.loads((root / "data/summary.json").read_text())["updates"]
    assert upd["taught_older"] >= 1 and "Knowledge updates:" in table
    assert (upd["tested"] > 0) == any(s.scenario == "update" for s in test)
    assert all(s.superseded and s.knowledge == "known" for s in test if s.scenario == "update")
    # dated sources (data.snapshot 2024): an update after it, an older version at its own date, in rows too
    assert all(int(p.date) > 2024 for s in test if s.scenario == "update" for p in s.presented if p.date)
    assert {p.date for s in test if s.scenario == "outdated" for p in s.presented if p.replaces} - {None}
    assert any("(dated " in m["content"] for r in read_sft(cfg.train.dataset) for m in r["messages"])
    # the date rule reads an update's newer source, drops an outdated test's older one
    rule = [json.loads(x) for x in (root / "eval/date_rule/results.jsonl").read_text().splitlines()]
    for r in rule:
        if r["scenario"] == "update":
            assert r["route"] == "context" and "dated after 2024" in " ".join(r["notes"])
        if r["scenario"] == "outdated":
            assert "1 source(s) dated by 2024 dropped" in " ".join(r["notes"])
    # read by the RAG-SFT adapter: the same routes, stamped with both adapters' content
    rule_sft = [json.loads(x) for x in (root / "eval/date_rule_rag_sft/results.jsonl").read_text().splitlines()]
    assert [(r["qid"], r["route"]) for r in rule_sft] == [(r["qid"], r["route"]) for r in rule]
    stamp = json.loads((root / "eval/date_rule_rag_sft/stamp.json").read_text())
    assert stamp["rag_sft"] == adapter_sha256(find_rag_sft(cfg)) != stamp["adapter"]
    assert (root / "report/headline.md").read_text() == table
    assert json.loads((root / "report/base-vs-lora/metrics.json").read_text())["comparison"]["b"] == "lora_rag"
    # a second run reuses the adapter and the finished evaluation
    again: list[str] = []
    assert run(cfg, echo=again.append) == table
    assert any("reusing adapter" in ln for ln in again)


def test_kb_targets_side_with_the_truth_by_token_f1_and_compare_paired_items():
    from lorarag.eval.conflict_metrics import sides_with_truth
    from lorarag.eval.scoring import score_fn
    from lorarag.study.headline import kb_targets
    from tests.eval_fixtures import make_item

    gold, fake = "It is named after Reginald Punnett, the geneticist.", "It is named after a district in Mozambique."
    r = make_item(
        scenario="factual_error",
        knowledge="known",
        gold_answers=(gold,),
        context_answer=fake,
        answer="Named after the geneticist Reginald Punnett.",
    )
    assert sides_with_truth(r) and not sides_with_truth(make_item(**{**r.__dict__, "answer": fake}))
    assert not sides_with_truth(make_item(**{**r.__dict__, "answer": ""}))  # abstaining sides with nobody
    assert score_fn("token_f1")(r) == 1.0 and score_fn("contains")(r) == 0.0
    cfg = load_config(REPO / "configs/run/conflictnq-kb.yaml", RunConfig)

    def items(system: str, right_fe: int, right_cons: int) -> list:
        out = [
            make_item(
                system=system,
                qid=f"fe{i}",
                fact_id=f"fe{i}",
                scenario="factual_error",
                knowledge="known",
                gold_answers=(gold,),
                context_answer=fake,
                answer=gold if i < right_fe else fake,
            )
            for i in range(20)
        ]
        return out + [
            make_item(
                system=system,
                qid=f"c{i}",
                fact_id=f"c{i}",
                scenario="consistent",
                knowledge="unknown",
                gold_answers=(gold,),
                context_answer=gold,
                answer=gold if i < right_cons else "",
            )
            for i in range(20)
        ]

    (fe, fe_v, fe_ok), (cons, cons_v, cons_ok) = kb_targets(cfg, items("b", 2, 18), items("l", 16, 17))
    assert fe_v == pytest.approx(0.7) and fe_ok and cons_v == pytest.approx(-0.05) and cons_ok
    # +0.60 over 20 facts is past the bar on the mean, not on its CI's lower bound (about +0.40 − 0.05)
    (_, v, ok), _ = kb_targets(cfg, items("b", 2, 18), items("l", 14, 17))
    assert v == pytest.approx(0.6) and not ok
    (_, v, ok), (_, w, ok2) = kb_targets(cfg, items("b", 2, 18), items("l", 9, 14))
    assert v == pytest.approx(0.35) and not ok and w == pytest.approx(-0.2) and not ok2


def test_a_contains_kb_gets_the_absolute_targets_beside_the_paired_differences():
    """The demo world is a KB scored by `contains`: its targets are the two paired differences, then
    the product's absolute targets per cell (study/targets.py), the update ones where the run asks
    that cell; a `token_f1` KB gets the differences only (the test above unpacks exactly two)."""
    from lorarag.study.headline import kb_targets
    from lorarag.study.targets import targets
    from tests.eval_fixtures import make_item

    def items(system: str, right_fe: int, right_cons: int) -> list:
        fe = [
            make_item(
                system=system,
                qid=f"fe{i}",
                fact_id=f"fe{i}",
                scenario="factual_error",
                knowledge="known",
                gold_answers=("Oslo",),
                context_answer="Bergen",
                answer="Oslo" if i < right_fe else "Bergen",
            )
            for i in range(20)
        ]
        return fe + [
            make_item(
                system=system,
                qid=f"c{k}{i}",
                fact_id=f"c{k}{i}",
                scenario="consistent",
                knowledge=k,
                gold_answers=("Oslo",),
                context_answer="Oslo",
                answer="Oslo" if i < right_cons else "Rome",
            )
            for k in ("known", "unknown")
            for i in range(20)
        ]

    demo = load_config(REPO / "configs/run/ci-tiny.yaml", RunConfig)
    assert demo.data.answer_metric == "contains" and "update" in demo.eval.scenarios
    base, lora = items("b", 2, 19), items("l", 17, 19)
    got = kb_targets(demo, base, lora)
    by = {n: (v, ok) for n, v, ok in got}
    # factual error (known): base 2/20, LoRA 17/20, a +0.75 difference, 15 discordant pairs all one way
    assert got[0][0].startswith("LoRA-RAG − base RAG, accuracy, factual error (known) >= 0.40")
    assert got[0][1] == pytest.approx(0.75) and got[0][2]
    # consistent (never-learned): 19/20 both, difference 0, every resample 0: non-inferior
    assert got[1][0].startswith("LoRA-RAG − base RAG, accuracy, consistent (never-learned)")
    assert got[1][1] == pytest.approx(0.0) and got[1][2]
    assert [n for n, _, _ in got[2:]] == [n for n, _, _ in targets(base, lora, updates=True)]
    # met only past the Wilson bound (hand-computed): 2/20 has upper bound 0.30 > 0.2; 17/20 lower 0.64 < 0.8;
    # 19/20 lower 0.76 < 0.9
    assert by["base RAG, factual error (known) ~ 0 (<= 0.2)"] == (pytest.approx(0.10), False)
    assert by["LoRA-RAG, factual error (known) >= 0.8"] == (pytest.approx(0.85), False)
    assert by["base RAG, consistent (known) >= 0.9"] == (pytest.approx(0.95), False)
    v, ok = by["LoRA-RAG, update (known) >= 0.85"]  # asked for, no item: undefined, never met
    assert v != v and not ok
    no_update = demo.model_copy(
        update={
            "eval": demo.eval.model_copy(update={"scenarios": ["consistent", "factual_error", "outdated", "irrelevant"]})
        }
    )
    assert not any("update" in n for n, _, _ in kb_targets(no_update, base, lora))


def test_seeds_dry_run_plans_every_seed_of_a_kb_config():
    from lorarag.study.seeds import run_seeds

    lines: list[str] = []
    run_seeds(load_config(REPO / "configs/run/ci-kb-tiny.yaml", RunConfig), [42, 43], dry_run=True, echo=lines.append)
    assert sum(ln.startswith("[1/7] data") for ln in lines) == 2 and "ci-kb-tiny-qwen3-seed43" in "\n".join(lines)


def test_kb_headline_gives_mcnemar_p_the_shortcut_probe_and_detection_by_knowledge():
    from lorarag.study.headline import headline_markdown
    from tests.eval_fixtures import make_item

    cfg = load_config(REPO / "configs/run/conflictnq-kb.yaml", RunConfig)
    gold, fake = "Reginald Punnett", "a district in Mozambique"

    def items(system: str, right: int, flagged: dict[str, int] | None = None) -> list:
        return [
            make_item(
                system=system,
                qid=f"{k}{i}",
                fact_id=f"{k}{i}",
                scenario="factual_error",
                knowledge=k,
                gold_answers=(gold,),
                context_answer=fake,
                answer=gold if i < right else fake,
                verdict=None if flagged is None else ("conflicting" if i < flagged[k] else "supported"),
            )
            for k in ("known", "unknown")
            for i in range(20)
        ]

    summary = {"shortcut": {"n_pos": 40, "n_neg": 40, "auroc": 0.97, "auroc_splits": [0.97], "length_auroc": 0.48}}
    md = headline_markdown(
        cfg, {"base_rag": items("base_rag", 2), "lora_rag": items("lora_rag", 14, {"known": 15, "unknown": 13})}, summary
    )
    # base right on 2 of 20, LoRA on 14, never the other way: 12 discordant pairs all one way,
    # exact McNemar p = 2 * 0.5**12 = 0.00049; each item its own fact, so 20 clusters and the
    # cluster permutation p is the same 2 of 2**12 sign patterns
    row = next(ln for ln in md.splitlines() if ln.startswith("| factual_error | known |"))
    assert "| 20 (20) | 0.10 | 0.70 | +0.60 [" in row and "| 0.00049 | 0.00049 |" in row
    assert "AUROC 0.97, length alone 0.48" in md and "can be told by their form" in md
    # doubt 15/20 known (Wilson 0.531-0.888), 13/20 never-learned (0.433-0.819)
    det = next(ln for ln in md.splitlines() if ln.startswith("| factual_error | 15/20"))
    assert det == "| factual_error | 15/20 = 0.75 [0.53, 0.89] | 13/20 = 0.65 [0.43, 0.82] |"
    # every doubt here is `conflicting`: 15 known, 13 never learned, in the table of what the doubt says
    kinds = md[md.index("What the doubt says") :]
    assert "| factual_error | conflicting 15 | conflicting 13 |" in kinds.splitlines()


def test_what_the_doubt_says_counts_each_verdict_per_cell():
    from lorarag.study.verdict_tables import doubt_kinds_table
    from tests.eval_fixtures import make_item

    verdicts = {
        "known": ["supported"] * 3 + ["conflicting", "irrelevant", "irrelevant"],
        "unknown": ["supported", "insufficient", "insufficient", "insufficient", "outdated", "invalid"],
    }
    lora = [
        make_item(qid=f"{k}{i}", fact_id=f"{k}{i}", scenario="consistent", knowledge=k, verdict=v)
        for k, vs in verdicts.items()
        for i, v in enumerate(vs)
    ]
    lora.append(make_item(qid="f0", fact_id="f0", scenario="factual_error", knowledge="known", verdict="supported"))
    rows = [ln for ln in doubt_kinds_table(lora) if ln.startswith("| ")]
    assert rows[1:] == [
        "| consistent | conflicting 1 · irrelevant 2 | outdated 1 · insufficient 3 · invalid 1 |",
        "| factual_error | none | – |",
    ]


def test_attribution_of_a_token_f1_kb_counts_right_sentence_answers_as_correct():
    from lorarag.eval.answer_metrics import is_correct
    from lorarag.eval.attribution import attribute
    from lorarag.eval.scoring import correct_fn
    from tests.eval_fixtures import make_item

    gold = ("the geneticist Reginald Punnett",)
    # same words, other order: token F1 1.0 (articles dropped), but no gold substring
    r = make_item(
        scenario="consistent",
        gold_answers=gold,
        answer="Reginald Punnett, geneticist",
        context_answer=gold[0],
        final_ids=("c1",),
        target_ids=("c1",),
        retrieved_ids=("c1",),
    )
    assert not is_correct(r) and attribute(r) == "generation_failure"
    assert attribute(r, correct_fn("token_f1")) == "correct"
    half = make_item(**{**r.__dict__, "answer": "Punnett"})  # P 1, R 1/3: F1 0.5, counts as right
    assert attribute(half, correct_fn("token_f1")) == "correct"
    low = make_item(**{**r.__dict__, "answer": "a district somewhere"})
    assert attribute(low, correct_fn("token_f1")) == "generation_failure"
    # on a wrong source only siding with the truth is right
    fe = make_item(
        **{
            **r.__dict__,
            "scenario": "factual_error",
            "context_answer": "a district in Mozambique",
            "answer": "It is a district in Mozambique.",
        }
    )
    assert attribute(fe, correct_fn("token_f1")) == "conflict_missed"
    assert attribute(make_item(**{**fe.__dict__, "answer": "Reginald Punnett"}), correct_fn("token_f1")) == "correct"


@pytest.mark.slow
def test_reduced_kb_run_with_dense_distractors_and_generated_wordings(tmp_path, tiny_models):
    """The two opt-in KB branches through `lorarag run`: `data.distractors: retrieval` on a dense
    FAISS index (an irrelevant context is the run retriever's best-ranked chunks that are neither
    the item's own nor hold its answer, in rank order) and `data.paraphrase` (every single-wording
    taught question asked once, each reply checked, cached under a stamp, counted in the headline)."""
    import torch

    torch.set_num_threads(1)
    from lorarag.rag.config import DenseIndexConfig, EmbedderConfig
    from lorarag.rag.records import read_jsonl
    from lorarag.rag.retrieve import load_retriever
    from lorarag.scenarios.kb_labels import find_answer
    from lorarag.scenarios.kb_records import QAItem
    from lorarag.scenarios.records import load_scenarios
    from lorarag.study.paraphrase import Paraphrase
    from lorarag.study.pipeline import run

    cfg = _in_tmp(tmp_path)
    emb = EmbedderConfig(kind="transformers", model=str(tiny_models["embedder"]), batch_size=2, query_instruction=None)
    rag = cfg.rag.model_copy(
        update={
            "embedder": emb,
            "retrieval": cfg.rag.retrieval.model_copy(update={"mode": "dense"}),
            "index": cfg.rag.index.model_copy(update={"dense": DenseIndexConfig(kind="flat")}),
        }
    )
    data = cfg.data.model_copy(
        update={
            "distractors": "retrieval",
            "paraphrase": cfg.data.paraphrase.model_copy(update={"enabled": True, "prompts": 1, "max_new_tokens": 12}),
        }
    )
    keep = [s for s in cfg.systems if s.name in ("base_rag", "lora_rag")]
    cfg = cfg.model_copy(update={"rag": rag, "data": data, "systems": keep})
    lines: list[str] = []
    table = run(cfg, echo=lines.append)
    root = tmp_path / "runs" / cfg.name

    # paraphrases: one reply per single-wording taught question, cached with its stamp, tallied
    splits = {g: read_jsonl(root / f"data/splits/{g}.jsonl", QAItem) for g in ("known", "known_dev")}
    single = sorted(it.qid for g in splits.values() for it in g if it.answers and not it.wordings)
    rows = read_jsonl(root / "data/paraphrases.jsonl", Paraphrase)
    assert single and sorted(p.qid for p in rows) == single
    assert (root / "data/paraphrases.stamp.json").is_file()
    kept = sum(not p.why_not for p in rows)
    assert any(ln.strip().startswith(f"paraphrases: {kept} of {len(rows)} kept for {len(single)} ") for ln in lines), lines
    assert f"reworded {len(single)} single-wording taught question(s)" in table

    # irrelevant contexts: the dense retriever's ranking, own chunks and answer-bearing ones skipped
    retriever = load_retriever(cfg.rag.index, cfg.rag.retrieval, cfg.rag.embedder)
    ids = [c.chunk_id for c in retriever.chunks]
    texts = {c.chunk_id: c.text for c in retriever.chunks}
    irrelevant = [s for s in load_scenarios(root / "scenarios/test.jsonl") if s.scenario == "irrelevant"]
    assert irrelevant
    for s in irrelevant:
        ranked, _ = retriever.rank([s.question], len(ids))[0]
        own = set(s.relevant_ids) | set(s.removes)
        expect = [
            ids[int(i)]
            for i in ranked
            if ids[int(i)] not in own and not (s.gold_answers and find_answer(texts[ids[int(i)]], s.gold_answers))
        ]
        assert [p.chunk_id for p in s.presented] == expect[: len(s.presented)], s.qid
