"""Stages 6-7 of a run: every system on the test items (resumable, stamped), then the report."""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

from lorarag.core import outputs
from lorarag.core.paths import child
from lorarag.eval.explorer import EXPLORER_FILE
from lorarag.eval.records import closed_book_map, load_results
from lorarag.eval.report import write_report
from lorarag.eval.reroute import reroute
from lorarag.eval.runner import run_eval, write_results
from lorarag.eval.scoring import correct_fn, score_fn
from lorarag.eval.systems import build_system
from lorarag.fallback.gate import GATE_FILE, adapter_sha256
from lorarag.scenarios.records import Scenario
from lorarag.study.headline import headline_markdown
from lorarag.study.kb import read_summary
from lorarag.study.leaks import read_overlap
from lorarag.study.provenance import row_parts
from lorarag.study.run_folder import Echo, Paths
from lorarag.study.targets import pair_names
from lorarag.train.overlap import overlap_markdown
from lorarag.trained.components import Parts
from lorarag.trained.config import RunConfig, SystemConfig

log = logging.getLogger(__name__)


def system_stamp(
    cfg: RunConfig,
    sc: SystemConfig,
    test: list[Scenario],
    adapter: Path | None,
    gate: float | None,
    rag_sft: Path | None = None,
    *,
    override: float | None = None,
) -> dict:
    """What a system's results depend on: a results folder with another stamp is redone. The
    adapter (the system's own: the RAG-SFT adapter for `rag_sft`) is named by its content
    (`adapter_sha256`), so one retrained at the same path redoes its systems instead of resuming
    the old adapter's results. A system that reads its sources with the RAG-SFT adapter
    (`adapter: rag_sft`) is stamped with that adapter's content too (`rag_sft`)."""
    stamp = {
        "system": sc.model_dump(exclude={"policy"} if sc.policy is None else None),
        "generator": cfg.rag.generator.model_dump(),
        "retrieval": cfg.rag.retrieval.model_dump(),
        "items": hashlib.sha256("\n".join(s.qid for s in test).encode()).hexdigest()[:16],
    }
    if cfg.numerics.cpu_isa or cfg.numerics.threads:  # pinned kernels give other bits than the machine's own
        stamp["numerics"] = cfg.numerics.model_dump()
    if sc.uses_adapter:
        stamp["adapter"] = adapter_sha256(adapter) if adapter is not None else None
    if sc.uses_rag_sft and sc.kind != "rag_sft":  # the memory is `adapter`'s, the reader the RAG-SFT one
        stamp["rag_sft"] = adapter_sha256(rag_sft) if rag_sft is not None else None
    if sc.kind in ("lora_rag", "memory_or_context", "date_rule"):  # they route on the gate's threshold
        stamp["gate"] = gate
        if override is not None and sc.kind == "lora_rag":  # rule 5 routes on it (absent: stamps as before it)
            stamp["override"] = override
    if sc.kind == "date_rule":  # sources are read or dropped by their year against it
        stamp["snapshot"] = cfg.data.snapshot
    if sc.kind in ("lora_rag", "prompted_detection"):  # prompted detection runs without a gate
        fb = cfg.fallback if sc.policy is None else cfg.fallback.model_copy(update={"policy": sc.policy})
        exclude: dict = {"gate": True} if sc.kind == "prompted_detection" else {}
        if fb.policy.answer == "route":  # at its default the field leaves the stamps made before it as they were
            exclude["policy"] = {"answer"}
        stamp["fallback"] = fb.model_dump(exclude=exclude or None)
    return stamp


def replay_source(sc: SystemConfig, done: dict[str, Path], systems: list[SystemConfig]) -> SystemConfig | None:
    """The evaluated lora_rag system a policy variant is replayed from: the first on the same
    context routed by fallback.policy (None: `sc` is no variant, or has none to replay)."""
    if not sc.is_variant:
        return None
    return next(
        (s for s in systems if s.kind == "lora_rag" and not s.is_variant and s.context == sc.context and s.name in done),
        None,
    )


def reading_source(source: SystemConfig, done: dict[str, Path], systems: list[SystemConfig]) -> SystemConfig | None:
    """The evaluated base_rag system whose answers are `source`'s base-model readings: on the same
    context with the same token budget (the same prompt, sources and model), or None."""
    return next(
        (
            s
            for s in systems
            if s.kind == "base_rag"
            and s.context == source.context
            and s.max_new_tokens == source.max_new_tokens
            and s.name in done
        ),
        None,
    )


