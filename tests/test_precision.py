"""`auto` precision follows the CPU (core/precision.py), and `--set key=value` changes one config key
from the command line (core/overrides.py), validated like the YAML."""

from __future__ import annotations

import logging
from importlib.metadata import version

import pytest

from lorarag.core.errors import ConfigError
from lorarag.core.overrides import parse_sets
from lorarag.core.precision import cpu_bf16_why, describe, native_bf16, resolve
from tests.conftest import REPO

AVX2 = ["avx2"]
AVX512 = ["avx2", "avx512f"]
BF16 = ["avx2", "avx512f", "avx512_bf16"]
AMX = ["avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"]


def demo(bf16="auto", dtype="auto") -> dict:
    return {
        "train": {"kind": "peft", "swift": {"torch_dtype": "float32", "bf16": bf16}},
        "rag": {
            "generator": {"kind": "transformers", "dtype": dtype},
            "embedder": {"kind": "transformers", "dtype": "auto", "device": "cuda"},
        },
    }


@pytest.mark.parametrize(
    "flags, native, bf16, dtype, why",
    [
        (AVX2, None, False, "float32", "no native bf16 (AVX2 only)"),
        (AVX512, None, False, "float32", "no native bf16 (AVX-512 without BF16)"),
        (BF16, "AVX512-BF16", True, "bfloat16", "native bf16 (AVX512-BF16)"),
        (AMX, "AMX", True, "bfloat16", "native bf16 (AMX)"),
        ([], None, False, "float32", "no native bf16 (CPU features unknown)"),
    ],
)
def test_auto_picks_bf16_only_where_the_cpu_has_it(flags, native, bf16, dtype, why):
    out = resolve(demo(), flags)
    assert native_bf16(flags) == native and cpu_bf16_why(flags) == why
    assert out["train"]["swift"] == {"torch_dtype": "float32", "bf16": bf16}
    assert out["rag"]["generator"]["dtype"] == dtype
    assert out["rag"]["embedder"]["dtype"] == "bfloat16"  # a GPU device: bf16 whatever the CPU
    assert describe(out, flags) == {"dtype": dtype, "train": dtype, "generator": dtype, "why": why}


def test_auto_on_the_gpu_trainer_is_bf16_and_other_values_stay():
    data = {"train": {"kind": "swift", "swift": {"bf16": "auto", "lr": "auto"}}, "name": "auto", "dtype": "auto"}
    out = resolve(data, AVX2)
    assert out == {"train": {"kind": "swift", "swift": {"bf16": True, "lr": "auto"}}, "name": "auto", "dtype": "float32"}
    assert data["train"]["swift"]["bf16"] == "auto"  # the input is not changed


def test_explicit_bf16_without_native_support_runs_with_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="lorarag.core.precision"):
        out = resolve(demo(bf16=True, dtype="bfloat16"), AVX2)
    assert out["train"]["swift"]["bf16"] is True and out["rag"]["generator"]["dtype"] == "bfloat16"
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 2 and all("emulated" in w and "AVX2 only" in w for w in warned)
    assert sorted(w.split(":")[0] for w in warned) == ["rag.generator.dtype", "train.swift.bf16"]
    assert describe(out, AVX2)["why"] == "no native bf16 (AVX2 only): bf16 set explicitly, emulated and slow"
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="lorarag.core.precision"):
        resolve(demo(bf16=True, dtype="bfloat16"), AMX)
    assert not caplog.records


def test_the_demo_config_resolves_to_this_machines_choice():
    from lorarag.core.config import load_config
    from lorarag.trained.config import RunConfig

    cfg = load_config(REPO / "configs/run/cpu-demo.yaml", RunConfig)
    native = native_bf16() is not None
    assert cfg.train.swift["bf16"] is native
    assert cfg.rag.generator.dtype == ("bfloat16" if native else "float32")


@pytest.mark.parametrize(
    "items, want",
    [
        (["eval.max_per_cell=10"], {"eval": {"max_per_cell": 10}}),
        (
            ["train.swift.bf16=false", "train.seed=7", "name=x y"],
            {"train": {"swift": {"bf16": False}, "seed": 7}, "name": "x y"},
        ),
        (
            ["eval.scenarios=[consistent, irrelevant]", "eval.max_per_cell=null"],
            {"eval": {"scenarios": ["consistent", "irrelevant"], "max_per_cell": None}},
        ),
        (["rag.generator.model=a=b"], {"rag": {"generator": {"model": "a=b"}}}),
    ],
)
def test_set_items_become_a_nested_mapping_of_yaml_values(items, want):
    assert parse_sets(items) == want


