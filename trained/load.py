"""The trained system of a run, ready to use: `load_run(RUN_DIR)` -> an AdvancedRAGSystem.

A run dir written by `lorarag run` holds the resolved config (`config.yaml`); from it come the
index (opened, never rebuilt), the base model with the run's adapter, the reranker, and the gate
threshold that stage 5 fitted on the dev split (gate.json next to the adapter). The result is the
same system `lorarag run` evaluated as `lora_rag`, answering retrieved context:

    from lorarag import load_run
    system = load_run("runs/cpu-demo")
    answer = system.answer(["Who leads Vesova Dynamics?"])[0]
    answer.text, answer.trace.route, answer.trace.verdict, answer.trace.verdict_score

Anything missing or unreadable (no run dir, a garbled config.yaml or adapter.json, no trained
adapter, a truncated adapter_model.safetensors, a garbled gate.json, no index, a gate calibrated by
another generator or for another adapter, an adapter trained on another base model than the one now at
its path) is a one-line ConfigError naming the file or what to run first.
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from lorarag.core import numerics
from lorarag.core.config import load_config
from lorarag.core.errors import ConfigError
from lorarag.fallback.gate import (
    GATE_FILE,
    adapter_sha256,
    fixed_threshold,
    gate_mismatch,
    load_gate,
    override_in_use,
    threshold_in_use,
)
from lorarag.fallback.system import AdvancedRAGSystem, Detector
from lorarag.rag.index.store import IndexMismatch
from lorarag.rag.retrieve import Retriever, load_retriever
from lorarag.train.runs import check_adapter
from lorarag.trained.adapters import check_base, trained_adapter
from lorarag.trained.components import build_parts
from lorarag.trained.config import RunConfig

RUN_CONFIG = "config.yaml"


log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainedRun:
    """What `load_run` read from a run dir: its config, adapter folder and gate threshold."""

    run_dir: Path
    config: RunConfig
    adapter: Path
    gate_threshold: float | None  # None: the gate is off (disabled, or no information on dev)
    override_threshold: float | None = None  # a kept memory at or below it overrides sources that disagree


def gate_thresholds(
    cfg: RunConfig, adapter: Path | None, rerun: str, *, saved_required: bool = True
) -> tuple[float | None, float | None]:
    """(gate threshold, override threshold) the run's systems use: the fixed `gate.threshold` (no
    override: nothing was fitted); (None, None) when the gate is off; else the dev calibration saved
    beside the adapter (gate.json), refused when it was fitted by another rule, override or
    generator or for another adapter's content. Without gate.json: a ConfigError when
    `saved_required`, else (None, None) (the gate stays off). `rerun`: the command that refits it."""
    gate = cfg.fallback.gate
    if gate.threshold is not None:
        return fixed_threshold(gate), None
    if not gate.enabled:
        return None, None
    if adapter is None or not (adapter / GATE_FILE).is_file():
        if saved_required:
            raise ConfigError(f"{(adapter or Path('.')) / GATE_FILE}: no gate calibration: run `{rerun}` first")
        return None, None
    cal = load_gate(adapter)
    stale = gate_mismatch(cal, gate, cfg.rag.generator, adapter_sha256(adapter))
    if stale:
        raise ConfigError(f"{adapter / GATE_FILE}: calibrated with {'; '.join(stale)}: run `{rerun}` first")
    return threshold_in_use(cal, gate), override_in_use(cal, gate)


def open_retriever(cfg: RunConfig, rerun: str) -> Retriever:
    """The run's index, opened as `lorarag run` wrote it (never rebuilt); a missing or mismatched
    one is a one-line ConfigError naming `rerun`, the command that builds it."""
    try:
        return load_retriever(cfg.rag.index, cfg.rag.retrieval, cfg.rag.embedder)
    except (FileNotFoundError, IndexMismatch) as exc:
        raise ConfigError(f"{cfg.rag.index.dir}: no usable index of run '{cfg.name}' ({exc}): run `{rerun}` first") from None


def read_run(run_dir: str | Path) -> TrainedRun:
    """The run's resolved config, trained adapter and gate threshold, checked; nothing is loaded."""
    run_dir = Path(run_dir)
    if not (run_dir / RUN_CONFIG).is_file():
        raise ConfigError(f"{run_dir}: not a run dir of `lorarag run` (no {RUN_CONFIG})")
    cfg = load_config(run_dir / RUN_CONFIG, RunConfig)
    adapter = trained_adapter(cfg)
    if adapter is None:
        raise ConfigError(
            f"{run_dir}: no trained adapter for run '{cfg.train.run_name}' under "
            f"{cfg.train.runs_dir}: run `lorarag run` on its config first"
        )
    check_adapter(adapter)  # before any model loads: a truncated file would fail deep inside peft
    check_base(cfg.train, adapter, cfg.rag.generator.model)  # a base swapped at the same path: refused
    return TrainedRun(run_dir, cfg, adapter, *gate_thresholds(cfg, adapter, "lorarag calibrate"))


def load_run(run_dir: str | Path) -> AdvancedRAGSystem:
    """The run's AdvancedRAGSystem: retrieval over its index, base model + adapter, gate, policy.

    Call `.answer(questions)` for answers with their Trace, and `.close()` when done.
    """
    run = read_run(run_dir)
    cfg = run.config
    pins = numerics.pinned_env(cfg.numerics)
    if pins and "torch" in sys.modules and any(os.environ.get(k) != v for k, v in pins.items()):
        # answers stay valid; only borderline gate readings may round otherwise than in the run
        log.warning(
            "run %s pins CPU kernels (%s) but torch is already loaded: this process keeps its own",
            cfg.name,
            " ".join(f"{k}={v}" for k, v in pins.items()),
        )
    else:
        numerics.apply(cfg.numerics)
    retriever = open_retriever(cfg, "lorarag run")
    parts = build_parts(cfg, retriever, run.adapter, list(retriever.index.chunks))
    detector = Detector(
        parts.generator, parts.first_tokens, cfg.fallback, run.gate_threshold, override_threshold=run.override_threshold
    )
    return AdvancedRAGSystem(parts.rag, detector, cfg.fallback)
