"""Configs of the train package: the demo world, the SFT data mix, and a training run.

`TrainConfig.swift` keeps ms-swift's own argument names (`lora_rank`, `learning_rate`, ...) so a
YAML reads like a `swift sft` command line; names are checked against ms-swift's `SftArguments`
dataclass when a command uses them (importing swift takes ~10 s, so not at YAML load time).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from rag.config import ConfigError, Strict


class WorldConfig(Strict):
    """The seeded demo world: fictional organisations with versioned facts."""

    seed: int = 0
    n_orgs: int = 40
    zh_fraction: float = 0.2  # share of organisations written in Chinese
    # Organisation groups (fractions of n_orgs, the rest is `unknown`): `known` facts are taught
    # closed-book; `context_only` facts appear in training only with a source to copy;
    # `unknown` facts never appear in training (half of them form the dev split for thresholds).
    known_fraction: float = 0.5
    context_only_fraction: float = 0.2
    # Draw the groups within each language (same fractions), so never-learned facts, the gate's dev
    # split and over-fallback include Chinese ones. Off: one draw over all organisations, as the
    # measured demo world (seed 0: its 6 Chinese organisations are all known or context-only).
    stratify_languages: bool = False
    attributes: list[str] = Field(default_factory=lambda: [
        "ceo", "headquarters", "founded", "net_profit", "product_version"])
    undated_outdated_fraction: float = 0.5  # outdated contexts that carry no date at all

    @model_validator(mode="after")
    def _check(self) -> "WorldConfig":
        if self.n_orgs < 4:
            raise ValueError("n_orgs must be at least 4")
        if self.known_fraction + self.context_only_fraction >= 1.0:
            raise ValueError("known_fraction + context_only_fraction must leave room for unknown orgs")
        from train.world import ATTRIBUTES  # light module, no heavy imports

        bad = [a for a in self.attributes if a not in ATTRIBUTES]
        if bad:
            raise ValueError(f"unknown attribute(s) {bad} (known: {', '.join(ATTRIBUTES)})")
        return self


class SFTConfig(Strict):
    """How many examples of each kind the SFT mix holds (per fact, training phrasings only)."""

    seed: int = 0
    knowledge_repeats: int = 3  # closed-book copies of each (fact, training phrasing)
    # Closed-book rows on phrasings 0, 1 (2), also on the knowledge-only phrasings 4, 5 (4), or
    # also on 6-9 (8): paraphrase augmentation, so the fact is recalled (and recalled
    # confidently) when asked in an unseen wording — what the closed-book-NLL gate relies on.
    knowledge_phrasings: Literal[2, 4, 8] = 2
    # Closed-book copies of each (context-only fact, closed-book phrasing) answered "unknown"
    # (refusal-aware tuning, as R-Tuning): the model is shown facts it was never taught and told to
    # decline, so an unseen organisation's question can get "unknown" instead of an invented value.
    unknown_repeats: int = Field(default=0, ge=0)
    # Closed-book "unknown" rows for this many organisations that exist nowhere (names sharing no
    # stem with any world organisation), in every closed-book phrasing: refusals for names never
    # seen, the situation of a held-out organisation (context-only names are seen in sources).
    phantom_orgs: int = Field(default=0, ge=0)
    rag_per_fact: int = 1  # conflict-aware examples per (fact, scenario type, phrasing)
    # `alternate`: per fact, one training phrasing carries the contrastive pair (consistent +
    # factual error), the other outdated + irrelevant; `all`: both phrasings carry every type
    # (twice the conflict-aware rows, each phrasing with its own perturbed value).
    rag_phrasings: Literal["alternate", "all"] = "alternate"
    distractors: int = 1  # extra distractor sources beside the gold / perturbed chunk
    raft_gold_absent: float = 0.3  # share of irrelevant examples built from distractors only
    val_fraction: float = 0.05


class TrainConfig(Strict):
    """One training run: our paths and seeds plus ms-swift's own arguments under `swift:`."""

    kind: Literal["swift", "peft"] = "swift"  # `peft`: the CPU-demo loop (same adapter format)
    run_name: str
    model: str  # local folder of the base model (e.g. checkpoints/smollm2-135m-instruct)
    dataset: str  # ms-swift messages JSONL (built by `lorarag sft`)
    val_dataset: str | None = None
    runs_dir: str = "runs/train"
    seed: int = 42
    world: WorldConfig | None = None  # set when the data comes from the demo world
    sft: SFTConfig | None = None
    swift: dict[str, Any] = Field(default_factory=dict)  # ms-swift argument names -> values
    # peft kind: a batch's common leading tokens (system prompt, chat header) run once and their
    # keys/values serve every row: same loss and gradients up to rounding, ~1/3 fewer tokens of
    # compute on the demo's rows (ms-swift has its own packing/padding_free instead).
    share_prefix: bool = False
    # Launch: torchrun via ms-swift's env (NPROC_PER_NODE, NNODES, ...); slurm for sbatch.
    nproc_per_node: int | None = None
    nnodes: int | None = None
    slurm: dict[str, str] = Field(default_factory=dict)  # sbatch options, e.g. {"gres": "gpu:8"}

    @model_validator(mode="after")
    def _check(self) -> "TrainConfig":
        reserved = {"model", "dataset", "val_dataset", "output_dir", "seed", "tuner_type", "train_type"}
        clash = sorted(reserved & set(self.swift))
        if clash:
            raise ValueError(f"swift.{clash[0]} is set by lorarag (use the top-level key)")
        if self.share_prefix and self.kind != "peft":
            raise ValueError("share_prefix is for the peft kind (ms-swift: swift.padding_free / packing)")
        if self.kind == "peft":
            from train.peft_trainer import unsupported_args

            bad = unsupported_args(self.swift)
            if bad:
                raise ValueError(f"swift.{bad[0]}: not implemented by the peft kind (use kind: swift)"
                                 + (f"; also {', '.join(bad[1:])}" if bad[1:] else ""))
        return self


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
