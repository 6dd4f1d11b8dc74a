"""Configs of the train package: the SFT data mix, and a training run.

`TrainConfig.swift` keeps ms-swift's own argument names (`lora_rank`, `learning_rate`, ...) so a
YAML reads like a `swift sft` command line; names are checked against ms-swift's `SftArguments`
dataclass when a command uses them (importing swift takes ~10 s, so not at YAML load time).
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from lorarag.core.config import Strict
from lorarag.core.errors import ConfigError
from lorarag.core.paths import check_name

# The peft kind's loop (train/peft_trainer.py): its defaults, and the ms-swift arguments it accepts
# without implementing.
DEFAULTS: dict[str, Any] = {
    "lora_rank": 32,
    "lora_alpha": 64,
    "lora_dropout": 0.0,
    "target_modules": "all-linear",
    "learning_rate": 1e-3,
    "num_train_epochs": 1,
    "per_device_train_batch_size": 16,
    "max_length": 512,
    "warmup_ratio": 0.05,
    "save_steps": 50,
    "torch_dtype": "bfloat16",
    "weight_decay": 0.0,
    "lr_scheduler_type": "cosine",
    "max_steps": -1,
    "system": None,
    "attn_impl": None,
    "target_regex": None,
    "truncation_strategy": "delete",
    "eval_steps": None,
    "report_to": "none",  # eval_loss on val_dataset every eval_steps (null: at the end)
}
# ms-swift arguments this loop accepts without implementing, because they do not change what is
# trained (the chat template comes from the tokenizer, as `template` names it for ms-swift).
NOT_TRAINING = {
    "model_type",
    "template",
    "logging_steps",
    "save_total_limit",
    "dataloader_num_workers",
    "dataset_num_proc",
    "check_model",
    "add_version",
}


def unsupported_args(args: dict[str, Any]) -> list[str]:
    """ms-swift arguments in `args` that this loop would silently not honour (bf16 is honoured)."""
    return sorted(k for k in args if k not in DEFAULTS and k not in NOT_TRAINING and k != "bf16")


TORCH_DTYPES = ("bfloat16", "float16", "float32")  # ms-swift's `torch_dtype` choices (null: the model's own)
_POSITIVE = (
    "learning_rate",
    "num_train_epochs",
    "per_device_train_batch_size",
    "max_length",
    "lora_rank",
    "lora_alpha",
    "save_steps",
    "gradient_accumulation_steps",
)


def _check_steps(v: int) -> int:
    if v == 0 or v < -1:
        raise ValueError(f"max_steps {v}: give a step count > 0, or -1 to train by epochs")
    return v


def _number(key: str, v: Any) -> float | None:
    """`v` as a number (YAML reads `1e-3` as text: ms-swift parses it, so it is one), ValueError
    unless it is a finite one; None for null."""
    if v is None:
        return None
    try:
        x = float(v) if not isinstance(v, bool) else math.nan
    except (TypeError, ValueError):
        raise ValueError(f"swift.{key}: {v!r} is not a number") from None
    if not math.isfinite(x):
        raise ValueError(f"swift.{key}: {v!r} is not a finite number")
    return x


def check_swift_values(swift: dict[str, Any]) -> None:
    """ValueError (one line) for a training argument no run could use: NaN or infinite numbers,
    zero or negative sizes and rates, a `max_steps` other than -1 or > 0, an unknown `torch_dtype`."""
    for key, v in swift.items():
        if isinstance(v, float) and not math.isfinite(v):
            raise ValueError(f"swift.{key}: {v} is not a finite number")
    for key in _POSITIVE:
        x = _number(key, swift.get(key))
        if x is not None and x <= 0:
            raise ValueError(f"swift.{key}: {swift[key]!r} must be > 0")
    for key in ("lora_dropout", "warmup_ratio", "weight_decay"):
        x = _number(key, swift.get(key))
        if x is not None and x < 0:
            raise ValueError(f"swift.{key}: {swift[key]!r} must be >= 0")
    if swift.get("max_steps") is not None:
        x = _number("max_steps", swift["max_steps"])
        if x != int(x):
            raise ValueError(f"swift.max_steps: {swift['max_steps']!r} must be a whole number (-1: by epochs)")
        try:
            _check_steps(int(x))
        except ValueError as exc:
            raise ValueError(f"swift.{exc}") from None
    dtype = swift.get("torch_dtype")
    if dtype is not None and dtype not in TORCH_DTYPES:
        raise ValueError(f"swift.torch_dtype: {dtype!r} is not one of {', '.join(TORCH_DTYPES)}")


class SFTConfig(Strict):
    """How many examples of each kind the SFT mix holds (train/sft.py: per fact and trained wording)."""

    seed: int = Field(0, description="seed of the SFT mix's random choices")
    knowledge_repeats: int = Field(3, description="closed-book copies of each (fact, trained wording)")
    rag_per_fact: int = Field(1, description="conflict-aware examples per (fact, scenario type, phrasing)")
    rag_phrasings: Literal["alternate", "all"] = Field(
        "alternate",
        description=(
            "`alternate`: per fact, one trained wording carries the contrastive pair (consistent + factual error), "
            "the next the other contexts; `all`: every trained wording carries every context (as many times the "
            "conflict-aware rows as the fact has trained wordings)."
        ),
    )
    distractors: int = Field(1, description="extra distractor sources beside the gold / perturbed chunk")
    val_fraction: float = Field(0.05, description="share of rows held out as the validation set (`val_dataset`)")
    update_twins: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description=(
            "Needs data.snapshot. This share of the known facts' factual-error rows get an `update` twin: the same "
            "substituted passage dated after the snapshot, verdict supported, answer its value (scenarios/kb_updates."
            "dated_twins), so the date is all that tells a wrong source from a newer one. 0: only the stale dev facts "
            "train `update` (a few dozen rows against hundreds of outdated ones)."
        ),
    )


class PreferenceConfig(Strict):
    """Preference training after SFT (train/preference.py builds the pairs, train/preference_loop.py or
    `swift rlhf` trains): the SFT adapter is trained on, with the SFT adapter itself, frozen, as
    the DPO reference. Off by default: a config without this section trains and hashes as before."""

    enabled: bool = Field(False, description="train on preference pairs after SFT")
    type: Literal["dpo", "orpo"] = Field(
        "dpo",
        description=(
            "`dpo`: sigmoid DPO against the frozen SFT adapter; `orpo`: chosen NLL + odds-ratio term, no reference. "
            "Both the CPU loop and `swift rlhf --rlhf_type` run them (KTO needs unpaired rows)."
        ),
    )
    beta: float = Field(default=0.1, gt=0, description="DPO's beta (ORPO: the odds-ratio weight, lambda)")
    learning_rate: float = Field(default=5e-5, gt=0, description="learning rate of the preference stage")
    num_train_epochs: float = Field(default=1.0, gt=0, description="epochs over the pairs")
    max_steps: int = Field(-1, description="> 0: stop after this many steps (overrides epochs); -1: by epochs")
    per_device_train_batch_size: int = Field(default=4, ge=1, description="pairs per step")
    pairs_per_fact: int = Field(
        default=1,
        ge=1,
        le=3,
        description=(
            "Rejected variants per (fact, context) row: wrong-source rows have 2 (memory taken from the passage; memory "
            "kept but the passage trusted), right sources of untaught facts 3 (invented memory; refusal; invented "
            "memory with answer unknown); the first n are used."
        ),
    )
    seed: int = Field(0, description="the pairs' invented values and order (training order follows `train.seed`)")
    rpo_alpha: float | None = Field(
        None,
        ge=0,
        description=(
            "DPO only: add rpo_alpha x the chosen reply's mean per-token NLL to each pair's loss (RPO; ms-swift's "
            "`--rpo_alpha`), so the chosen reply stays likely while the margin grows; null: plain DPO"
        ),
    )
    kinds: list[Literal["wrong_source", "untaught_right_source", "taught_right_source"]] = Field(
        default=["wrong_source", "untaught_right_source", "taught_right_source"],
        min_length=1,
        description=(
            "which pairs to build (train/preference.py): a wrong source of a taught fact, a right source of an "
            "untaught one, a right source of a taught one (rejected: the source doubted)"
        ),
    )

    @field_validator("max_steps")
    @classmethod
    def _steps(cls, v: int) -> int:
        return _check_steps(v)


class TrainConfig(Strict):
    """One training run: our paths and seeds plus ms-swift's own arguments under `swift:`."""

    kind: Literal["swift", "peft"] = Field(
        "swift", description=("`swift`: ms-swift `swift sft` (GPU); `peft`: the CPU-demo loop (same adapter format)")
    )
    run_name: str = Field(description="the run's folder name under runs_dir; an adapter is found by it")
    model: str = Field(description="local folder of the base model (e.g. checkpoints/smollm2-135m-instruct)")
    dataset: str = Field(description="ms-swift messages JSONL (built by `lorarag sft`)")
    val_dataset: str | None = Field(None, description="validation rows (ms-swift messages JSONL); null: none")
    runs_dir: str = Field("runs/train", description="where run folders live (runs_dir/run_name)")
    seed: int = Field(42, description="training seed (passed as --seed)")
    sft: SFTConfig | None = Field(None, description="the SFT data mix (train/sft.py); null: its defaults")
    preference: PreferenceConfig = Field(
        default_factory=PreferenceConfig,
        description=("preference training after SFT (DPO/ORPO on conflict pairs, train/preference.py); off unless enabled"),
    )
    swift: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "ms-swift argument names -> values; `bf16: auto` = bf16 autocast where the CPU has it natively (AVX512-BF16, "
            "AMX) or for ms-swift on a GPU, else fp32 (core/precision.py)"
        ),
    )
    share_prefix: bool = Field(
        False,
        description=(
            "peft kind: a batch's common leading tokens (system prompt, chat header) run once and their keys/values "
            "serve every row: same loss and gradients up to rounding, ~1/3 fewer tokens of compute on the demo's rows "
            "(ms-swift has its own packing/padding_free instead)."
        ),
    )
    nproc_per_node: int | None = Field(
        None,
        description=(
            "processes (GPUs) per node for ms-swift's torchrun launch, exported as NPROC_PER_NODE; null: leave it to "
            "the environment"
        ),
    )
    nnodes: int | None = Field(
        None, description=("nodes for ms-swift's torchrun launch, exported as NNODES; null: leave it to the environment")
    )
    slurm: dict[str, str] = Field(default_factory=dict, description='sbatch options, e.g. {"gres": "gpu:8"}')

    @field_validator("run_name")
    @classmethod
    def _run_name(cls, v: str) -> str:
        return check_name(v, "run_name")

    @model_validator(mode="after")
    def _check(self) -> TrainConfig:
        check_swift_values(self.swift)
        reserved = {"model", "dataset", "val_dataset", "output_dir", "seed", "tuner_type", "train_type"}
        clash = sorted(reserved & set(self.swift))
        if clash:
            raise ValueError(f"swift.{clash[0]} is set by lorarag (use the top-level key)")
        if self.share_prefix and self.kind != "peft":
            raise ValueError("share_prefix is for the peft kind (ms-swift: swift.padding_free / packing)")
        if self.kind == "peft":
            bad = unsupported_args(self.swift)
            if bad:
                raise ValueError(
                    f"swift.{bad[0]}: not implemented by the peft kind (use kind: swift)"
                    + (f"; also {', '.join(bad[1:])}" if bad[1:] else "")
                )
            _check_peft_reporting(self.swift, self.val_dataset)
        return self


