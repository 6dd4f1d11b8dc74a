"""The run config (`configs/run/*.yaml`): KB -> index -> train -> calibrate -> evaluate.

`lorarag run` follows it and saves it resolved in the run folder (config.yaml), where the trained
system (`load_run`, `ask --run`, `serve`) reads it back: so it lives here, below the study.
`RunConfig` composes the other layers' configs (rag, fallback, train) by reference to their own
models; each stage receives only its own section.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from lorarag.core.config import Strict
from lorarag.core.numerics import NumericsConfig
from lorarag.core.paths import check_name
from lorarag.fallback.config import FallbackConfig, PolicyConfig
from lorarag.rag.config import RAGConfig
from lorarag.scenarios.config import DataConfig
from lorarag.scenarios.records import ON_REQUEST, SCENARIO_TYPES, KnowledgeName, ScenarioName
from lorarag.train.config import TrainConfig

ADAPTER_KINDS = (
    "closed_book",
    "astute_rag",
    "prompted_detection",
    "memory_or_context",
    "date_rule",
)  # kinds that take `adapter:`
RAG_SFT = "rag_sft"  # the RAG-SFT adapter's name in the generator (study/training.py trains it)


class SystemConfig(Strict):
    """One evaluated system (eval/systems.py)."""

    name: str = Field(description="the system's name in results and reports (unique per run)")
    kind: Literal[
        "lora_rag",
        "base_rag",
        "prompted_detection",
        "astute_rag",
        "closed_book",
        "memory_or_context",
        "oracle",
        "rag_sft",
        "date_rule",
    ] = Field(
        description=(
            "which system (eval/systems.py's registry); rag_sft: base RAG's prompt answered by the RAG-SFT adapter, a "
            "second adapter the run trains when it is listed (study/training.py); date_rule: on a dated KB, sources "
            "dated after data.snapshot read by base RAG, older ones dropped, memory_or_context over the rest"
        )
    )
    context: Literal["retrieved", "presented"] = Field(
        "retrieved",
        description=(
            "`retrieved`: the clean KB retrieved, then poisoned into the scenario's world; `presented`: the "
            "scenario's own chunks"
        ),
    )
    adapter: str | None = Field(
        None,
        description=(
            'closed_book / astute_rag / prompted_detection: null = the base model, "lora" = the trained adapter; '
            "memory_or_context / date_rule: who reads the sources where the memory is not used (null = the base model, "
            '"lora" = the trained adapter, "rag_sft" = the RAG-SFT adapter, which the run then trains); their '
            "memory is always fallback.detector's adapter"
        ),
    )
    max_new_tokens: int = Field(
        24,
        description=(
            "tokens of the base_rag / closed_book / astute_rag / memory_or_context / oracle answers; lora_rag: of the "
            "base model's reading where the gate rejects the memory (fallback.policy.no_memory), base_rag's "
            "budget to read as base RAG does"
        ),
    )
    policy: PolicyConfig | None = Field(
        None,
        description=(
            "lora_rag only: this system's routing policy in place of fallback.policy, an ablation of the route on "
            "the same verdicts. A run replays it from the first lora_rag system on the same context without its own "
            "policy (eval/reroute.py: no model call); `lorarag eval` evaluates it through the model"
        ),
    )

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return check_name(v, "system name")  # its results folder under the run's eval/

    @model_validator(mode="after")
    def _adapter_kind(self) -> SystemConfig:
        if self.adapter is not None and self.kind not in ADAPTER_KINDS:
            raise ValueError(
                f"system {self.name!r}: adapter: means nothing for kind {self.kind!r} (it goes with "
                f"{', '.join(ADAPTER_KINDS)}; lora_rag uses fallback.detector's)"
            )
        if self.policy is not None and self.kind != "lora_rag":
            raise ValueError(f"system {self.name!r}: policy: routes lora_rag's verdicts; kind {self.kind!r} has none")
        return self

    @property
    def is_variant(self) -> bool:
        """A lora_rag system routed by its own policy: an ablation of LoRA-RAG, not LoRA-RAG itself."""
        return self.policy is not None

    @property
    def uses_adapter(self) -> bool:
        """Whether its answers depend on a trained adapter (and so on the training seed)."""
        return self.kind in ("lora_rag", "memory_or_context", "rag_sft", "date_rule") or self.adapter is not None

    @property
    def uses_rag_sft(self) -> bool:
        """Whether it needs the RAG-SFT adapter (as its model, or as the reader of its sources)."""
        return self.kind == "rag_sft" or self.adapter == RAG_SFT


class CalibrationConfig(Strict):
    """Gate calibration on the DEV split (known-dev facts + never-learned dev facts, study/kb.py)."""

    scenarios: list[ScenarioName] = Field(
        ["consistent", "factual_error", "outdated", "irrelevant"],
        description="scenario types of the dev items the gate is calibrated on",
    )
    max_items: int = Field(200, ge=1, description="dev items per group (known / never-learned), seeded sample")


class EvalSection(Strict):
    """Which scenario cells each system is evaluated on, and the statistics."""

    scenarios: list[ScenarioName] = Field(
        [s for s in SCENARIO_TYPES if s not in ON_REQUEST],
        description=(
            "scenario types evaluated; `update` (the KB's current chunk where the LoRA learned an older value: the "
            "context is right) is asked for by name, with `data.update_fraction` > 0, and so is `fabricated` (a wrong "
            "value in a new passage of another form than the knowledge base's: the set's own conflict passages where "
            "it has them, else a question-and-answer note; never trained on), beside `factual_error` (an edited copy "
            "of the knowledge base's chunk)"
        ),
    )
    knowledge: list[KnowledgeName] = Field(
        ["known", "unknown"], description=("knowledge groups evaluated: `known` facts and `unknown` (never-learned) ones")
    )
    max_per_cell: int | None = Field(40, ge=1, description="items per (scenario, knowledge) cell, seeded sample; null = all")
    bootstrap: int = Field(1000, ge=1000, description="paired-bootstrap resamples (eval.compare's minimum)")
    seed: int = Field(0, description="seed of the paired bootstrap of the report")


class ExtraSet(Strict):
    """A real conflict set evaluated beside the demo world by every system of the run.

    `path` is the set's folder (ConflictNQ: `<split>.jsonl`; ConflictQA:
    `strategyqa-chatgpt.jsonl`); its true passages get their own index (same retrieval config) so
    `retrieved` systems retrieve, then see the fabricated passage in place of the true one.
    """

    kind: Literal["conflictnq", "conflictqa"] = Field(description="`conflictnq` or `conflictqa`")
    path: str = Field(description=("the set's folder (ConflictNQ: `<split>.jsonl`; ConflictQA: `strategyqa-chatgpt.jsonl`)"))
    split: Literal["test", "val"] = Field("test", description="conflictnq only: the file `<split>.jsonl`")
    max_per_cell: int | None = Field(None, ge=1, description="null: eval.max_per_cell")
    required: bool = Field(
        True,
        description=(
            "false: a missing data folder skips the set with a note (shared data a machine may not have); true: the "
            "run stops before training"
        ),
    )


class RunConfig(Strict):
    """`lorarag run`: KB → index → train/reuse LoRA → calibrate → evaluate → report.

    The knowledge base is `data:` (scenarios/config.DataConfig): a user's corpus and labelled
    questions, or the demo world written as one.
    """

    name: str = Field(description="the run's name: its folder under runs_dir, and `${name}` in paths")
    seed: int = Field(0, description="seed of the test and dev scenario samples")
    runs_dir: str = Field("runs", description="where run folders live")
    train: TrainConfig = Field(description="the training run and its SFT section")
    rag: RAGConfig
    data: DataConfig = Field(description="the knowledge base: a user's corpus and labelled questions, or data.world")
    prepare_base: Literal["smollm2_gguf", "tiny_qwen3"] | None = Field(
        None,
        description=(
            "build the base model folder first: `smollm2_gguf` (SmolLM2-135M-Instruct converted from its GGUF, "
            "train/smollm2.py) or `tiny_qwen3` (a random tiny Qwen3, testing/tiny.py); null: the folder must "
            "exist"
        ),
    )
    fallback: FallbackConfig = FallbackConfig()
    calibration: CalibrationConfig = CalibrationConfig()
    systems: list[SystemConfig] = Field(description="the systems evaluated")
    eval: EvalSection = EvalSection()
    extra_sets: list[ExtraSet] = Field(
        [], description=("real conflict sets evaluated beside the demo world by every system")
    )
    numerics: NumericsConfig = Field(NumericsConfig(), description=("CPU kernel paths and threads (core/numerics.py)"))

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return check_name(v, "name")  # the run's folder under runs_dir

    @model_validator(mode="before")
    @classmethod
    def _variant_policies(cls, data: object) -> object:
        """A system's `policy:` states its delta over fallback.policy (a variant differs from LoRA-RAG
        in what it names, nothing else); it is written out whole here, so a dumped config reloads the same."""
        if not isinstance(data, dict) or not isinstance(data.get("systems"), list):
            return data
        fb = data.get("fallback") or {}
        policy = fb.get("policy") if isinstance(fb, dict) else fb.policy
        base = (policy if isinstance(policy, PolicyConfig) else PolicyConfig.model_validate(policy or {})).model_dump()
        systems = [
            {**s, "policy": {**base, **s["policy"]}} if isinstance(s, dict) and isinstance(s.get("policy"), dict) else s
            for s in data["systems"]
        ]
        return {**data, "systems": systems}

    @model_validator(mode="after")
    def _check(self) -> RunConfig:
        if self.rag.generator is None:
            raise ValueError("rag.generator is required (the base model the LoRA is trained on)")
        self._check_kb()
        if self.rag.generator.kind == "openai" and self.fallback.detector.tokenizer is None:
            raise ValueError(
                "rag.generator.kind=openai serves the model remotely: set "
                "fallback.detector.tokenizer to a local folder with its tokenizer (the verdict "
                "labels' first tokens are read with it)"
            )
        names = [s.name for s in self.systems]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"systems: duplicate name(s) {dup}")
        if not self.systems:
            raise ValueError("systems: at least one system")
        adapter = self.fallback.detector.adapter
        if adapter is not None and adapter in self.rag.generator.adapters:
            raise ValueError(f"rag.generator.adapters.{adapter}: set by the run (the trained adapter)")
        if any(s.uses_rag_sft for s in self.systems) and RAG_SFT in (adapter, *self.rag.generator.adapters):
            raise ValueError("adapter name rag_sft: set by the run for the systems that read with the RAG-SFT adapter")
        return self

    def _check_outputs(self) -> None:
        """The SFT rows a run writes never land on what it reads: its knowledge base, its older
        versions, an extra set (or inside a corpus folder, where they would be read as documents)."""
        d = self.data
        reads = [
            (f"data.{k}", p)
            for k, p in (
                ("corpus.path", d.corpus and d.corpus.path),
                ("questions.path", d.questions and d.questions.path),
                ("outdated", d.outdated),
            )
            if p
        ]
        reads += [(f"extra_sets.{x.kind}.path", x.path) for x in self.extra_sets]
        t = self.train
        if t.val_dataset and Path(t.val_dataset).resolve() == Path(t.dataset).resolve():
            raise ValueError(f"train.val_dataset: {t.val_dataset} is train.dataset; the validation rows go elsewhere")
        for key, out in (("train.dataset", self.train.dataset), ("train.val_dataset", self.train.val_dataset)):
            if not out:
                continue
            mine = Path(out).resolve()
            for what, src in reads:
                real = Path(src).resolve()
                if mine == real or real in mine.parents:
                    raise ValueError(
                        f"{key}: {out} is {'inside ' if mine != real else ''}{what} ({src}), which "
                        "the run reads; the SFT rows it writes go elsewhere"
                    )

    def _check_kb(self) -> None:
        self._check_outputs()
        if "outdated" in self.eval.scenarios and not self.data.has_outdated:
            raise ValueError(
                "eval.scenarios: outdated needs data.outdated (older versions of the answers); "
                "give it or drop outdated from eval.scenarios"
            )
        if self.train.sft is not None and self.train.sft.update_twins > 0 and self.data.snapshot is None:
            raise ValueError(
                "train.sft.update_twins: a twin is told from a factual error by its date alone; set "
                "data.snapshot (the year the knowledge base is current to) or drop update_twins"
            )
        rule = next((s.name for s in self.systems if s.kind == "date_rule"), None)
        if rule is not None and self.data.snapshot is None:
            raise ValueError(
                f"systems.{rule}: date_rule reads each source's date against data.snapshot (the year "
                "the knowledge base is current to); set it or drop the system"
            )
        if self.rag.corpus.paths:
            raise ValueError("rag.corpus.paths: must be [] with data: (the knowledge base is data.corpus)")
        corpus = self.data.corpus
        if (
            corpus is not None
            and self.extra_sets
            and any(x.kind == "conflictnq" and x.path in corpus.path for x in self.extra_sets)
        ):
            raise ValueError(
                "extra_sets: the knowledge base itself is ConflictNQ; its facts cannot also be "
                "an extra set of never-learned facts"
            )
