"""Configs of the fallback system and of the end-to-end run (`configs/run/*.yaml`).

`RunConfig` composes the other packages' sub-configs (rag, train, eval) by reference to their
own models; each stage receives only its own section.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from rag.config import RAGConfig, Strict
from train.config import TrainConfig
from train.world import untrained_phrasings


class PolicyConfig(Strict):
    """Thresholds of the routing policy (fallback/policy.py)."""

    flag_threshold: float = 0.5  # minimum 1 − P(supported) to act on conflicting/outdated
    on_invalid: Literal["context", "abstain"] = "abstain"
    unknown_conflict: Literal["context", "abstain"] = "context"  # doubt but no memory


class LenientGate(Strict):
    """A second, looser gate threshold for verdicts where a kept memory costs little if it is wrong.

    The strict threshold guards against over-fallback: an invented memory that contradicts a
    correct source (verdict `conflicting`) would replace a right answer with a wrong one. When the
    memory-informed verdict is `outdated` (the source is a dated archive statement) or
    `irrelevant`, the source cannot give the asked, current value either, so discarding a real
    memory loses the answer while keeping an invented one loses nothing the source would have
    given. Where the strict gate fires but the doubt is under the lenient threshold, the scored
    pass runs with the memory; if its verdict is one of `verdicts`, the memory counts, otherwise
    the reply is redone from `memory: unknown |` as before (one extra pass for those items only).
    """

    verdicts: list[Literal["outdated", "irrelevant"]] = ["outdated", "irrelevant"]
    # The lenient threshold keeps this share of the DEV known-fact memories (never below the strict one).
    known_kept: float = Field(0.95, gt=0, le=1)
    threshold: float | None = None  # fixed value; required when GateConfig.threshold is fixed


class GateConfig(Strict):
    """The self-knowledge gate (fallback/gate.py): does the model's memory count?"""

    enabled: bool = True
    # What the gate reads (higher = more likely never learned):
    # - `p_unknown`: P(" unknown") at the memory field of the scored RAG pass;
    # - `closed_book_nll`: mean negative log-likelihood (nats/token) of the adapter's own greedy
    #   closed-book answer (measured on the CPU demo: dev AUROC 0.86 vs 0.56 for p_unknown).
    signal: Literal["p_unknown", "closed_book_nll"] = "closed_book_nll"
    threshold: float | None = None  # None: read gate.json next to the adapter (calibrated)
    rule: Literal["youden", "unknown_recall", "logistic"] = "logistic"  # see fallback/gate.calibrate
    target: float = 0.95  # unknown_recall rule: share of never-learned dev items to reject
    # A gate whose dev AUROC is below this carries no self-knowledge: it only throws away real
    # memories, so it stays off (measured for p_unknown: 0.48-0.56 on the CPU demo).
    min_auroc: float = 0.6
    lenient: LenientGate | None = None  # None: one threshold for every verdict

    @model_validator(mode="after")
    def _check(self) -> "GateConfig":
        if self.lenient is not None and self.threshold is not None and self.lenient.threshold is None:
            raise ValueError("gate.lenient.threshold is required when gate.threshold is fixed")
        if self.lenient is not None and self.signal != "closed_book_nll":
            raise ValueError("gate.lenient needs signal: closed_book_nll (a doubt read before the verdict)")
        return self


class DetectorConfig(Strict):
    """The scored verdict pass."""

    adapter: str | None = "lora"  # adapter name in the generator's `adapters` (None: base model)
    top_logprobs: int = 20  # alternatives read at each position (labels must be among them)
    max_new_tokens: int = 48
    tokenizer: str | None = None  # for openai kind: a local tokenizer path (default: model)

    @model_validator(mode="after")
    def _check(self) -> "DetectorConfig":
        if self.top_logprobs < 5:
            raise ValueError("top_logprobs must be >= 5 (the five verdict labels)")
        return self


class FallbackConfig(Strict):
    """AdvancedRAGSystem: the scored pass, the gate and the policy."""

    detector: DetectorConfig = DetectorConfig()
    gate: GateConfig = GateConfig()
    policy: PolicyConfig = PolicyConfig()


# ---------------------------------------------------------------------------------------
# The end-to-end run (`lorarag run configs/run/*.yaml`).
# ---------------------------------------------------------------------------------------

SCENARIO_NAMES = ("consistent", "factual_error", "outdated", "irrelevant", "unanswerable")


