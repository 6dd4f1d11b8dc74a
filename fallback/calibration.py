"""Step 5 of `lorarag run`: the shared components and the self-knowledge gate's calibration.

`build_parts` builds the generator (base model + the trained adapter), the RAGSystem and the
scenario contexts once; `calibrate_gate` reads the gate's doubt score (GateConfig.signal) on the
DEV split — dev phrasing of known facts vs never-learned organisations — and saves the threshold
as gate.json next to the adapter, so test items never tune it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from fallback.config import RunConfig
from fallback.scenarios import Scenario

Echo = Callable[[str], None]

@dataclass
class Parts:
    """Components built once and injected into every scenario system."""

    generator: Any
    first_tokens: dict[str, str]
    fallback: Any
    gate_threshold: float | None
    rag: Any
    contexts: Any
    lenient_threshold: float | None = None  # GateConfig.lenient, when the gate is in use


def build_parts(cfg: RunConfig, retriever: Any, adapter: Path | None, world: Any) -> Parts:
    """One generator (base + the trained adapter, if any), the RAGSystem and the scenario contexts."""
    from fallback.systems import ScenarioContexts, with_adapter_name
    from fallback.verdict import label_first_tokens
    from rag.generate import build_generator

    name = cfg.fallback.detector.adapter or "lora"
    gen_cfg = cfg.rag.generator if adapter is None else with_adapter_name(cfg.rag.generator, str(adapter), name)
    generator = build_generator(gen_cfg)
    reranker = None
    if cfg.rag.reranker is not None:
        from rag.rerank import build_reranker

        reranker = build_reranker(cfg.rag.reranker)
    rag = _rag_system(cfg.rag.model_copy(update={"generator": gen_cfg}), retriever, reranker, generator)
    kb = {c.chunk_id: c for c in world.chunks()}
    ctx = ScenarioContexts(retriever, reranker, cfg.rag.retrieval, kb)
    return Parts(generator, label_first_tokens(_tokenizer(cfg, generator)), cfg.fallback, None, rag, ctx)


def _rag_system(rag_cfg: Any, retriever: Any, reranker: Any, generator: Any) -> Any:
    from rag.prompt import PromptBuilder
    from rag.system import RAGSystem

    return RAGSystem(retriever, generator, PromptBuilder(rag_cfg.prompt), rag_cfg.retrieval, reranker=reranker)


def _tokenizer(cfg: RunConfig, generator: Any) -> Any:
    tok = getattr(generator, "tokenizer", None)
    if tok is not None:
        return tok
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(cfg.fallback.detector.tokenizer or cfg.rag.generator.model)


def calibrate_gate(cfg: RunConfig, parts: Parts, adapter: Path, dev_known: list[Scenario],
                   dev_unseen: list[Scenario], echo: Echo, *, force: bool = False) -> Any:
    """The gate's doubt score on the dev split → threshold, saved as gate.json next to the adapter."""
    from fallback.gate import GATE_FILE, calibrate_claimed, generator_id, known_recall_threshold, load_gate
    from fallback.system import Detector

    g = cfg.fallback.gate
    if g.threshold is not None and not force:
        parts.gate_threshold, parts.lenient_threshold = fixed_thresholds(g)
        return None
    if (adapter / GATE_FILE).is_file() and not force:
        cal = load_gate(adapter)
        if reusable_gate(cal, g, cfg.rag.generator, len(dev_known), len(dev_unseen)):
            parts.gate_threshold, parts.lenient_threshold = thresholds_in_use(cal, g, echo)
            echo(f"          reusing gate calibration from {adapter / GATE_FILE}")
            return cal
    det = Detector(parts.generator, parts.first_tokens, cfg.fallback, None)
    readings: list[list[float | None]] = []  # None: the closed-book answer declined
    for label, items in (("known", dev_known), ("never-learned", dev_unseen)):
        ctx = parts.contexts.contexts(items, cfg.calibration.context)
        vals: list[float | None] = []
        for s in range(0, len(items), 32):
            vals.extend(det.gate_scores([x.question for x in items[s:s + 32]], [c[1] for c in ctx[s:s + 32]]))
            echo(f"          dev {label}: {min(s + 32, len(items))}/{len(items)}")
        readings.append(vals)
    cal = replace(calibrate_claimed(readings[0], readings[1], rule=g.rule, target=g.target, signal=g.signal),
                  generator=generator_id(cfg.rag.generator))
    if cal.known_declined or cal.unseen_declined:
        echo(f"          declined closed-book (\"unknown\", left out of the fit): known "
             f"{cal.known_declined}/{cal.n_known}, never-learned {cal.unseen_declined}/{cal.n_unseen}")
    if g.lenient is not None:
        claimed = [x for x in readings[0] if x is not None]
        loose = max(cal.threshold, known_recall_threshold(claimed, g.lenient.known_kept) if claimed else cal.threshold)
        cal = replace(cal, lenient_threshold=loose, lenient_rule=lenient_rule(g))
    cal.save(adapter)
    parts.gate_threshold, parts.lenient_threshold = thresholds_in_use(cal, g, echo)
    return cal


def fixed_thresholds(g: Any) -> tuple[float | None, float | None]:
    """(gate, lenient) thresholds as the config fixes them (`gate.threshold` set); None = not used."""
    return (g.threshold if g.enabled else None,
            g.lenient.threshold if g.enabled and g.lenient is not None else None)


def thresholds_in_use(cal: Any, g: Any, echo: Echo) -> tuple[float | None, float | None]:
    """(gate, lenient) thresholds the system uses from a dev calibration; None = not used."""
    return gate_in_use(cal, g, echo), lenient_in_use(cal, g)


def lenient_rule(g: Any) -> str:
    """How GateConfig.lenient chooses its threshold, as saved in gate.json ("" when unused)."""
    return f"known_recall {g.lenient.known_kept}" if g.lenient is not None else ""


def lenient_in_use(cal: Any, g: Any) -> float | None:
    """The lenient threshold the system uses: None without `gate.lenient` or when the gate is off."""
    if g.lenient is None or not g.enabled or not cal.auroc >= g.min_auroc:
        return None
    return cal.lenient_threshold


def gate_mismatch(cal: Any, g: Any, gen_cfg: Any) -> list[str]:
    """What a saved calibration was made with that the config no longer asks for: rule, signal,
    lenient rule, generator (a bf16 model reads other NLLs than an fp32 one; files from before the
    generator field never match)."""
    from fallback.gate import generator_id

    pairs = {"rule": (cal.rule, g.rule), "signal": (cal.signal, g.signal),
             "lenient": (cal.lenient_rule, lenient_rule(g)), "generator": (cal.generator, generator_id(gen_cfg))}
    return [f"{k} {saved!r} (config: {want!r})" for k, (saved, want) in pairs.items() if saved != want]


def reusable_gate(cal: Any, g: Any, gen_cfg: Any, n_known: int, n_unseen: int) -> bool:
    """A saved calibration still applies: nothing in gate_mismatch, same dev sizes."""
    return not gate_mismatch(cal, g, gen_cfg) and (cal.n_known, cal.n_unseen) == (n_known, n_unseen)


def gate_in_use(cal: Any, g: Any, echo: Echo) -> float | None:
    """The threshold the system uses: None when the gate is off or carries no information on dev."""
    if not g.enabled:
        return None
    if not cal.auroc >= g.min_auroc:
        echo(f"          gate OFF: {cal.signal} separates known from never-learned dev items with AUROC "
             f"{cal.auroc:.3f} < {g.min_auroc} (it would only discard real memories)")
        return None
    return cal.threshold
