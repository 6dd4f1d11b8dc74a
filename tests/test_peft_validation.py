"""The CPU trainer (`kind: peft`) honours `val_dataset`, `eval_steps` and `report_to` instead of ignoring
them: the validation loss on the held-out rows every `eval_steps`, TensorBoard event files when
`report_to: tensorboard`, and a config it could not honour refused when it is read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lorarag.bench.demo_kb import load_world_kb, world_rows
from lorarag.rag.config import ChunkerConfig
from lorarag.scenarios.config import SplitConfig, WorldConfig
from lorarag.train.config import SFTConfig, TrainConfig
from lorarag.train.sft import read_sft, write_sft


@pytest.fixture(scope="module")
def rows(tmp_path_factory) -> tuple[Path, Path]:
    """24 training and 10 validation SFT rows of the 8-organisation demo world."""
    folder = tmp_path_factory.mktemp("sft")
    kb = load_world_kb(WorldConfig(seed=0, n_orgs=8), ChunkerConfig(), folder / "world")
    made = world_rows(kb, SplitConfig(), SFTConfig(knowledge_repeats=1))
    return write_sft(made[:24], folder / "train.jsonl"), write_sft(made[24:34], folder / "val.jsonl")


def reference_val_loss(model_dir: Path, adapter: Path, val: Path, max_length: int) -> float:
    """Mean cross-entropy per reply token of `val` under base + adapter, through transformers' own
    shifted-label loss, one row at a time (no batching, no padding: another path than the trainer's)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lorarag.train.peft_trainer import tokenize_rows

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32), str(adapter)
    ).eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for ids, labels in tokenize_rows(tok, read_sft(val), max_length):
            n = sum(1 for y in labels[1:] if y != -100)
            out = model(input_ids=torch.tensor([ids]), labels=torch.tensor([labels]))
            total += out.loss.item() * n
            count += n
    return total / count


@pytest.mark.slow
def test_validation_loss_every_eval_steps_and_tensorboard(tmp_path, tiny_models, rows):
    import torch

    from lorarag.train.peft_trainer import train_peft

    torch.set_num_threads(1)
    train, val = rows
    args = {
        "lora_rank": 4,
        "lora_alpha": 8,
        "max_steps": 4,
        "save_steps": 4,
        "eval_steps": 2,
        "per_device_train_batch_size": 4,
        "max_length": 512,
        "torch_dtype": "float32",
        "learning_rate": 5e-3,
        "report_to": "tensorboard",
    }
    out = tmp_path / "peft"
    final = train_peft(str(tiny_models["lm"]), str(train), str(out), args, seed=0, val_dataset=str(val))
    log = [json.loads(x) for x in (out / "logging.jsonl").read_text().splitlines()]
    evals = [r for r in log if "eval_loss" in r]
    assert [r["step"] for r in evals] == [2, 4] and all(r["eval_rows"] == 10 for r in evals)
    assert [r["step"] for r in log if "loss" in r] == [1, 2, 3, 4]
    want = reference_val_loss(tiny_models["lm"], final, val, 512)
    assert evals[-1]["eval_loss"] == pytest.approx(want, abs=2e-4)
    assert evals[0]["eval_loss"] != evals[-1]["eval_loss"]  # measured on the weights of its own step

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (events,) = {p.parent for p in (out / "runs").rglob("events.out.tfevents.*")}
    acc = EventAccumulator(str(events))
    acc.Reload()
    assert [e.step for e in acc.Scalars("eval/loss")] == [2, 4]
    assert acc.Scalars("eval/loss")[-1].value == pytest.approx(want, abs=2e-4)
    assert [e.step for e in acc.Scalars("train/loss")] == [1, 2, 3, 4]


BASE = {"kind": "peft", "run_name": "r", "model": "m", "dataset": "d.jsonl"}


@pytest.mark.parametrize(
    "swift, val, needle",
    [
        ({"eval_steps": 10}, None, "swift.eval_steps: no val_dataset"),
        ({"eval_steps": 0}, "v.jsonl", "swift.eval_steps: a positive number"),
        ({"report_to": "wandb"}, None, "writes tensorboard only"),
        ({"report_to": ["tensorboard", "swanlab"]}, None, "writes tensorboard only"),
    ],
)
def test_a_reporting_key_the_loop_cannot_honour_is_refused(swift, val, needle):
    with pytest.raises(ValueError, match=needle):
        TrainConfig.model_validate({**BASE, "val_dataset": val, "swift": swift})


@pytest.mark.parametrize(
    "swift", [{"report_to": "none"}, {"report_to": "tensorboard", "eval_steps": 5}, {"report_to": ["tensorboard"]}, {}]
)
def test_reporting_keys_the_loop_honours_validate(swift):
    TrainConfig.model_validate({**BASE, "val_dataset": "v.jsonl", "swift": swift})


def test_the_cpu_trainer_is_given_the_validation_rows(tmp_path):
    from lorarag.train.swift import peft_command

    cmd = peft_command(TrainConfig.model_validate({**BASE, "val_dataset": "v.jsonl", "runs_dir": str(tmp_path)}))
    assert cmd[cmd.index("--val_dataset") + 1] == "v.jsonl"
    assert "--val_dataset" not in peft_command(TrainConfig.model_validate({**BASE, "runs_dir": str(tmp_path)}))


@pytest.mark.slow
def test_without_eval_steps_the_validation_loss_is_taken_once_at_the_end(tmp_path, tiny_models, rows):
    import torch

    from lorarag.train.peft_trainer import train_peft

    torch.set_num_threads(1)
    train, val = rows
    args = {
        "lora_rank": 4,
        "lora_alpha": 8,
        "max_steps": 3,
        "save_steps": 1,
        "per_device_train_batch_size": 4,
        "max_length": 512,
        "torch_dtype": "float32",
    }
    train_peft(str(tiny_models["lm"]), str(train), str(tmp_path / "p"), args, seed=0, val_dataset=str(val))
    log = [json.loads(x) for x in (tmp_path / "p/logging.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log if "eval_loss" in r] == [3]
    assert not (tmp_path / "p/runs").exists()  # report_to: none writes no event files
