"""`lorarag seeds`: per-seed configs, shared adapter-free results, and the aggregation (hand-computed)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from lorarag.core.config import load_config
from lorarag.study.seeds import seed_config, seed_rows, seeds_markdown, share_base_results
from lorarag.trained.config import RunConfig

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def demo() -> RunConfig:
    return load_config(REPO / "configs/run/cpu-demo.yaml", RunConfig)


def test_the_configs_own_seed_keeps_its_names_and_others_are_suffixed(demo):
    assert seed_config(demo, demo.train.seed) is demo
    c = seed_config(demo, 43)
    assert (c.name, c.train.run_name, c.train.seed) == ("cpu-demo-seed43", "cpu-demo-lora-seed43", 43)
    # only what depends on the training seed moves: same knowledge base, SFT rows, systems, evaluation
    assert c.data == demo.data and c.train.sft == demo.train.sft
    assert c.train.dataset == demo.train.dataset and c.systems == demo.systems and c.eval == demo.eval
    assert (demo.name, demo.train.seed) == ("cpu-demo", 42)  # the original is not mutated


def test_only_adapter_free_results_are_shared_and_nothing_is_overwritten(demo, tmp_path):
    src, dst = tmp_path / "a/eval", tmp_path / "b/eval"
    for s in demo.systems:
        (src / s.name).mkdir(parents=True)
        (src / s.name / "stamp.json").write_text("{}")
        (src / s.name / "results.jsonl").write_text(s.name)
    (dst / "oracle").mkdir(parents=True)
    (dst / "oracle/results.jsonl").write_text("mine")
    copied = share_base_results(demo, src, dst)
    assert sorted(copied) == ["astute_rag", "base_rag", "base_rag_retrieved", "closed_book_base", "prompted_detection"]
    assert (dst / "oracle/results.jsonl").read_text() == "mine"
    assert not (dst / "lora_rag").exists() and not (dst / "closed_book_lora").exists()
    assert (dst / "base_rag/results.jsonl").read_text() == "base_rag"


def test_seed_rows_mean_sd_range_and_count_by_hand():
    per_seed = [
        [("acc", 1.00, True), ("ofb", 0.04, True)],
        [("acc", 0.56, False), ("ofb", 0.04, True)],
        [("acc", 0.92, True), ("ofb", 0.12, False)],
    ]
    acc, ofb = seed_rows(per_seed)
    assert acc.values == (1.00, 0.56, 0.92) and acc.met == (True, False, True) and acc.n_met == 2
    assert acc.mean == pytest.approx(0.8266667, abs=1e-6)
    # sample sd: deviations 0.17333, -0.26667, 0.09333; squares sum 0.1098667; / 2 -> sqrt = 0.234379
    assert acc.sd == pytest.approx(0.234379, abs=1e-6)
    assert (acc.lo, acc.hi) == (0.56, 1.00)
    # t(0.975, df=2) = 4.302653; se = 0.234379 / sqrt(3) = 0.135319 -> half-width 0.582237
    assert acc.ci_lo == pytest.approx(0.8266667 - 0.582237, abs=1e-5) and acc.ci_hi == 1.0  # clipped
    assert ofb.mean == pytest.approx(0.0666667, abs=1e-6) and ofb.n_met == 2
    one = seed_rows(per_seed[:1])[0]
    assert one.sd == 0.0 and one.mean == 1.00 and math.isnan(one.ci_lo)


def test_a_value_undefined_at_one_seed_leaves_the_spread_undefined():
    row = seed_rows([[("auroc", 0.9, True)], [("auroc", math.nan, False)]])[0]
    assert math.isnan(row.mean) and math.isnan(row.sd) and row.n_met == 1
    assert "| auroc | 0.90 | nan ✗ | – | – | – | 1/2 |" in seeds_markdown([1, 2], [row], {})


def test_seed_rows_refuse_mismatched_targets():
    with pytest.raises(ValueError, match="different targets"):
        seed_rows([[("a", 1.0, True)], [("b", 1.0, True)]])
    with pytest.raises(ValueError, match="no seeds"):
        seed_rows([])


def test_the_lora_targets_are_counted_apart_from_base_rags():
    from lorarag.study.targets import BASE_TARGET

    rows = seed_rows(
        [
            [(f"{BASE_TARGET}, consistent", 0.68, False), ("LoRA-RAG, outdated", 1.0, True)],
            [(f"{BASE_TARGET}, consistent", 0.68, False), ("LoRA-RAG, outdated", 0.56, False)],
        ]
    )
    md = seeds_markdown([42, 43], rows, {})
    assert "All targets met at once: 0 of 2 seeds (none)." in md
    assert "All LoRA-RAG and detector targets met at once: 1 of 2 seeds (42)." in md


def test_markdown_marks_misses_and_counts_seeds_meeting_every_target():
    rows = seed_rows([[("acc", 1.0, True), ("ofb", 0.04, True)], [("acc", 0.56, False), ("ofb", 0.04, True)]])
    gate = {"threshold": 0.0596, "known_kept": 0.875, "unseen_rejected": 0.975, "auroc": 0.933}
    md = seeds_markdown([42, 43], rows, {42: gate, 43: None})
    # t(0.975, df=1) = 12.7062; se = 0.3111 / sqrt(2) = 0.22 -> [0, 1] after clipping
    assert "| acc | 1.00 | 0.56 ✗ | 0.78 ± 0.31 | [0.00, 1.00] | 0.56–1.00 | 1/2 |" in md
    assert "| ofb | 0.04 | 0.04 | 0.04 ± 0.00 | [0.04, 0.04] | 0.04–0.04 | 2/2 |" in md
    assert "All targets met at once: 1 of 2 seeds (42)." in md
    assert "| 42 | – | 0.0596 | – | 0.88 | 0.97 | 0.933 |" in md and "| 43 | – | – | – | – | – | – |" in md  # no override
    # as a seeds run records it: whether the run used the gate, and the AUROC's upper bound beside the estimate
    used = {**gate, "in_use": "on, no override", "auroc_upper": 0.7275}
    assert "| 42 | on, no override | 0.0596 | – | 0.88 | 0.97 | 0.933 (upper 0.728) |" in seeds_markdown(
        [42], rows[:1], {42: used}
    )


def test_bad_seed_lists_are_one_line_errors():
    import subprocess
    import sys

    script = Path(sys.executable).parent / "lorarag"  # the console script, as a user runs it
    for bad in ("42,x", "42,42", ","):
        p = subprocess.run(
            [str(script), "seeds", str(REPO / "configs/run/cpu-demo.yaml"), "--seeds", bad],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=120,
        )
        assert p.returncode == 2, p.stderr
        assert len(p.stderr.strip().splitlines()) == 1 and p.stderr.startswith("error: --seeds")


def test_stamps_change_only_for_systems_a_gate_setting_can_affect(demo):
    """A new gate rule must redo LoRA-RAG, never prompted detection (it runs without a gate) or the
    adapter-free systems."""
    from lorarag.study.evaluate import system_stamp

    fb = demo.fallback.model_copy(update={"gate": demo.fallback.gate.model_copy(update={"rule": "youden"})})
    other = demo.model_copy(update={"fallback": fb})
    for s in demo.systems:
        same = system_stamp(demo, s, [], None, 0.05) == system_stamp(other, s, [], None, 0.05)
        assert same == (s.kind != "lora_rag"), s.name


def test_a_config_without_the_base_vs_lora_pair_fails_before_any_run(demo, tmp_path):
    from lorarag.core.errors import ConfigError
    from lorarag.study.seeds import run_seeds

    lone = demo.model_copy(update={"systems": [x for x in demo.systems if x.kind != "base_rag"], "runs_dir": str(tmp_path)})
    with pytest.raises(ConfigError, match="compares base_rag with lora_rag"):
        run_seeds(lone, [42, 43], echo=lambda _: None)
    assert not any(tmp_path.iterdir())  # nothing trained, nothing written


def test_research_config_has_120_items_in_every_headline_cell_and_plans_three_seeds(tmp_path):
    """configs/experiments/research.yaml: 100 organisations of 5 facts, 30 taught (24 tested, 6 the gate's
    dev), 60 never learned (48 tested). A known cell holds 24 x 5 = 120 facts, each asked once in the
    wording its rows leave out (outdated: 24 x 4 = 96, a founding year has no older version); a
    never-learned cell a seeded 120 of 48 x 5 = 240; the unanswerable cells one question a test
    organisation (24 and 48). One of 25 items cannot separate 0.84 from 0.90. `lorarag seeds` plans
    one run per seed."""
    from collections import Counter

    from lorarag.study.kb import kb_scenarios, prepare_kb
    from lorarag.study.run_folder import Paths
    from lorarag.study.seeds import run_seeds

    cfg = load_config(REPO / "configs/experiments/research.yaml", RunConfig)
    paths = Paths(tmp_path / cfg.name)
    kb = prepare_kb(cfg.model_copy(update={"runs_dir": str(tmp_path)}), paths)
    test, dev_known, dev_unseen = kb_scenarios(cfg, kb, paths)
    cells = Counter((s.scenario, s.knowledge) for s in test)
    want = {(s, k): 120 for s in ("consistent", "factual_error", "outdated", "irrelevant") for k in ("known", "unknown")}
    # update: no fact taught its older value (fraction 0)
    assert cells == {**want, ("outdated", "known"): 96, ("unanswerable", "known"): 24, ("unanswerable", "unknown"): 48}
    known_orgs = {s.cluster for s in test if s.knowledge == "known"}
    assert len(known_orgs) == 24 and len({s.cluster for s in test if s.knowledge == "unknown"}) == 48
    tw = kb.summary["test_wordings"]
    # the 120 known facts and the 24 known organisations' unanswerable questions, none in a trained wording
    assert tw["items"] == tw["held_out"] == 144 and tw["by"]["trained"] == 0
    # the gate's dev: the 6 dev organisations' 30 facts once each (their held-out wording), and 40
    # sampled never-learned dev facts (calibration.max_items) in all 6 wordings; none a test organisation's
    assert len(dev_known) == len({s.fact_id for s in dev_known}) == 30
    assert len(dev_unseen) == 6 * len({s.fact_id for s in dev_unseen}) == 6 * cfg.calibration.max_items
    dev_orgs = {s.cluster for s in dev_known + dev_unseen}
    assert not dev_orgs & {s.cluster for s in test}
    lines: list[str] = []
    run_seeds(cfg, [42, 43, 44], dry_run=True, echo=lines.append)
    assert sum(ln.startswith("seed ") for ln in lines) == 3


def test_research_updates_has_an_update_cell_of_over_100_and_keeps_the_others(tmp_path):
    """configs/experiments/research-updates.yaml: 110 organisations, 66 taught (53 tested, 13 the gate's dev).
    Half the taught facts with an older version (4 of 5 a fact set: not the founding year) are taught
    it; the test's are asked on `update` only, so it and `outdated` split the known test facts'
    212 eligible ones (103 and 109), and the 53 x 5 - 103 = 162 current facts leave 120 a cell."""
    from collections import Counter

    from lorarag.study.kb import kb_scenarios, prepare_kb
    from lorarag.study.run_folder import Paths

    cfg = load_config(REPO / "configs/experiments/research-updates.yaml", RunConfig)
    cfg = cfg.model_copy(update={"runs_dir": str(tmp_path)})
    paths = Paths(tmp_path / cfg.name)
    kb = prepare_kb(cfg, paths)
    test, _, _ = kb_scenarios(cfg, kb, paths)
    cells = Counter((s.scenario, s.knowledge) for s in test)
    assert cells[("update", "known")] == 103 and cells[("outdated", "known")] == 109
    assert cells[("update", "known")] + cells[("outdated", "known")] == 53 * 4
    assert all(cells[(s, k)] == 120 for s in ("consistent", "factual_error", "irrelevant") for k in ("known", "unknown"))
    assert len({s.cluster for s in test if s.knowledge == "known"}) == 53
    stale = {s.fact_id for s in test if s.scenario == "update"}
    assert not stale & {s.fact_id for s in test if s.scenario != "update"}  # a stale memory is not the truth elsewhere
    assert kb.summary["updates"]["taught_older"] - kb.summary["updates"]["tested"] == 34  # the dev's update rows


def test_research_stratified_gives_the_gates_dev_split_chinese_known_facts(tmp_path):
    """The world's 10 Chinese organisations of 100: drawn over all organisations (research.yaml), the
    6 known dev organisations are all English, so the gate never sees a Chinese known fact's doubt;
    drawn within each language (research-stratified.yaml), 1 of the 6 is Chinese (0.3 x 10 = 3 known
    Chinese organisations, 0.2 of them dev), and the test keeps 24 known organisations either way."""
    from lorarag.study.kb import prepare_kb
    from lorarag.study.run_folder import Paths

    langs = {}
    for name in ("research", "research-stratified"):
        cfg = load_config(REPO / f"configs/experiments/{name}.yaml", RunConfig)
        kb = prepare_kb(cfg.model_copy(update={"runs_dir": str(tmp_path)}), Paths(tmp_path / cfg.name))
        dev = {q.cluster: q.language for q in kb.groups["known_dev"]}
        test = {q.cluster for q in kb.groups["known"]}
        langs[name] = (sorted(dev.values()).count("zh"), len(dev), len(test))
    assert langs == {"research": (0, 6, 24), "research-stratified": (1, 6, 24)}


def _kb_items(system: str, fe_right: int, cons_right: int) -> list:
    """10 factual-error (known) and 10 consistent (never-learned) items in 5 documents of 2 each;
    the first `fe_right` / `cons_right` of each cell answered with the gold value."""
    from tests.eval_fixtures import make_item

    def cell(scenario: str, knowledge: str, right: int, wrong_source: bool) -> list:
        return [
            make_item(
                system=system,
                qid=f"{scenario}{i}",
                fact_id=f"{scenario}{i}",
                cluster=f"doc{i // 2}",
                scenario=scenario,
                knowledge=knowledge,
                gold_answers=("Oslo",),
                context_answer="Bergen" if wrong_source else "Oslo",
                answer="Oslo" if i < right else ("Bergen" if wrong_source else "Rome"),
            )
            for i in range(10)
        ]

    return cell("factual_error", "known", fe_right, True) + cell("consistent", "unknown", cons_right, False)


def test_kb_targets_of_several_seeds_aggregate_and_pool_over_resampled_documents():
    """Every seed reports the same targets (their names hold no measured number), and the pooled
    table reads them on resamples of documents, where an item repeats. Base RAG: factual error 1/10,
    consistent 10/10; seed 1 LoRA-RAG 8/10 and 9/10 (+0.70, −0.10), seed 2 6/10 and 7/10 (+0.50, −0.30)."""
    from functools import partial

    from lorarag.study.headline import kb_targets, target_values
    from lorarag.study.pooled_targets import pooled_rows

    cfg = load_config(REPO / "configs/run/ci-tiny.yaml", RunConfig)  # a `contains` KB: absolute targets too
    base, one, two = _kb_items("b", 1, 10), _kb_items("l", 8, 9), _kb_items("l", 6, 7)
    per_seed = [kb_targets(cfg, base, one), kb_targets(cfg, base, two)]
    rows = seed_rows(per_seed)  # the same targets at both seeds
    assert (rows[0].values, rows[1].values) == (pytest.approx((0.7, 0.5)), pytest.approx((-0.1, -0.3)))
    for lora, targets in ((one, per_seed[0]), (two, per_seed[1])):  # the pooled statistic, on the items as asked
        got = target_values(cfg, base, lora)
        assert [n for n, _ in got] == [n for n, _, _ in targets]
        assert all((v != v and w != w) or v == pytest.approx(w) for (_, v), (_, w, _) in zip(got, targets))
    # a resample drawing doc0 twice and doc4: base right on item 0 twice (2/6), LoRA-RAG seed 1 on
    # items 0-1 twice (4/6): +0.33
    docs = ("doc0", "doc0", "doc4")
    drawn = [[r for d in docs for r in items if r.cluster == d] for items in (base, one)]
    assert target_values(cfg, *drawn)[0][1] == pytest.approx(4 / 6 - 2 / 6)
    pooled = pooled_rows([(base, one), (base, two)], partial(target_values, cfg), resamples=200)
    assert [p.name for p in pooled] == [r.target for r in rows]
    assert pooled[0].value == pytest.approx(0.6) and pooled[0].lo <= 0.6 <= pooled[0].hi


def test_a_language_with_no_known_dev_fact_is_named_before_training(tmp_path):
    """Hand-built: the test's known items are 3 English and 2 Chinese, one never-learned Swahili; the
    dev known readings English only. Chinese is named with its 2 items; Swahili is not (never-learned
    items are not what the threshold keeps); English is covered. On research.yaml's own split (0 of 6
    dev organisations Chinese) the run says it before any training."""
    from lorarag.scenarios.records import Scenario
    from lorarag.study.calibration import languages_without_dev_known

    def item(i: int, lang: str, knowledge: str = "known") -> Scenario:
        return Scenario(
            qid=f"q{i}",
            fact_id=f"f{i}",
            question="?",
            gold_answers=("x",),
            relevant_ids=(),
            scenario="consistent",
            presented=(),
            context_answer="x",
            knowledge=knowledge,
            language=lang,
        )

    test = [item(0, "en"), item(1, "en"), item(2, "en"), item(3, "zh"), item(4, "zh"), item(5, "sw", "unknown")]
    assert languages_without_dev_known(test, [item(9, "en")]) == {"zh": 2}
    assert languages_without_dev_known(test, [item(9, "en"), item(8, "zh")]) == {}

    from lorarag.core.numerics import NumericsConfig
    from lorarag.study.pipeline import run

    cfg = load_config(REPO / "configs/experiments/research.yaml", RunConfig).model_copy(
        # the base model is first needed by training; the kernel pins only by torch, which the suite has loaded
        update={"runs_dir": str(tmp_path), "prepare_base": None, "numerics": NumericsConfig()}
    )
    lines: list[str] = []
    with pytest.raises(_StopBeforeTraining):
        run(cfg, echo=_stop_at_train(lines))
    # 57 answerable known Chinese items and the 3 Chinese known organisations' unanswerable questions
    assert any("no known fact in 'zh' (60 known test items are)" in ln for ln in lines)


class _StopBeforeTraining(Exception):
    pass


def _stop_at_train(lines: list[str]):
    def echo(line: str) -> None:
        lines.append(line)
        if line.startswith("[4/7]"):  # the train step: everything this test needs is said by now
            raise _StopBeforeTraining

    return echo


def test_seeds_declined_sums_each_deployable_systems_declines_over_seeds():
    """ci-tiny, two seeds of three consistent never-learned items. RAG-SFT declines 2 at seed 1 and 1 at
    seed 2 (3 of 6); closed-book LoRA declines 1 at seed 2; LoRA-RAG and base RAG none. The columns are
    LoRA-RAG, then the run's deployable systems in config order; the oracle router is not one."""
    from lorarag.study.seeds import seeds_declined
    from tests.eval_fixtures import make_item

    cfg = load_config(REPO / "configs/run/ci-tiny.yaml", RunConfig)
    names = ("closed_book_lora", "base_rag", "lora_rag", "rag_sft", "oracle")

    def seed(declines: dict[str, set[str]]) -> dict:
        return {
            n: [
                make_item(
                    system=n, qid=f"c{i}", fact_id=f"c{i}", knowledge="unknown", abstained=f"c{i}" in declines.get(n, set())
                )
                for i in range(1, 4)
            ]
            for n in names
        }

    lines = seeds_declined(cfg, [seed({"rag_sft": {"c1", "c2"}}), seed({"rag_sft": {"c3"}, "closed_book_lora": {"c1"}})])
    assert lines[0] == "### Declined answerable items (retrieved context, summed over 2 seeds)"
    assert "| scenario | knowledge | n | lora_rag | closed_book_lora | base_rag | rag_sft |" in lines
    assert "| consistent | unknown | 6 | 0 | 1 | 0 | 3 |" in lines