class SystemConfig(Strict):
    """One evaluated system (fallback/systems.py)."""

    name: str
    kind: Literal["lora_rag", "base_rag", "prompted_detection", "closed_book", "oracle"]
    context: Literal["retrieved", "presented"] = "retrieved"
    adapter: str | None = None  # closed_book: None = base model, "lora" = the trained adapter
    max_new_tokens: int = 24  # base_rag / closed_book / oracle answers
    # lora_rag: where the reply's memory field comes from: a closed-book pass of the same adapter
    # answers first and the reply is forced to start with it (`closed_book`, measured better on the
    # CPU demo: its recall beats the memory the model writes inside a RAG reply), or the model
    # writes it itself (`reply`).
    memory: Literal["reply", "closed_book"] = "closed_book"

    @property
    def uses_adapter(self) -> bool:
        """Whether its answers depend on the trained adapter (and so on the training seed)."""
        return self.kind == "lora_rag" or (self.kind == "closed_book" and self.adapter is not None)


class CalibrationConfig(Strict):
    """Gate calibration on the DEV split (dev phrasing of known facts + never-learned orgs)."""

    scenarios: list[Literal["consistent", "factual_error", "outdated", "irrelevant", "unanswerable"]] = [
        "consistent", "factual_error", "outdated", "irrelevant"]
    max_items: int = 200  # per group (known / never-learned), seeded sample
    context: Literal["retrieved", "presented"] = "retrieved"  # as the lora_rag system sees it
    # Each sampled dev fact is asked once in each of these wordings (duplicate facts dropped).
    # `auto`: the dev phrasing + every closed-book paraphrase the SFT rows do not use (demo:
    # 2, 6, 7, 8, 9), so the threshold reads the adapter's confidence on several new wordings,
    # not on one (research log, session 7). Never the test phrasing or a trained one.
    phrasings: Literal["auto"] | list[int] = "auto"


class EvalSection(Strict):
    """Which scenario cells each system is evaluated on, and the statistics."""

    scenarios: list[Literal["consistent", "factual_error", "outdated", "irrelevant", "unanswerable"]] = \
        list(SCENARIO_NAMES)
    knowledge: list[Literal["known", "unknown"]] = ["known", "unknown"]
    max_per_cell: int | None = 40  # items per (scenario, knowledge) cell, seeded sample; None = all
    bootstrap: int = Field(1000, ge=1000)  # paired-bootstrap resamples (eval.compare's minimum)
    seed: int = 0


class ExtraSet(Strict):
    """A real conflict set evaluated beside the demo world by every system of the run.

    `path` is the set's folder (ConflictNQ: `<split>.jsonl`; ConflictQA:
    `strategyqa-chatgpt.jsonl`); its true passages get their own index (same retrieval config) so
    `retrieved` systems retrieve, then see the fabricated passage in place of the true one.
    """

    kind: Literal["conflictnq", "conflictqa"]
    path: str
    split: Literal["test", "val"] = "test"  # conflictnq only
    max_per_cell: int | None = None  # None: eval.max_per_cell
    # false: a missing data folder skips the set with a note (shared data a machine may not have);
    # true: the run stops before training
    required: bool = True


class RunConfig(Strict):
    """`lorarag run`: world → index → train/reuse LoRA → calibrate → evaluate → report."""

    name: str
    seed: int = 0
    runs_dir: str = "runs"
    train: TrainConfig  # holds the world and SFT sections
    rag: RAGConfig
    prepare_base: Literal["smollm2_gguf", "tiny_qwen3"] | None = None  # build the base model folder first
    fallback: FallbackConfig = FallbackConfig()
    calibration: CalibrationConfig = CalibrationConfig()
    systems: list[SystemConfig]
    eval: EvalSection = EvalSection()
    extra_sets: list[ExtraSet] = []

    @model_validator(mode="after")
    def _check(self) -> "RunConfig":
        if self.rag.generator is None:
            raise ValueError("rag.generator is required (the base model the LoRA is trained on)")
        if self.train.world is None:
            raise ValueError("train.world is required (the demo world the run generates)")
        names = [s.name for s in self.systems]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"systems: duplicate name(s) {dup}")
        if not self.systems:
            raise ValueError("systems: at least one system")
        adapter = self.fallback.detector.adapter
        if adapter is not None and adapter in self.rag.generator.adapters:
            raise ValueError(f"rag.generator.adapters.{adapter}: set by the run (the trained adapter)")
        if self.calibration.phrasings != "auto":
            allowed = self._untrained_phrasings()
            bad = [p for p in self.calibration.phrasings if p not in allowed]
            if bad or not self.calibration.phrasings:
                raise ValueError(f"calibration.phrasings: {bad or 'empty'} not allowed: dev questions use "
                                 f"phrasings neither trained nor tested, here {list(allowed)}")
        return self

    def dev_phrasings(self) -> tuple[int, ...]:
        """The phrasings the gate's dev questions are asked in (`calibration.phrasings` resolved)."""
        if self.calibration.phrasings != "auto":
            return tuple(self.calibration.phrasings)
        return self._untrained_phrasings()

    def _untrained_phrasings(self) -> tuple[int, ...]:
        return untrained_phrasings(self.train.sft.knowledge_phrasings if self.train.sft else None)

