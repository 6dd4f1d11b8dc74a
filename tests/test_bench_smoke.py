"""Benchmarks: metric functions against ranx and by hand; both bench commands run end to end."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from lorarag.bench import retrieval, speed

from .conftest import SHARED_DATA, shared_data

QRELS = {"q1": {"d1": 1, "d3": 2}, "q2": {"d9": 1}, "q3": {"d4": 1}}
RUN = {"q1": ["d2", "d3", "d1", "d5"], "q2": ["d1", "d2"], "q3": ["d4"]}


def test_metrics_hand_computed() -> None:
    m = retrieval.evaluate(RUN, QRELS)
    assert m["recall@5"] == pytest.approx((1 + 0 + 1) / 3)
    assert m["mrr@10"] == pytest.approx((1 / 2 + 0 + 1) / 3)
    # q1: DCG = 2/log2(3) + 1/log2(4); IDCG = 2/log2(2) + 1/log2(3).
    q1 = (2 / math.log2(3) + 1 / 2) / (2 + 1 / math.log2(3))
    assert m["ndcg@10"] == pytest.approx((q1 + 0 + 1) / 3)


def test_metrics_match_ranx() -> None:
    from ranx import Qrels, Run, evaluate

    scores = {q: {d: float(len(ds) - i) for i, d in enumerate(ds)} for q, ds in RUN.items()}
    ref = evaluate(Qrels(QRELS), Run(scores), ["recall@5", "recall@10", "mrr@10", "ndcg@10"])
    ours = retrieval.evaluate(RUN, QRELS)
    for k, v in ref.items():
        assert ours[k] == pytest.approx(v, abs=1e-9), k


def test_bench_retrieval_on_piaf(tmp_path: Path, capsys) -> None:
    shared_data("piaf-fr")
    res = retrieval.run(SHARED_DATA, ["piaf-fr"], "test", tmp_path / "r.json")["piaf-fr"]
    assert res["n_queries"] == 105 and res["n_docs"] == 530
    # The baseline reproduces the number measured for the issue; ours at least matches it.
    assert res["baseline"]["recall@10"] == pytest.approx(0.981, abs=1e-3)
    assert res["baseline"]["mrr@10"] == pytest.approx(0.813, abs=1e-3)
    assert res["ours"]["recall@10"] >= res["baseline"]["recall@10"]
    assert res["ours"]["mrr@10"] >= res["baseline"]["mrr@10"]
    assert json.loads((tmp_path / "r.json").read_text())["piaf-fr"]["ours"] == res["ours"]
    assert "baseline (bigram bm25)" in capsys.readouterr().out


def test_bench_speed_small(tmp_path: Path, capsys) -> None:
    assert speed.make_corpus(50) == speed.make_corpus(50)  # seeded
    res = speed.run(3000, 50, 1, 32, tmp_path / "s.json")
    assert res["n_chunks"] == 3000 and res["bm25_found_in_top10"] > 0.5
    assert set(res) >= {
        "bm25_build_s",
        "bm25_queries_per_s",
        "faiss_flat_queries_per_s",
        "faiss_hnsw_build_s",
        "original_s_per_query",
        "speedup_per_query",
    }
    assert "speed-up per query" in capsys.readouterr().out


def test_original_baseline_finds_the_source_chunk(tmp_path: Path) -> None:
    texts = speed.make_corpus(300)
    files = speed.write_files(texts, tmp_path / "c")
    q = " ".join(texts[123].split()[10:15])
    top = speed.original_per_question(files, q, k=5)
    assert 123 in top


def test_bench_cpu_on_a_tiny_model(tmp_path: Path, tiny_models, capsys) -> None:
    import re

    from lorarag.bench import cpu

    rx = cpu.upper_half_regex(4)
    assert re.fullmatch(rx, "base_model.model.model.layers.2.mlp.down_proj")
    assert re.fullmatch(rx, "base_model.model.model.layers.3.self_attn.k_proj")
    assert not re.fullmatch(rx, "base_model.model.model.layers.1.self_attn.q_proj")
    assert not re.fullmatch(rx, "base_model.model.model.layers.3.self_attn.q_norm")
    res = cpu.run(tiny_models["lm"], 2, 4, 6, 4, tmp_path / "c.json")
    steps = res["train_step"]
    assert [s["speedup"] for s in steps][0] == 1.0 and len(steps) == 5
    # the upper-half variant adapts half of the layers: half the LoRA parameters of the others
    assert steps[4]["lora_params"] * 2 == steps[0]["lora_params"] == steps[2]["lora_params"]
    # the shared prefix is the same computation (exact in fp32: test_train_swift); here under bf16
    # autocast, after the same optimizer steps on the same batches, the last loss agrees to rounding
    assert steps[2]["loss"] == pytest.approx(steps[1]["loss"], rel=2e-3)
    g = res["generation"]
    assert g["n"] == 6 and 0.0 <= g["same_greedy_text"] <= 1.0 and g["fp32_s"] > 0 and g["bf16_eager_s"] > 0
    assert g["prefix_cache_s"] > 0 and 0.0 <= g["prefix_cache_same_greedy_text"] <= 1.0
    assert json.loads((tmp_path / "c.json").read_text())["generation"]["n"] == 6
    assert "speed-up vs baseline" in capsys.readouterr().out


@pytest.mark.slow
def test_gpu_check_runs_the_gpu_config_small_on_cpu(tmp_path: Path, monkeypatch) -> None:
    """`lorarag bench gpu` path, tiny and on the CPU: the GPU config's retrieval/reranker/systems run
    end to end on local random checkpoints, with stage times in the summary."""
    import torch
    import yaml

    torch.set_num_threads(1)
    repo = Path(__file__).resolve().parent.parent
    monkeypatch.chdir(tmp_path)  # the config's relative runs/ paths land here
    from lorarag.bench.gpu_check import main

    main(
        [
            "--shape",
            "tiny",
            "--device",
            "cpu",
            "--config",
            str(repo / "configs/run/qwen3-4b.yaml"),
            "--models",
            str(tmp_path / "models"),
            "--steps",
            "1",
            "--per-cell",
            "1",
            "--cal-items",
            "2",
            "--train-kind",
            "peft",
            "--out",
            str(tmp_path / "summary.json"),
        ]
    )
    s = json.loads((tmp_path / "summary.json").read_text())
    steps = [st["msg"].split()[1] for st in s["stages"] if st["msg"].startswith("[")]
    assert s["stages"][0]["msg"].startswith("building random checkpoints")
    assert steps == ["data", "index", "scenarios", "train", "calibrate", "evaluate", "report"]
    assert (s["shape"], s["device"], s["train"]) == ("tiny", "cpu", "peft") and s["wall_s"] > 0
    cfg = yaml.safe_load((tmp_path / "runs/gpu-check-tiny/derived-config.yaml").read_text())
    assert cfg["rag"]["retrieval"]["mode"] == "hybrid" and cfg["rag"]["reranker"]["backend"] == "transformers"
    assert cfg["rag"]["generator"]["kind"] == "transformers" and cfg["train"]["model"].endswith("models/tiny/lm")
    assert cfg["data"]["world"]["n_orgs"] == 30 and cfg["rag"]["corpus"]["paths"] == []  # the world, resized
    assert cfg["rag"]["generator"]["max_batch_tokens"] == 65536  # HF generate's KV cache bounded
    assert all(st["peak_gpu_mib"] == 0 for st in s["stages"])  # no GPU polled here
    assert "gradient_accumulation_steps" not in cfg["train"]["swift"]  # dropped for the peft loop, said so
    assert [x["name"] for x in cfg["systems"]] == [
        x["name"] for x in yaml.safe_load((repo / "configs/run/qwen3-4b.yaml").read_text())["systems"]
    ]


def test_gpu_memory_peak_per_stage_window() -> None:
    """Per-stage peaks read the samples in [stage start, next stage start)."""
    from lorarag.bench.gpu_check import GpuMemory

    mem = GpuMemory(t0=0.0)
    mem.samples = [(0.5, 100), (1.0, 900), (2.0, 300), (2.5, 4000), (3.0, 50)]
    assert mem.peak == 4000
    assert (mem.peak_between(0, 2.0), mem.peak_between(2.0, 2.5), mem.peak_between(2.5, float("inf"))) == (900, 300, 4000)
    assert mem.peak_between(5, 6) == 0 and GpuMemory(0.0).peak == 0


def test_bench_registry_and_cli_agree() -> None:
    """`lorarag bench` is exactly `BENCHMARKS`, in its order, each with its docstring's first line
    as help; no command module adds a bench of its own beside the registry."""
    from typer.main import get_command
    from typer.testing import CliRunner

    from lorarag.cli import app
    from lorarag.cli.bench import BENCHMARKS

    expected = ["retrieval", "speed", "eval", "rag", "cpu", "numerics", "gpu", "serve", "engine", "scale", "preference"]
    assert list(BENCHMARKS) == expected
    group = get_command(app).commands["bench"]
    assert list(group.commands) == expected
    for name, command in BENCHMARKS.items():
        assert group.commands[name].callback.__wrapped__ is command, name  # typer wraps the function
        assert (command.__doc__ or "").strip(), f"{name}: no help"
    out = CliRunner().invoke(app, ["bench", "--help"], env={"COLUMNS": "250"})
    assert out.exit_code == 0
    listed = [
        line.strip("│ ").split()[0]
        for line in out.stdout.splitlines()
        if line.startswith("│ ") and line.strip("│ ").split()[0] in BENCHMARKS
    ]
    assert listed == expected
    for command in BENCHMARKS.values():
        assert command.__doc__.strip().splitlines()[0].strip() in out.stdout


def test_bench_preference_reports_the_best_run_of_each_and_their_ratio() -> None:
    """The summary keeps each loop's fastest run, divides hand by TRL and checks log 2 at step 1;
    TRL that did not run is one line naming its error, with no ratio. Pure logic: nothing is timed."""
    from lorarag.bench import preference as bp

    assert bp.steps_per_s([10.0, 10.5, 11.0, 12.0]) == pytest.approx(3 / 2.0)  # the first step left out
    with pytest.raises(ValueError):
        bp.steps_per_s([1.0, 2.0])
    hand = [{"steps_per_s": 2.0, "first_loss": math.log(2)}, {"steps_per_s": 3.0, "first_loss": math.log(2)}]
    trl = [{"steps_per_s": 1.5, "first_loss": math.log(2) + 1e-5}, {"steps_per_s": 1.0, "first_loss": 0.7}]
    s = bp.summarise(hand, trl)
    assert s["ratio_hand_over_trl"] == pytest.approx(2.0) and s["trl_error"] is None
    assert s["hand"]["runs"] == [2.0, 3.0] and s["trl"]["steps_per_s"] == 1.5
    assert s["hand"]["first_loss_is_log2"] and s["trl"]["first_loss_is_log2"]
    lines = bp.table(s, "9.9")
    assert lines[-1] == "hand / TRL steps/s: 2.00x (the hand loop is faster)"
    assert any(ln.startswith("| TRL 9.9 DPOTrainer | 1.50 | 1.50, 1.00 | ") and ln.endswith("| yes |") for ln in lines)
    assert bp.summarise(hand, [{"steps_per_s": 6.0, "first_loss": 0.5}])["trl"]["first_loss_is_log2"] is False
    failed = bp.summarise(hand, "TypeError: no such argument")
    assert failed["ratio_hand_over_trl"] is None and failed["trl"] is None
    out = bp.table(failed, "9.9")
    assert out[-1] == "TRL 9.9 DPOTrainer cannot run this configuration on CPU: TypeError: no such argument"
    assert not any("DPOTrainer |" in ln for ln in out)


def test_bench_preference_pairs_are_seeded_preference_rows(tmp_path: Path) -> None:
    from lorarag.bench.preference import make_pairs
    from lorarag.train.preference import read_pairs, write_pairs

    pairs = make_pairs(5, 0)
    assert pairs == make_pairs(5, 0) and pairs != make_pairs(5, 1)
    assert len(read_pairs(write_pairs(pairs, tmp_path / "b.pairs.jsonl"))) == 5  # valid: chosen != rejected