def test_split_seeds_run_every_training_seed_at_every_split_each_with_its_own_rows_and_index(tmp_path):
    """`--split-seeds 0,5`: the config's own split keeps its names, another split runs under its own
    name, so its SFT rows, index, adapters and test items are its own; the dry run lists 2 x 2 runs."""
    from typer.testing import CliRunner

    from lorarag.cli import app

    out = CliRunner().invoke(
        app,
        [
            "seeds",
            str(REPO / "configs/run/demo.yaml"),
            "--seeds",
            "42,43",
            "--split-seeds",
            "0,5",
            "--dry-run",
            "--set",
            f"runs_dir={tmp_path}",
        ],
    )
    assert out.exit_code == 0, out.output
    runs = [line.split(": ", 1)[0] for line in out.output.splitlines() if line.startswith("seed ")]
    assert runs == ["seed 42/split 0", "seed 43/split 0", "seed 42/split 5", "seed 43/split 5"]
    assert "runs/demo-split5/sft/train.jsonl" not in out.output  # runs_dir moved: paths follow ${runs_dir}
    assert f"{tmp_path}/demo-split5/sft/train.jsonl" in out.output and f"{tmp_path}/demo/sft/train.jsonl" in out.output
    assert "training run 'demo-lora-split5-seed43'" in out.output