def _check_peft_reporting(swift: dict[str, Any], val_dataset: str | None) -> None:
    """The peft loop's `eval_steps` (needs `val_dataset`) and `report_to` (none or tensorboard, installed)."""
    steps = swift.get("eval_steps")
    if steps is not None and (type(steps) is not int or steps < 1):
        raise ValueError(f"swift.eval_steps: a positive number of steps, got {steps!r}")
    if steps is not None and not val_dataset:
        raise ValueError("swift.eval_steps: no val_dataset to compute the validation loss on")
    report = swift.get("report_to", "none")
    names = {n for n in ([report] if isinstance(report, str) else list(report or [])) if n != "none"}
    if names - {"tensorboard", "all"}:
        raise ValueError(f"swift.report_to: the peft kind writes tensorboard only (or none), got {report!r}")
    if names:
        from importlib.util import find_spec

        if find_spec("tensorboard") is None:
            raise ValueError("swift.report_to: tensorboard is not installed (pip install tensorboard)")


_SWIFT_FIELDS: set[str] | None = None


def swift_argument_names() -> set[str]:
    """The field names of ms-swift's `SftArguments` (the `swift sft` flags), imported lazily."""
    global _SWIFT_FIELDS
    if _SWIFT_FIELDS is None:
        import dataclasses

        from swift.arguments.sft_args import SftArguments

        _SWIFT_FIELDS = {f.name for f in dataclasses.fields(SftArguments)}
    return _SWIFT_FIELDS


def check_swift_args(swift: dict[str, Any], source: str = "swift") -> None:
    """Raise ConfigError naming every key that is not a `swift sft` argument."""
    names = swift_argument_names()
    bad = sorted(k for k in swift if k not in names)
    if bad:
        raise ConfigError(f"{source}: unknown ms-swift argument(s): {', '.join(bad)}")
