"""Configs of the fallback system: the scored verdict pass, the self-knowledge gate, the policy."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from lorarag.core.config import Strict


class PolicyConfig(Strict):
    """Thresholds of the routing policy (fallback/policy.py)."""

    flag_threshold: float = Field(
        0.5,
        description=(
            "minimum detector doubt, 1 − P(supported), for a conflicting or outdated verdict to be acted on; below it "
            "the sources win"
        ),
    )
    on_invalid: Literal["context", "abstain"] = Field(
        "abstain",
        description=("route of a reply whose verdict cannot be read (`invalid`): abstain, or answer from the context"),
    )
    no_memory: Literal["verdict_read", "read", "verdict"] = Field(
        "verdict_read",
        description=(
            "where the gate rejects the memory (or the closed-book answer is `unknown`) and the reply is valid: "
            "`verdict_read` = the verdict routes as with a memory (the reply's source field where a source is judged "
            "usable), and where it would abstain the base model answers from the same sources with the plain RAG "
            "prompt, as base RAG does; `read` = the base model answers every such item; `verdict` = the verdict "
            "routes and may abstain (on an irrelevant/insufficient verdict). Without a memory the verdict follows "
            "familiarity with the fact more than the passage, so `verdict_read` lets the base model read where the "
            "verdict would abstain"
        ),
    )
    read_support: float | None = Field(
        None,
        ge=0.0,
        le=1.0,
        description=(
            "where the base model reads the sources (no trusted memory), the share of its answer's own words (not the "
            "question's, not function words) that must occur in the sources for the answer to be kept; below it the "
            "system abstains, as where nothing answers. null keeps every reading (fallback/policy.supported). A span "
            "answer (a name, a year) is copied from the sources; a sentence is paraphrased, so on sentence answers "
            "most right readings are withheld (a run warns where the dev split's answers are sentences)"
        ),
    )
    insufficient: Literal["disowns", "kept"] = Field(
        "disowns",
        description=(
            "a reply whose verdict is `insufficient` under a memory the gate kept: `disowns` = the memory counts as "
            "unknown, as if the gate had rejected it (the LoRA is taught that verdict only where it has no memory and "
            "the sources do not answer, so a memory it calls insufficient is one it does not stand by: `no_memory` then "
            "routes the item and an unanswerable question is not answered from an invented memory); `kept` = the memory "
            "answers (fallback)"
        ),
    )
    override: bool = Field(
        True,
        description=(
            "a memory the gate is confident of (at or below its override threshold, `gate.override`) wins over "
            "sources whose answer differs from it; false: the verdict alone routes (fallback/policy.py, rule 5)"
        ),
    )
    unknown_conflict: Literal["context", "abstain"] = Field(
        "context",
        description=(
            "route of a conflicting/outdated verdict when the gate says the memory is unknown (doubt but no memory): "
            "the context's answer, or abstain (under verdict_read the abstention is the base model's reading)"
        ),
    )
    answer: Literal["route", "reply"] = Field(
        "route",
        description=(
            "the text of a routed answer: `route` = the reply's field the route names (`source:` for context, `memory:` "
            "for fallback); `reply` = the reply's own `answer:` field where it holds a value (else the route's field). "
            "Abstentions are the same either way"
        ),
    )


class GateConfig(Strict):
    """The self-knowledge gate (fallback/gate.py): does the model's memory count?

    It reads the mean negative log-likelihood (nats/token) of the adapter's own greedy closed-book
    answer (higher = more likely never learned); above the threshold the memory counts as unknown.
    """

    enabled: bool = Field(
        True,
        description=(
            "use the self-knowledge gate; off: a memory counts as known unless the closed-book answer is itself `unknown`"
        ),
    )
    threshold: float | None = Field(
        None,
        description=(
            "mean NLL (nats/token) above which the memory counts as unknown; null: read gate.json next to the adapter "
            "(calibrated)"
        ),
    )
    rule: Literal["youden", "unknown_recall", "logistic"] = Field(
        "logistic",
        description=(
            "how `lorarag calibrate` picks the threshold from dev items (fallback/gate.calibrate): `youden` maximises "
            "known kept + never-learned rejected − 1, `unknown_recall` rejects at least `target` of never-learned "
            "items, `logistic` is where a logistic fit of never-learned on log(doubt) crosses 1/2"
        ),
    )
    target: float = Field(0.95, description="unknown_recall rule: share of never-learned dev items to reject")
    override: float | None = Field(
        0.3,
        gt=0.0,
        lt=1.0,
        description=(
            "a memory the gate keeps overrides sources whose answer differs from it (the verdict notwithstanding) "
            "where the dev fit gives it at most this probability of being never learned (fallback/gate.py: a "
            "logistic fit of never-learned on log(doubt), as the `logistic` rule; the override threshold is never "
            "above the gate's). The verdict rarely doubts an edited copy of a chunk the LoRA never saw edited; a "
            "confident memory does. null: the verdict alone decides"
        ),
    )
    min_auroc: float = Field(
        0.6,
        description=(
            "A gate whose dev AUROC is below this, even at the upper 95 % bound its dev readings allow (fallback/gate.py "
            "`auroc_upper`), carries no self-knowledge: it would only throw away real memories, so it stays off. A "
            "small dev split whose estimate falls short by chance keeps the gate, without the override (`override` asks the "
            "estimate itself to reach this)."
        ),
    )


class DetectorConfig(Strict):
    """The scored verdict pass."""

    adapter: str | None = Field("lora", description="adapter name in the generator's `adapters` (null: base model)")
    top_logprobs: int = Field(20, description="alternatives read at each position (labels must be among them)")
    max_new_tokens: int = Field(
        48, description=("tokens generated for the scored pass (`memory: … | source: … | verdict: … | answer: …`)")
    )
    tokenizer: str | None = Field(None, description="for openai kind: a local tokenizer path (default: model)")

    @model_validator(mode="after")
    def _check(self) -> DetectorConfig:
        if self.top_logprobs < 5:
            raise ValueError("top_logprobs must be >= 5 (the five verdict labels)")
        return self


class FallbackConfig(Strict):
    """AdvancedRAGSystem: the scored pass, the gate and the policy."""

    detector: DetectorConfig = DetectorConfig()
    gate: GateConfig = GateConfig()
    policy: PolicyConfig = PolicyConfig()