def test_split_seeds_refuse_a_config_whose_rows_do_not_follow_its_name(demo):
    from lorarag.core.errors import ConfigError
    from lorarag.study.seeds import check_splits

    other = demo.model_copy(
        update={
            "name": "cpu-demo-split5",
            "data": demo.data.model_copy(update={"splits": demo.data.splits.model_copy(update={"seed": 5})}),
        }
    )
    with pytest.raises(ConfigError, match="share train.dataset"):
        check_splits([demo, other])  # same train.dataset: the second split would replace the first's rows


def test_the_cpu_kind_of_every_run_is_read_from_its_run_json_and_named_where_runs_differ(tmp_path):
    from lorarag.study.seeds import cpu_line, run_cpu

    for name, flags in (("a", ["avx2"]), ("b", ["avx2", "avx512_bf16", "amx"])):
        (tmp_path / name).mkdir()
        (tmp_path / name / "run.json").write_text(json.dumps({"numerics": {"cpu_flags": flags}}))
    a, b = run_cpu(tmp_path / "a"), run_cpu(tmp_path / "b")
    assert (a, b, run_cpu(tmp_path / "none")) == ("avx2", "avx2+avx512_bf16+amx", "unknown")
    assert cpu_line({42: a, 43: a}).strip() == "Every run on one CPU kind: avx2."
    assert "differ" in cpu_line({42: a, 43: b}) and "43 avx2+avx512_bf16+amx" in cpu_line({42: a, 43: b})


