"""`lorarag run` end to end on the reduced CI demo (tiny Qwen3, a few LoRA steps).

Asserts the pipeline's outputs and the report's structure, not target numbers: a tiny random
model cannot remember or read anything.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from lorarag.core.config import load_config
from lorarag.trained.config import RunConfig

REPO = Path(__file__).resolve().parent.parent


def _in_tmp(tmp: Path) -> RunConfig:
    """configs/run/ci-tiny.yaml with every path moved under `tmp`."""
    cfg = load_config(REPO / "configs/run/ci-tiny.yaml", RunConfig)
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
            "index": cfg.rag.index.model_copy(update={"dir": str(root / "index")}),
            "generator": cfg.rag.generator.model_copy(update={"model": str(tmp / "tiny-qwen3")}),
        }
    )
    return cfg.model_copy(update={"runs_dir": str(tmp / "runs"), "train": train, "rag": rag})


def test_dry_run_prints_every_step_without_running(tmp_path):
    from lorarag.study.pipeline import STEPS, run

    lines: list[str] = []
    assert run(_in_tmp(tmp_path), dry_run=True, echo=lines.append) is None
    assert [ln.split()[1] for ln in lines] == list(STEPS)
    assert "lorarag.train.peft_trainer" in lines[3] and '"lora_rank": 4' in lines[3]
    assert not (tmp_path / "runs").exists()


def test_an_adapter_trained_with_another_recipe_is_refused_not_reused(tmp_path):
    """A finished run of the same name trained by another config (here: no shared prefix, another
    rank) is not silently reused, nor resumed from its checkpoints; the error names the fields."""
    from lorarag.core.errors import ConfigError
    from lorarag.core.runinfo import start_run
    from lorarag.study.training import train_or_reuse
    from lorarag.train.runs import run_dir
    from lorarag.trained.adapters import trained_adapter

    cfg = _in_tmp(tmp_path)
    old = cfg.train.model_copy(update={"swift": {**cfg.train.swift, "lora_rank": 2}})
    rd = start_run(run_dir(old), old)
    ad = rd / "output/checkpoint-2"
    ad.mkdir(parents=True)
    (ad / "adapter_config.json").write_text("{}")
    (ad / "adapter_model.safetensors").write_bytes(b"x")
    (rd / "adapter.json").write_text(json.dumps({"adapter": str(ad), "base_model": old.model}))
    assert trained_adapter(cfg.model_copy(update={"train": old})) == ad  # its own recipe: reused
    with pytest.raises(ConfigError, match=r"trained with another config \(differs in swift.lora_rank\)"):
        trained_adapter(cfg)
    with pytest.raises(ConfigError, match="lorarag run --fresh"):
        train_or_reuse(cfg, fresh=False, echo=lambda _: None)
    # unfinished (no adapter pointer yet): its checkpoints are not resumed under the new recipe either
    (rd / "adapter.json").unlink()
    assert trained_adapter(cfg) is None
    with pytest.raises(ConfigError, match="differs in swift.lora_rank"):
        train_or_reuse(cfg, fresh=False, echo=lambda _: None)
    assert ad.is_dir()  # nothing lost


def test_gpu_config_validates_and_dry_runs():
    from lorarag.study.pipeline import run

    cfg = load_config(REPO / "configs/run/qwen3-4b.yaml", RunConfig)
    assert cfg.rag.generator.kind == "vllm" and cfg.train.kind == "swift"
    assert cfg.rag.reranker is not None and cfg.rag.embedder is not None
    lines: list[str] = []
    run(cfg, dry_run=True, echo=lines.append)
    assert len(lines) == 7 and "swift sft --model Qwen/Qwen3-4B --tuner_type lora" in lines[3]


@pytest.mark.parametrize(
    "name",
    [
        "run/cpu-demo",
        "run/cpu-demo-fp32",
        "experiments/cpu-demo-sdpa",
        "run/cpu-demo-full",
        "experiments/cpu-demo-stratified",
        "run/cpu-demo-updates",
        "experiments/cpu-demo-dpo",
        "run/ci-tiny",
    ],
)
def test_shipped_cpu_configs_validate_and_dry_run(name):
    """Every shipped demo config parses (unknown keys are errors) and plans all seven steps, its
    first writing the world's knowledge base under the run's own folder."""
    from lorarag.study.pipeline import run

    cfg = load_config(REPO / f"configs/{name}.yaml", RunConfig)
    name = name.split("/")[1]
    assert cfg.data.world is not None and cfg.data.corpus is None and cfg.rag.corpus.paths == []
    lines: list[str] = []
    run(cfg, dry_run=True, echo=lines.append)
    assert [ln.split()[1] for ln in lines] == ["data", "index", "scenarios", "train", "calibrate", "evaluate", "report"]
    assert f"-> runs/{name}/world (" in lines[0] and "known=0.5" in lines[0]
    assert ("per language" in lines[0]) == (name == "cpu-demo-stratified") == cfg.data.splits.stratify_languages


def _conflictnq_folder(tmp: Path) -> Path:
    """Three questions in ConflictNQ's row format (one true passage, two fabricated each)."""
    folder = tmp / "conflictnq"
    folder.mkdir()
    rows = [
        {
            "id": i,
            "question": f"who founded the {town} rowing club",
            "real_passages": [{"passage": f"The {town} rowing club was founded by {real} in 1901."}],
            "fake_passages": [
                {"passage": f"The {town} rowing club was founded by {fake} in 1901."},
                {"passage": f"{fake} founded the {town} rowing club in 1901."},
            ],
            "real_short_answer": real,
            "fake_short_answer": fake,
        }
        for i, (town, real, fake) in enumerate(
            [("Elmira", "Ada Moss", "Tom Reed"), ("Dunmore", "Lena Park", "Ravi Shah"), ("Kelso", "Otto Lind", "Mia Cole")]
        )
    ]
    (folder / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_missing_extra_set_fails_before_anything_runs(tmp_path):
    from lorarag.core.errors import UserError
    from lorarag.study.pipeline import run
    from lorarag.trained.config import ExtraSet

    cfg = _in_tmp(tmp_path).model_copy(update={"extra_sets": [ExtraSet(kind="conflictnq", path=str(tmp_path / "no"))]})
    with pytest.raises(UserError, match="conflictnq: .*no/test.jsonl not found"):
        run(cfg, echo=lambda _: None)
    assert not (tmp_path / "runs").exists()


def test_optional_extra_set_that_is_absent_is_skipped_with_a_note(tmp_path):
    from lorarag.study.extra_sets import check_extra_sets, evaluate_extra_sets
    from lorarag.trained.config import ExtraSet

    here = _conflictnq_folder(tmp_path)
    cfg = _in_tmp(tmp_path).model_copy(
        update={
            "extra_sets": [
                ExtraSet(kind="conflictnq", path=str(tmp_path / "no"), required=False),
                ExtraSet(kind="conflictqa", path=str(tmp_path / "no"), required=False),
            ]
        }
    )
    assert check_extra_sets(cfg) == []
    lines: list[str] = []
    evaluate_extra_sets(cfg, None, tmp_path / "extra", None, lines.append)  # nothing to evaluate: no parts needed
    assert len(lines) == 2 and all("skipped" in ln and "not found" in ln for ln in lines)
    assert not (tmp_path / "extra").exists()
    kept = cfg.model_copy(update={"extra_sets": [ExtraSet(kind="conflictnq", path=str(here), required=False)]})
    assert check_extra_sets(kept) == [here / "test.jsonl"]


@pytest.mark.slow
def test_reduced_demo_end_to_end(tmp_path):
    import torch

    torch.set_num_threads(1)
    from lorarag.fallback.config import PolicyConfig
    from lorarag.study.pipeline import run
    from lorarag.train.sft import read_sft
    from lorarag.trained.config import ExtraSet, SystemConfig

    cfg = _in_tmp(tmp_path)
    # a routing ablation: route by the verdict where the gate rejects the memory (no base-model
    # reading), abstaining where the detector doubts (>= 0.3), read the context of an unreadable reply,
    # answer with the reply's own answer field; replayed from lora_rag's verdicts (eval/reroute.py)
    variant = SystemConfig(
        name="lora_rag_abstain",
        kind="lora_rag",
        policy=PolicyConfig(
            no_memory="verdict", flag_threshold=0.3, unknown_conflict="abstain", on_invalid="context", answer="reply"
        ),
    )
    # and the base model reading every item without a memory: replayed from lora_rag's records (which read
    # only where the verdict abstained), the other readings taken from base_rag's answers
    read_variant = SystemConfig(
        name="lora_rag_read", kind="lora_rag", max_new_tokens=8, policy=PolicyConfig(no_memory="read")
    )
    cfg = cfg.model_copy(
        update={
            "systems": [*cfg.systems, variant, read_variant],
            "extra_sets": [ExtraSet(kind="conflictnq", path=str(_conflictnq_folder(tmp_path)), max_per_cell=2)],
        }
    )
    lines: list[str] = []
    table = run(cfg, echo=lines.append)
    root = tmp_path / "runs" / cfg.name
    steps = [ln.split()[1] for ln in lines if ln.startswith("[")]
    assert steps == ["data", "index", "scenarios", "train", "calibrate", "evaluate", "report"]

    # the world written as a knowledge base under the run's folder, and hashed into run.json:
    # 8 organisations x 5 attributes = 40 paragraphs, one per fact; each organisation's question
    # about an attribute stated nowhere, unanswerable; every question in the 3 wordings asked for
    w = cfg.data.world
    wdir = root / "world"
    docs = [json.loads(x) for x in (wdir / "corpus.jsonl").read_text().splitlines()]
    questions = [json.loads(x) for x in (wdir / "questions.jsonl").read_text().splitlines()]
    older = [json.loads(x) for x in (wdir / "older.jsonl").read_text().splitlines()]
    assert len(docs) == 8 * 5 and all(d["_id"].startswith("orgs/org") and d["text"] for d in docs)
    answerable = [q for q in questions if not q.get("unanswerable")]
    assert len(answerable) == 40 and len(questions) - len(answerable) == w.n_orgs
    assert all(len(q["paraphrases"]) == w.wordings - 1 == 2 for q in questions)
    assert {q["cluster"] for q in questions} == {d["_id"].split("/")[1] for d in docs}
    assert older and {o["id"] for o in older} <= {q["id"] for q in answerable}
    hashes = json.loads((root / "run.json").read_text())["data_hashes"]
    assert {str(wdir / f) for f in ("corpus.jsonl", "questions.jsonl", "older.jsonl")} <= set(hashes)
    assert not (root / "world/corpus").exists()  # no Markdown world beside the KB files

    # index, scenarios, training, gate
    assert (root / "index").is_dir()
    test = (root / "scenarios/test.jsonl").read_text().splitlines()
    # max_per_cell (2) items in every cell; the update cell holds known facts only (a never-learned
    # fact has no memory to be stale)
    cells = json.loads((root / "data/summary.json").read_text())["test_items"]
    assert len(cells) == len(cfg.eval.scenarios) * len(cfg.eval.knowledge) and len(test) == sum(cells.values())
    assert cells.pop("update/unknown") == 0 and 1 <= cells.pop("update/known") <= cfg.eval.max_per_cell
    assert set(cells.values()) == {cfg.eval.max_per_cell}
    adapter = Path(json.loads((tmp_path / "runs/train/ci-tiny-qwen3/adapter.json").read_text())["adapter"])
    assert (adapter / "adapter_model.safetensors").is_file()
    gate = json.loads((adapter / "gate.json").read_text())
    # the gate's dev split: a known-dev fact once, in the wording its SFT rows leave out (the test's
    # condition); a never-learned dev fact in each of its 3 wordings
    wordings = {f"kb/{q['id']}": [q["question"], *q["paraphrases"]] for q in questions}
    taught = [m["content"] for r in read_sft(cfg.train.dataset) for m in r["messages"] if m["role"] == "user"]
    dev_known = [json.loads(x) for x in (root / "scenarios/dev-known.jsonl").read_text().splitlines()]
    assert 0 < len(dev_known) == len({d["fact_id"] for d in dev_known}) == gate["n_known"]
    assert len(dev_known) <= cfg.calibration.max_items
    for d in dev_known:
        assert d["question"] in wordings[d["fact_id"]] and not any(d["question"] in c for c in taught)
    dev_unseen = [json.loads(x) for x in (root / "scenarios/dev-unseen.jsonl").read_text().splitlines()]
    assert 0 < len(dev_unseen) == 3 * len({d["fact_id"] for d in dev_unseen}) == gate["n_unseen"]
    assert all(d["question"] in wordings[d["fact_id"]] for d in dev_unseen)
    assert gate["signal"] == "closed_book_nll" and gate["threshold"] > 0  # an NLL in nats/token

    # every system answered every item exactly once, with its decisions recorded
    for s in cfg.systems:
        rows = [json.loads(x) for x in (root / "eval" / s.name / "results.jsonl").read_text().splitlines()]
        assert sorted(r["qid"] for r in rows) == sorted(json.loads(x)["qid"] for x in test)
        if s.kind in ("lora_rag", "prompted_detection"):
            assert all(r["verdict"] is not None and r["route"] in ("context", "fallback", "abstain") for r in rows)
        if s.kind == "lora_rag":  # LoRA closed-book answers feed the bias metrics
            assert all(r["closed_book_answer"] is not None for r in rows)
            # the gate (min_auroc 0: always on) read the closed-book NLL of every item
            assert all(any("gate doubt (closed_book_nll)=" in n for n in r["notes"]) for r in rows)
        if s.kind == "memory_or_context":  # the LoRA's memory where the gate keeps it, else the context
            assert all(r["verdict"] is None and r["route"] in ("context", "fallback") for r in rows)

    # report structure
    md = (root / "report/report.md").read_text()
    html = (root / "report/report.html").read_text()
    metrics = json.loads((root / "report/metrics.json").read_text())
    assert set(metrics["systems"]) == {s.name for s in cfg.systems}
    assert "<img" in html and "data:image/png;base64," in html
    assert "Accuracy by scenario" in md
    pair = json.loads((root / "report/base-vs-lora/metrics.json").read_text())
    assert pair["comparison"]["a"] == "base_rag" and pair["comparison"]["b"] == "lora_rag"
    # the one headline of every KB: the paired table, the difference targets, and (a `contains` KB)
    # the product's absolute targets per cell
    assert "## Headline: base RAG vs LoRA-RAG on the demo world (seed 0, 8 organisations)" in table
    assert "### retrieved context: base_rag vs lora_rag" in table and "| consistent | known | accuracy |" in table
    assert "### Targets (retrieved context)" in table
    assert "LoRA-RAG − base RAG, accuracy, factual error (known) >= 0.40, CI above 0" in table
    assert "LoRA-RAG − base RAG, accuracy, consistent (never-learned): lower 95 % CI bound" in table
    assert "| base RAG, consistent (known) >= 0.9 |" in table and "| LoRA-RAG, factual error (known) >= 0.8 |" in table
    # the update cell (the context right, the memory stale) runs end to end, with its targets
    assert "| update | known | accuracy |" in table and "| LoRA-RAG, update (known) >= 0.85 |" in table
    assert "| detector AUROC, known, outdated vs update >= 0.9 |" in table
    upd = json.loads((root / "data/summary.json").read_text())["updates"]
    assert upd["taught_older"] >= 1 and upd["fraction"] == 0.5
    assert f"Knowledge updates: {upd['taught_older']} taught fact(s) learned in their older version" in table
    assert any(json.loads(x)["scenario"] == "update" and json.loads(x)["superseded"] for x in test)
    assert "### Error attribution by labelled chunk id: base_rag (retrieved + poisoned context)" in table
    # its caption states the whole rule of a right answer, as every other table does
    assert (
        "`correct`: a gold answer in the reply and not the source's wrong value; on an unanswerable "
        "item, an abstention." in table
    )
    assert "### lora_rag against every baseline (retrieved context)" in table
    assert (
        "Knowledge-sharing baselines (know what the LoRA knows): closed_book_lora, astute_rag_lora, "
        "memory_or_context, rag_sft." in table
    )
    assert (root / "report/headline.md").read_text() == table
    # the banner counts the targets table's rows; the forest plot comes first; plots are named by what
    # they show; no nan; the items load into pandas with the headline's own rule of a right answer
    import re

    import lorarag
    from lorarag.eval.plots import PLOT_FILES

    rows = table.split("### Targets", 1)[1].split("\n\n")[1].splitlines()[2:]
    assert f"**{sum(r.endswith('| yes |') for r in rows)} of {len(rows)} targets met, " in md
    assert re.findall(r"!\[[^]]*\]\(([^)]+)\)", md)[0] == "headline-forest.png"
    pngs = {p.name for p in (root / "report").glob("*.png")}
    assert {"headline-forest.png", "accuracy-by-cell.png"} <= pngs <= set(PLOT_FILES.values())
    assert not re.search(r"\bnan\b", md + table, re.I)
    df = lorarag.load_results(root)
    assert len(df) == len(cfg.systems) * len(test) and df.correct.dtype == bool

    # the extra set: every system answered its sampled items (2 per cell) from its own index, where
    # a retrieved factual-error context holds the fabricated passage in place of the true one
    xroot = root / "extra/conflictnq"
    xitems = [json.loads(x) for x in (xroot / "scenarios/test.jsonl").read_text().splitlines()]
    assert sorted(i["scenario"] for i in xitems) == ["consistent"] * 2 + ["factual_error"] * 2
    for s in cfg.systems:
        rows = [json.loads(x) for x in (xroot / "eval" / s.name / "results.jsonl").read_text().splitlines()]
        assert sorted(r["qid"] for r in rows) == sorted(i["qid"] for i in xitems)
        assert all(r["source_set"] == "conflictnq" and r["knowledge"] == "unknown" for r in rows)
        if s.kind == "base_rag":  # retrieved context: 3 passages indexed, top_n 5 -> all candidates
            for r in rows:
                fake = r["scenario"] == "factual_error"
                assert any("~fake" in c for c in r["retrieved_ids"]) == fake
                assert (r["relevant_ids"][0] in r["retrieved_ids"]) != fake
    assert "## conflictnq: by system and cell" in (xroot / "report/headline.md").read_text()
    assert set(json.loads((xroot / "report/metrics.json").read_text())["systems"]) == {s.name for s in cfg.systems}
    assert json.loads((root / "run.json").read_text())["data_hashes"]  # the set's file is hashed

    # a second run reuses the adapter and the finished evaluation (same table, nothing redone)
    again: list[str] = []
    assert run(cfg, echo=again.append) == table
    assert any("reusing adapter" in ln for ln in again)
    for s in cfg.systems:
        assert len((root / "eval" / s.name / "results.jsonl").read_text().splitlines()) == len(test)
        assert len((xroot / "eval" / s.name / "results.jsonl").read_text().splitlines()) == len(xitems)

    # `lorarag eval` builds a single system from the same run config (components) and reuses its
    # world, index and adapter: every test item answered once, with the LoRA's decisions recorded.
    import yaml

    from lorarag.core.config import dump_config
    from lorarag.eval.config import EvalConfig
    from lorarag.eval.runner import run_eval
    from lorarag.scenarios.records import load_scenarios
    from lorarag.study.eval_system import build_eval_system

    run_yaml = tmp_path / "run.yaml"
    run_yaml.write_text(dump_config(cfg))
    ecfg = EvalConfig(
        scenarios=str(root / "scenarios/test.jsonl"),
        components=str(run_yaml),
        system={"name": "lora_rag", "kind": "lora_rag"},
        out_dir=str(tmp_path / "standalone"),
    )
    items = run_eval(build_eval_system(ecfg), load_scenarios(ecfg.scenarios), ecfg.out_dir, batch_size=8)
    assert sorted(i.qid for i in items) == sorted(json.loads(x)["qid"] for x in test)
    assert all(i.route in ("context", "fallback", "abstain") for i in items)
    assert yaml.safe_load(run_yaml.read_text())["name"] == cfg.name
    # the run replayed the variant from lora_rag's verdicts; through the model it answers the same
    from lorarag.eval.records import load_results

    replayed = {r.qid: r for r in load_results(root / "eval/lora_rag_abstain")}
    assert json.loads((root / "eval/lora_rag_abstain/stamp.json").read_text())["replayed_from"] == "lora_rag"
    assert any(r.route != o.route for r, o in zip(replayed.values(), load_results(root / "eval/lora_rag")))
    vcfg = ecfg.model_copy(update={"system": variant.model_dump(), "out_dir": str(tmp_path / "variant")})
    real = run_eval(build_eval_system(vcfg), load_scenarios(vcfg.scenarios), vcfg.out_dir, batch_size=32)
    assert [(r.qid, r.verdict, r.route, r.answer, r.abstained) for r in real] == [
        (r.qid, replayed[r.qid].verdict, replayed[r.qid].route, replayed[r.qid].answer, replayed[r.qid].abstained)
        for r in real
    ]
    replayed = {r.qid: r for r in load_results(root / "eval/lora_rag_read")}
    assert json.loads((root / "eval/lora_rag_read/stamp.json").read_text())["readings_from"] == "base_rag"
    rcfg = ecfg.model_copy(update={"system": read_variant.model_dump(), "out_dir": str(tmp_path / "read")})
    real = run_eval(build_eval_system(rcfg), load_scenarios(rcfg.scenarios), rcfg.out_dir, batch_size=32)
    assert [(r.qid, r.route, r.answer, r.abstained) for r in real] == [
        (r.qid, replayed[r.qid].route, replayed[r.qid].answer, replayed[r.qid].abstained) for r in real
    ]
    assert "### Routing ablations of lora_rag (retrieved context)" in table
    # ... and refuses the saved gate when the config now asks for another rule (no silent reuse)
    stale = yaml.safe_load(run_yaml.read_text())
    stale["fallback"]["gate"]["rule"] = "youden"
    (tmp_path / "stale.yaml").write_text(yaml.safe_dump(stale))
    from lorarag.core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"calibrated with rule 'logistic' \(config: 'youden'\)"):
        build_eval_system(ecfg.model_copy(update={"components": str(tmp_path / "stale.yaml")}))


