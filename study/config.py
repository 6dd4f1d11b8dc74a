"""The study's run config (`configs/run/*.yaml`): world or KB -> index -> train -> calibrate -> evaluate.

`RunConfig` composes the other layers' configs (rag, fallback, train) by reference to their own
models; each stage receives only its own section.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from lorarag.core.config import Strict
from lorarag.core.numerics import NumericsConfig
from lorarag.fallback.config import FallbackConfig
from lorarag.rag.config import RAGConfig
from lorarag.scenarios.config import DataConfig
from lorarag.scenarios.records import SCENARIO_TYPES, KnowledgeName, ScenarioName
from lorarag.scenarios.world import DEV_PHRASING, TEST_PHRASING, untrained_phrasings
from lorarag.train.config import TrainConfig


ADAPTER_KINDS = ("closed_book", "astute_rag", "prompted_detection")  # kinds that take `adapter:`


class SystemConfig(Strict):
    """One evaluated system (study/systems.py)."""

    name: str = Field(description="the system's name in results and reports (unique per run)")
    kind: Literal["lora_rag", "base_rag", "prompted_detection", "astute_rag", "closed_book", "memory_or_context",
                  "oracle", "rag_sft"] = Field(description=(
        "which system (study/systems.py's registry); rag_sft: base RAG's prompt answered by the RAG-SFT adapter, a "
        "second adapter the run trains when it is listed (study/training.py)"))
    context: Literal["retrieved", "presented"] = Field("retrieved", description=(
        "`retrieved`: the clean KB retrieved, then poisoned into the scenario's world; `presented`: the "
        "scenario's own chunks"))
    adapter: str | None = Field(None, description=(
        "closed_book / astute_rag / prompted_detection: null = the base model, \"lora\" = the trained adapter"))
    max_new_tokens: int = Field(24, description=(
        "tokens of the base_rag / closed_book / astute_rag / memory_or_context / oracle answers"))

    @model_validator(mode="after")
    def _adapter_kind(self) -> "SystemConfig":
        if self.adapter is not None and self.kind not in ADAPTER_KINDS:
            raise ValueError(f"system {self.name!r}: adapter: means nothing for kind {self.kind!r} (it goes with "
                             f"{', '.join(ADAPTER_KINDS)}; lora_rag and memory_or_context use fallback.detector's)")
        return self

    @property
    def uses_adapter(self) -> bool:
        """Whether its answers depend on a trained adapter (and so on the training seed)."""
        return self.kind in ("lora_rag", "memory_or_context", "rag_sft") or self.adapter is not None


class CalibrationConfig(Strict):
    """Gate calibration on the DEV split (dev phrasing of known facts + never-learned orgs)."""

    scenarios: list[ScenarioName] = Field(
        ["consistent", "factual_error", "outdated", "irrelevant"],
        description="scenario types of the dev items the gate is calibrated on")
    max_items: int = Field(200, description="dev items per group (known / never-learned), seeded sample")
    phrasings: Literal["auto"] | list[int] = Field("auto", description=(
        "Each sampled dev fact is asked once in each of these wordings (duplicate facts dropped). `auto`: the dev "
        "phrasing + every closed-book paraphrase the SFT rows do not use (demo: 2, 6, 7, 8, 9), so the threshold "
        "reads the adapter's confidence on several new wordings, not on one (docs/research-log.md, E7). Never the "
        "test phrasing or a trained one."))


class EvalSection(Strict):
    """Which scenario cells each system is evaluated on, and the statistics."""

    scenarios: list[ScenarioName] = Field([s for s in SCENARIO_TYPES if s != "update"], description=(
        "scenario types evaluated; `update` (a version dated after what the LoRA learned: the context is right) is "
        "asked for by name, as it needs SFT rows that teach it (`train.sft.updates`) to be a fair cell"))
    knowledge: list[KnowledgeName] = Field(["known", "unknown"], description=(
        "knowledge groups evaluated: `known` facts and `unknown` (never-learned) ones"))
    max_per_cell: int | None = Field(40, description="items per (scenario, knowledge) cell, seeded sample; null = all")
    test_phrasings: list[int] = Field([TEST_PHRASING], description=(
        "The demo world's test wordings: the held-out phrasing 3, and optionally closed-book paraphrases the SFT "
        "rows leave out (6-9 with knowledge_phrasings 4). A second wording doubles each cell without training on "
        "more facts; its items share a fact two by two, so `lorarag seeds` resamples facts, not items, for its "
        "pooled CI. Dev then skips these wordings."))
    bootstrap: int = Field(1000, ge=1000, description="paired-bootstrap resamples (eval.compare's minimum)")
    seed: int = Field(0, description="seed of the paired bootstrap of the report")


class ExtraSet(Strict):
    """A real conflict set evaluated beside the demo world by every system of the run.

    `path` is the set's folder (ConflictNQ: `<split>.jsonl`; ConflictQA:
    `strategyqa-chatgpt.jsonl`); its true passages get their own index (same retrieval config) so
    `retrieved` systems retrieve, then see the fabricated passage in place of the true one.
    """

    kind: Literal["conflictnq", "conflictqa"] = Field(description="`conflictnq` or `conflictqa`")
    path: str = Field(description=(
        "the set's folder (ConflictNQ: `<split>.jsonl`; ConflictQA: `strategyqa-chatgpt.jsonl`)"))
    split: Literal["test", "val"] = Field("test", description="conflictnq only: the file `<split>.jsonl`")
    max_per_cell: int | None = Field(None, description="null: eval.max_per_cell")
    required: bool = Field(True, description=(
        "false: a missing data folder skips the set with a note (shared data a machine may not have); true: the "
        "run stops before training"))


class RunConfig(Strict):
    """`lorarag run`: world or KB → index → train/reuse LoRA → calibrate → evaluate → report.

    The knowledge comes either from the demo world (`train.world`) or from a user's corpus and
    labelled questions (`data:`, scenarios/config.DataConfig), never both.
    """

    name: str = Field(description="the run's name: its folder under runs_dir, and `${name}` in paths")
    seed: int = Field(0, description="seed of the test and dev scenario samples (world, KB)")
    runs_dir: str = Field("runs", description="where run folders live")
    train: TrainConfig = Field(description="holds the world (demo) and SFT sections")
    rag: RAGConfig
    data: DataConfig | None = Field(None, description=(
        "a user's corpus and labelled questions instead of the demo world (train.world)"))
    prepare_base: Literal["smollm2_gguf", "tiny_qwen3"] | None = Field(None, description=(
        "build the base model folder first: `smollm2_gguf` (SmolLM2-135M-Instruct converted from its GGUF, "
        "train/smollm2.py) or `tiny_qwen3` (a random tiny Qwen3, lorarag/testing/tiny.py); null: the folder must "
        "exist"))
    fallback: FallbackConfig = FallbackConfig()
    calibration: CalibrationConfig = CalibrationConfig()
    systems: list[SystemConfig] = Field(description="the systems evaluated")
    eval: EvalSection = EvalSection()
    extra_sets: list[ExtraSet] = Field([], description=(
        "real conflict sets evaluated beside the demo world by every system"))
    numerics: NumericsConfig = Field(NumericsConfig(), description=(
        "CPU kernel paths and threads (lorarag/core/numerics.py)"))

    @model_validator(mode="after")
    def _check(self) -> "RunConfig":
        if self.rag.generator is None:
            raise ValueError("rag.generator is required (the base model the LoRA is trained on)")
        if (self.train.world is None) == (self.data is None):
            raise ValueError("give either train.world (the demo world) or data: (a corpus + QA set), "
                             + ("not both" if self.data is not None else "one of them"))
        if self.data is not None:
            self._check_kb()
        if self.rag.generator.kind == "openai" and self.fallback.detector.tokenizer is None:
            raise ValueError("rag.generator.kind=openai serves the model remotely: set "
                             "fallback.detector.tokenizer to a local folder with its tokenizer (the verdict "
                             "labels' first tokens are read with it)")
        names = [s.name for s in self.systems]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"systems: duplicate name(s) {dup}")
        if not self.systems:
            raise ValueError("systems: at least one system")
        adapter = self.fallback.detector.adapter
        if adapter is not None and adapter in self.rag.generator.adapters:
            raise ValueError(f"rag.generator.adapters.{adapter}: set by the run (the trained adapter)")
        if any(s.kind == "rag_sft" for s in self.systems) and "rag_sft" in (adapter, *self.rag.generator.adapters):
            raise ValueError("adapter name rag_sft: set by the run for its rag_sft system (the RAG-SFT adapter)")
        self._check_test_phrasings()
        if self.calibration.phrasings != "auto":
            allowed = self._untrained_phrasings()
            bad = [p for p in self.calibration.phrasings if p not in allowed]
            if bad or not self.calibration.phrasings:
                raise ValueError(f"calibration.phrasings: {bad or 'empty'} not allowed: dev questions use "
                                 f"phrasings neither trained nor tested, here {list(allowed)}")
        return self

    def _check_test_phrasings(self) -> None:
        tp = self.eval.test_phrasings
        if self.data is not None:
            if tp != [TEST_PHRASING]:
                raise ValueError("eval.test_phrasings: the demo world's wordings; with data: the test split "
                                 "asks every question in the wordings the set gives")
            return
        free = [p for p in untrained_phrasings(self.train.sft.knowledge_phrasings if self.train.sft else None)
                if p != DEV_PHRASING]
        bad = [p for p in tp if p != TEST_PHRASING and p not in free]
        if not tp or len(set(tp)) != len(tp) or bad:
            raise ValueError(f"eval.test_phrasings: {bad or tp or 'empty'} not allowed: distinct wordings the "
                             f"SFT rows leave out, here {[TEST_PHRASING, *free]} (phrasing 2 is the gate's dev)")

    def _check_kb(self) -> None:
        if "outdated" in self.eval.scenarios and not self.data.outdated:
            raise ValueError("eval.scenarios: outdated needs data.outdated (older versions of the answers); "
                             "give it or drop outdated from eval.scenarios")
        if self.rag.corpus.paths:
            raise ValueError("rag.corpus.paths: must be [] with data: (the knowledge base is data.corpus)")
        sft = self.train.sft
        if sft is not None and (sft.unknown_repeats or sft.phantom_orgs):
            raise ValueError("train.sft: unknown_repeats and phantom_orgs are refusal rows of the demo world; "
                             "with data: there are none (knowledge_phrasings is unused too: every wording the "
                             "set offers is taught)")
        if self.calibration.phrasings != "auto":
            raise ValueError("calibration.phrasings: the demo world's; with data: dev questions are asked in "
                             "every wording the set offers")
        if self.extra_sets and any(x.kind == "conflictnq" and x.path in self.data.corpus.path
                                   for x in self.extra_sets):
            raise ValueError("extra_sets: the knowledge base itself is ConflictNQ; its facts cannot also be "
                             "an extra set of never-learned facts")

    def dev_phrasings(self) -> tuple[int, ...]:
        """The phrasings the gate's dev questions are asked in (`calibration.phrasings` resolved)."""
        if self.calibration.phrasings != "auto":
            return tuple(self.calibration.phrasings)
        return self._untrained_phrasings()

    def _untrained_phrasings(self) -> tuple[int, ...]:
        """Wordings neither trained nor tested: the gate's dev questions may use them."""
        kp = self.train.sft.knowledge_phrasings if self.train.sft else None
        return tuple(p for p in untrained_phrasings(kp) if p not in self.eval.test_phrasings)