@pytest.mark.parametrize(
    "item, needle",
    [
        ("eval.max_per_cell", "expected key=value"),
        ("=3", "expected key=value"),
        ("eval..x=1", "expected key=value"),
        ("eval.x=[1", "not valid YAML"),
    ],
)
def test_a_malformed_set_is_a_config_error(item, needle):
    with pytest.raises(ConfigError, match=needle.replace("[", r"\[")):
        parse_sets([item])


def test_set_on_run_is_validated_like_the_yaml_and_shown_in_the_plan(cli):
    code, out, err = cli(
        "run",
        REPO / "configs/run/cpu-demo.yaml",
        "--dry-run",
        "--set",
        "eval.max_per_cell=7",
        "--set",
        "train.swift.bf16=false",
    )
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("precision ") and "bf16" in lines[0]
    assert "<= 7 per cell" in out
    code, out, err = cli("run", REPO / "configs/run/cpu-demo.yaml", "--dry-run", "--set", "eval.max_per_cel=7")
    assert code == 2 and out == ""
    assert (
        err.strip().splitlines()[-1]
        == "error: " + str(REPO / "configs/run/cpu-demo.yaml") + ": eval.max_per_cel: unknown key"
    )


def test_set_on_validate(cli):
    code, out, _ = cli("validate", REPO / "configs/run/ci-tiny.yaml", "--set", "eval.max_per_cell=0")
    assert code == 1 and "eval.max_per_cell: Input should be greater than or equal to 1" in out


def test_version(cli):
    code, out, _ = cli("--version")
    assert code == 0 and out.strip() == f"lorarag {version('lorarag')}"


def test_run_json_says_which_precision_and_why(tmp_path):
    import json

    from lorarag.core.config import load_config
    from lorarag.core.runinfo import start_run
    from lorarag.trained.config import RunConfig

    cfg = load_config(REPO / "configs/run/cpu-demo.yaml", RunConfig, parse_sets(["train.swift.bf16=false"]))
    info = json.loads((start_run(tmp_path / "r", cfg) / "run.json").read_text())
    dtype = "bfloat16" if native_bf16() else "float32"
    assert info["precision"] == {
        "dtype": f"train float32, generator {dtype}" if native_bf16() else "float32",
        "train": "float32",
        "generator": dtype,
        "why": cpu_bf16_why(),
    }
    assert "precision" not in json.loads((start_run(tmp_path / "n", None) / "run.json").read_text())


def test_set_on_train_changes_the_command_and_is_refused_with_slurm(cli, tmp_path):
    code, out, err = cli(
        "train", REPO / "configs/train/tiny.yaml", "--dry-run", "--set", "swift.learning_rate=0.5", "--set", "seed=3"
    )
    assert code == 0, err
    assert "--learning_rate 0.5" in out and "--seed 3" in out
    code, out, err = cli("train", REPO / "configs/train/tiny.yaml", "--dry-run", "--set", "seedx=1")
    assert code == 2 and err.strip().splitlines()[-1] == f"error: {REPO / 'configs/train/tiny.yaml'}: seedx: unknown key"
    code, out, err = cli("train", REPO / "configs/train/tiny.yaml", "--slurm", tmp_path / "job.sh", "--set", "seed=3")
    assert code == 2 and "--set does not reach the sbatch script" in err and not (tmp_path / "job.sh").exists()


def test_set_on_eval_is_validated_like_the_yaml(cli, tmp_path):
    cfg = REPO / "configs/eval/cpu-demo-base-rag.yaml"
    code, out, err = cli("eval", cfg, "--set", "bogus=1")
    assert code == 2 and err.strip().splitlines()[-1] == f"error: {cfg}: bogus: unknown key"
    code, out, err = cli("eval", cfg, "--set", "bootstrap_resamples=10")
    last = err.strip().splitlines()[-1]
    assert code == 2 and last.startswith(f"error: {cfg}: ") and "bootstrap_resamples" in last
    code, out, err = cli("eval", cfg, "--slurm", tmp_path / "a.sh", "--shards", "2", "--set", "seed=1")
    assert code == 2 and "--set does not reach the sbatch script" in err and not (tmp_path / "a.sh").exists()