@pytest.mark.slow
def test_seeds_trains_one_adapter_per_seed_and_shares_adapter_free_results(tmp_path):
    """`lorarag seeds` on the reduced demo: two trainings, the second seed reuses the first's
    adapter-free results (same stamp), and the summary matches each run's own targets."""
    import hashlib

    import torch

    torch.set_num_threads(1)
    from lorarag.eval.records import load_results
    from lorarag.study.headline import kb_targets
    from lorarag.study.seeds import run_seeds

    cfg = _in_tmp(tmp_path)
    lines: list[str] = []
    md = run_seeds(cfg, [42, 7], echo=lines.append)
    runs = tmp_path / "runs"
    shas = []
    for run_name in ("ci-tiny-qwen3", "ci-tiny-qwen3-seed7"):
        adapter = Path(json.loads((runs / "train" / run_name / "adapter.json").read_text())["adapter"])
        shas.append(hashlib.sha256((adapter / "adapter_model.safetensors").read_bytes()).hexdigest())
        assert (adapter / "gate.json").is_file()
    assert shas[0] != shas[1]  # another LoRA init and batch order
    assert any(
        "reusing the first seed's results of closed_book_base, base_rag, prompted_detection, astute_rag, oracle" in ln
        for ln in lines
    )
    for s in cfg.systems:
        a = (runs / "ci-tiny/eval" / s.name / "results.jsonl").read_text().splitlines()
        b = (runs / "ci-tiny-seed7/eval" / s.name / "results.jsonl").read_text().splitlines()
        assert len(a) == len(b) > 0
        if not s.uses_adapter:
            assert a == b
    summary = json.loads((runs / "ci-tiny-seeds/seeds.json").read_text())
    assert summary["seeds"] == [42, 7] and summary["runs"] == ["ci-tiny", "ci-tiny-seed7"]
    info = json.loads((runs / "ci-tiny-seeds/run.json").read_text())
    assert info["seeds"]["train.0"] == 42 and info["seeds"]["train.1"] == 7 and info["git_sha"]
    assert (runs / "ci-tiny-seeds/config.yaml").is_file()
    # LoRA-RAG against every baseline, pooled over both seeds: the adapter's rivals and the router
    cells = summary["pooled"]["baselines"]
    assert cells and "## lora_rag against every baseline, pooled over 2 seeds" in md
    for c in cells:
        names = [o[0] for o in c["others"]]
        assert {"closed_book_lora", "memory_or_context", "rag_sft", "base_rag", "oracle router"} <= set(names)
        assert "oracle" not in c["best"].replace("oracle router", "")  # reads the gold chunk: not deployable
    for i, name in enumerate(summary["runs"]):
        own = kb_targets(cfg, load_results(runs / name / "eval/base_rag"), load_results(runs / name / "eval/lora_rag"))
        got = [(t["target"], t["values"][i], t["met"][i]) for t in summary["targets"]]
        assert [(n, ok) for n, _, ok in own] == [(n, ok) for n, _, ok in got]
        # seeds.json is strict JSON: an undefined value (a one-class AUROC) is null
        assert all((math.isnan(v) and w is None) or math.isclose(v, w) for (_, v, _), (_, w, _) in zip(own, got))
    assert "of 2 seeds" in md and (runs / "ci-tiny-seeds/seeds.md").read_text().endswith(md)
    # how held out: each run's ledger count at its read and its context-only probes (study/seeds_heldout.py)
    held = md.split("## Held out: test reads and context-only probes", 1)[1].split("\n## ", 1)[0].splitlines()
    rows = {ln.split(" | ")[0]: ln for ln in held if ln.startswith(("| 42 |", "| 7 |"))}
    assert set(rows) == {"| 42", "| 7"} and all("test split read" in ln for ln in rows.values())
    assert "| factual error |" in next(ln for ln in held if ln.startswith("| run |"))
    # the pooled table: every target once more, over both seeds, and the demo's cell differences
    assert "## Pooled over 2 seeds and the facts asked" in md
    assert [t["name"] for t in summary["pooled"]["targets"]] == [t["target"] for t in summary["targets"]]
    for t, pt in zip(summary["targets"], summary["pooled"]["targets"]):
        if None not in t["values"]:  # the pooled point is the mean over seeds
            assert math.isclose(pt["value"], sum(t["values"]) / 2)
    assert {d["cell"] for d in summary["pooled"]["differences"]} <= {
        "consistent (known)",
        "factual_error (known)",
        "outdated (known)",
        "irrelevant (known)",
        "update (known)",
        "consistent (unknown)",
    }
    assert all(len(d["mcnemar_p"]) == 2 for d in summary["pooled"]["differences"])