def test_a_bad_split_seed_list_is_a_one_line_error():
    import subprocess
    import sys

    script = Path(sys.executable).parent / "lorarag"  # the console script, as a user runs it
    for bad in ("1,x", "1,1"):
        p = subprocess.run(
            [str(script), "seeds", str(REPO / "configs/run/demo.yaml"), "--seeds", "42", "--split-seeds", bad],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=120,
        )
        assert p.returncode == 2, p.stderr
        assert len(p.stderr.strip().splitlines()) == 1 and p.stderr.startswith("error: --split-seeds")


def test_the_rag_sft_headline_config_is_the_demo_plus_the_two_rag_sft_baselines():
    """configs/experiments/demo-rag-sft.yaml restates the demo's systems (a list replaces its base's): it must
    stay the demo recipe, every other setting and system unchanged, with RAG-SFT and the rule read by it added."""
    cfg = load_config(REPO / "configs/experiments/demo-rag-sft.yaml", RunConfig)
    demo = load_config(REPO / "configs/run/demo.yaml", RunConfig, {"name": cfg.name})  # its paths follow the name
    assert cfg.systems[: len(demo.systems)] == demo.systems
    added = cfg.systems[len(demo.systems) :]
    assert [(s.name, s.kind, s.adapter) for s in added] == [
        ("rag_sft", "rag_sft", None),
        ("memory_or_context_rag_sft", "memory_or_context", "rag_sft"),
    ]
    assert cfg.model_dump(exclude={"systems"}) == demo.model_dump(exclude={"systems"})
