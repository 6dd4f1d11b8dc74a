"""The system `lorarag eval` runs: built from what `lorarag run` left (index, adapter, gate.json).

Nothing is rebuilt: the world is regenerated in memory from its seed (it is deterministic and the
scenarios name its chunk ids) or a KB run's chunks are read from `<run>/data/chunks.jsonl`, the index
is opened as `lorarag run` wrote it, the run's `numerics:` pins (kernels, threads) are set before any
model loads as `lorarag run` sets them, and the gate's threshold is read from the adapter's gate.json;
a missing or stale piece is a one-line error.
Scenarios given with the config are checked against that index: a chunk id it does not hold is
an error before any model is loaded (it would silently score as a retrieval miss).
`eval_stamp` is what the results depend on, checked by the runner before it resumes a run;
`eval_made_by` the parts of each row's own stamp (index, prompt settings, model by content), so a
resume redoes exactly the rows made otherwise. An adapter trained on another base model than the
one now at its path is refused before anything loads (study/provenance.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from lorarag.core import numerics
from lorarag.core.config import load_config, validate_data
from lorarag.core.errors import ConfigError
from lorarag.core.runinfo import hash_paths
from lorarag.eval.config import EvalConfig
from lorarag.eval.runner import ScenarioSystem
from lorarag.eval.systems import build_system
from lorarag.rag.index.store import index_path
from lorarag.rag.records import Chunk, read_jsonl
from lorarag.scenarios.records import Scenario, validate_against_kb
from lorarag.study.evaluate import system_stamp
from lorarag.study.provenance import reads_index, row_parts
from lorarag.trained.adapters import check_base, find_rag_sft, rag_sft_config, trained_adapter
from lorarag.trained.components import build_parts
from lorarag.trained.config import RunConfig, SystemConfig
from lorarag.trained.load import gate_thresholds, open_retriever


def _components(cfg: EvalConfig) -> tuple[RunConfig, SystemConfig, Path | None, Path | None]:
    """The run config named by `components`, the system's own config, the trained adapter and,
    for a system that answers or reads with it, the RAG-SFT adapter (else None)."""
    if cfg.components is None:
        raise ConfigError(
            "eval config: `components:` must name a run config (configs/run/*.yaml) "
            f"to build the {cfg.system['kind']} system from"
        )
    run_cfg = load_config(cfg.components, RunConfig)
    sc = validate_data(cfg.system, SystemConfig, "eval config: system")
    adapter = trained_adapter(run_cfg)
    rag_sft = find_rag_sft(run_cfg) if sc.uses_rag_sft else None
    own = [(adapter, run_cfg)] if sc.kind != "rag_sft" else []
    own += [(rag_sft, rag_sft_config(run_cfg))] if sc.uses_rag_sft else []
    for found, trained_by in own:
        if sc.uses_adapter and found is None:
            raise ConfigError(
                f"system {sc.name!r} needs the trained adapter of run "
                f"'{trained_by.train.run_name}': run `lorarag run {cfg.components}` first"
            )
        if sc.uses_adapter and found is not None:  # made on the base now at its path, or refused
            check_base(trained_by.train, found, run_cfg.rag.generator.model)
    return run_cfg, sc, adapter, rag_sft


def pin_numerics(cfg: EvalConfig, environ: dict[str, str] | None = None) -> dict[str, str]:
    """Set the `numerics:` pins of the run config in `components` (os.environ, or `environ`) before
    torch loads; returns what was set. Without them an adapter trained and evaluated pinned to AVX2
    answers here with the machine's own kernels (AMX/AVX512 on a Xeon), and its items differ from the
    run's at the same seed; ConfigError when torch is already loaded with other settings."""
    if cfg.components is None:
        return {}
    return numerics.apply(load_config(cfg.components, RunConfig).numerics, environ)


def build_eval_system(cfg: EvalConfig, scenarios: Sequence[Scenario] | None = None) -> ScenarioSystem:
    """The system for `lorarag eval`: models, index and adapter of the run config in `components`.

    The gate is used unless its saved dev calibration shows it uninformative (`gate.min_auroc`), as in the run.
    `scenarios`: checked against the index's chunk ids (RecordError listing the unknown ones).
    """
    run_cfg, sc, adapter, rag_sft = _components(cfg)
    chunks = Path(run_cfg.runs_dir) / run_cfg.name / "data" / "chunks.jsonl"  # the oracle's gold chunks
    if not chunks.is_file():
        raise ConfigError(f"{chunks}: not found: run `lorarag run {cfg.components}` first")
    kb = read_jsonl(chunks, Chunk)
    retriever = open_retriever(run_cfg, f"lorarag run {cfg.components}")
    if scenarios is not None:
        validate_against_kb(scenarios, {c.chunk_id for c in retriever.chunks})
    threshold, override = gate_thresholds(run_cfg, adapter, f"lorarag calibrate {cfg.components}", saved_required=False)
    parts = build_parts(run_cfg, retriever, adapter, kb, rag_sft)
    return build_system(sc, replace(parts, gate_threshold=threshold, override_threshold=override))


def eval_stamp(cfg: EvalConfig, scenarios: Sequence[Scenario]) -> dict:
    """What `lorarag eval` results depend on: the run's stamp of this system (model, generation
    and retrieval settings, adapter, gate, fallback, the full item list; `--limit` only takes a
    prefix), the scenario file's content and the closed-book run."""
    run_cfg, sc, adapter, rag_sft = _components(cfg)
    threshold, override = gate_thresholds(run_cfg, adapter, f"lorarag calibrate {cfg.components}", saved_required=False)
    stamp = system_stamp(
        run_cfg, sc, list(scenarios), rag_sft if sc.kind == "rag_sft" else adapter, threshold, rag_sft, override=override
    )
    stamp["scenarios_sha256"] = hash_paths([cfg.scenarios]).get(str(Path(cfg.scenarios)))
    stamp["closed_book_run"] = cfg.closed_book_run
    return stamp


def eval_made_by(cfg: EvalConfig) -> dict[str, str]:
    """The parts of every result row's stamp shared by all items (eval/stamps.py): the chunks the
    run's index holds (its oracle's, without an index), the prompt settings, and the base model and
    adapters by content."""
    run_cfg, sc, adapter, rag_sft = _components(cfg)
    chunks: list[Chunk] = []
    if reads_index(sc):
        for f in (
            index_path(run_cfg.rag.index.dir) / "chunks.jsonl",
            Path(run_cfg.runs_dir) / run_cfg.name / "data" / "chunks.jsonl",
        ):
            if f.is_file():
                chunks = read_jsonl(f, Chunk)
                break
    return row_parts(run_cfg, sc, chunks, rag_sft if sc.kind == "rag_sft" else adapter, rag_sft)