def evaluate(
    cfg: RunConfig,
    parts: Parts,
    test: list[Scenario],
    paths: Paths,
    adapter: Path | None,
    systems: list[SystemConfig] | None = None,
) -> dict[str, Path]:
    """Closed-book systems first (their answers feed the bias metrics), then the rest.

    Each system's folder keeps a stamp of what its results depend on (model, adapter, gate,
    items); a changed stamp means that system is evaluated afresh, the others resume.
    """
    closed: dict[str | None, dict[str, str]] = {}
    out: dict[str, Path] = {}
    lora = cfg.fallback.detector.adapter
    # closed-book systems first (their answers feed the others' bias metrics), policy variants last
    ordered = sorted(systems or cfg.systems, key=lambda s: (s.kind != "closed_book", s.is_variant))
    for sc in ordered:
        folder = child(paths.eval, sc.name, "system name")  # never outside the run's eval/
        stamp = system_stamp(
            cfg,
            sc,
            test,
            parts.rag_sft if sc.kind == "rag_sft" else adapter,
            parts.gate_threshold,
            parts.rag_sft,
            override=parts.override_threshold,
        )
        model = sc.adapter if sc.kind == "closed_book" else (lora if sc.kind == "lora_rag" else None)
        source = replay_source(sc, out, ordered)
        if source is not None and sc.policy is not None:  # the same verdicts, routed by another policy
            stamp["replayed_from"] = source.name
            by_qid = {r.qid: r for r in load_results(out[source.name])}
            readings = None
            reader = reading_source(source, out, ordered)
            if reader is not None:  # base RAG's answers stand in for readings the records do not hold
                stamp["readings_from"] = reader.name
                readings = {r.qid: r for r in load_results(out[reader.name])}
            write_results(
                reroute([by_qid[s.qid] for s in test], sc.policy, sc.name, readings), folder, stamp=stamp, config=cfg
            )
            out[sc.name] = folder
            continue
        # A changed stamp (model, adapter, gate or items) means this system is evaluated afresh.
        # each row records its item, index, prompt and model (eval/stamps.py): a resume redoes the changed ones
        ctx = parts.contexts
        made_by = row_parts(
            cfg,
            sc,
            ctx.retriever.chunks if ctx.retriever is not None else ctx.kb.values(),
            parts.rag_sft if sc.kind == "rag_sft" else adapter,
            parts.rag_sft,
        )
        results = run_eval(
            build_system(sc, parts),
            test,
            folder,
            closed_book=closed.get(model),
            config=cfg,
            batch_size=32,
            stamp=stamp,
            on_change="restart",
            made_by=made_by,
        )
        if sc.kind == "closed_book":
            closed[sc.adapter] = closed_book_map(results)
        out[sc.name] = folder
    return out


def report(cfg: RunConfig, paths: Paths, runs: dict[str, Path], echo: Echo, adapter: Path | None = None) -> str:
    """The comparison report (eval.report: all systems, and the base-vs-LoRA pair), headline first,
    with the run explorer; the gate's threshold comes from the adapter's gate.json."""
    results = {name: load_results(p) for name, p in runs.items()}
    title = f"lorarag run {cfg.name}"
    table = headline_markdown(cfg, results, read_summary(paths.root))
    overlap = read_overlap(paths.root)  # which test contexts training showed (study/leaks.py)
    if overlap:
        table = table.rstrip() + "\n\n" + "\n".join(overlap_markdown(overlap)).rstrip() + "\n"
    pair = pair_names(cfg, results)
    gate = adapter / GATE_FILE if adapter is not None and (adapter / GATE_FILE).is_file() else None
    # the headline's own rules: items.jsonl, attribution and the forest plot count as its table does
    rules = {"correct": correct_fn(cfg.data.answer_metric), "score": score_fn(cfg.data.answer_metric)}
    write_report(
        results,
        paths.report,
        resamples=cfg.eval.bootstrap,
        seed=cfg.eval.seed,
        title=title,
        headline=table,
        gate=gate,
        pair=pair,
        **rules,
    )
    if pair is not None:
        write_report(
            {n: results[n] for n in pair},
            paths.report / "base-vs-lora",
            resamples=cfg.eval.bootstrap,
            seed=cfg.eval.seed,
            title=f"{title}: {pair[1]} vs {pair[0]}",
            headline=table,
            gate=gate,
            explorer=False,
            **rules,
        )
    (paths.report / "headline.md").write_text(table, encoding="utf-8")
    outputs.record([paths.report / "headline.md"])  # lorarag's: --fresh clears it
    echo(table)
    echo(
        f"report: {paths.report / 'report.html'}" + (f" and {paths.report / 'base-vs-lora' / 'report.html'}" if pair else "")
    )
    echo(f"explorer (every item of every system; opens from disk): {paths.report / EXPLORER_FILE}")
    return table
