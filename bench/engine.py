"""`lorarag bench engine`: the fast generator settings against transformers fp32, in one run.

Each engine is the CPU demo's LoRA-RAG system (bench/serve.py:demo_system: SmolLM2-135M-Instruct,
the demo world's BM25 index, a zero-B LoRA of the demo's shape, gate off) with other generator
settings. Every question is answered one at a time (one client: retrieve, closed-book pass, scored
pass), the engines taking turns question by question so that load from other processes falls on
all alike. Reported per engine: answers/s, p50 and p95 seconds per answer; and against the
reference (the first engine) and, for a `prompt_lookup` engine, against its twin without it: the
share of questions with the same answer text and the same raw scored reply, the share of passes
(closed-book, scored) with the same tokens (greedy agreement), the largest difference of a top-k
token probability before a pass's first different token, of a verdict probability and of the
closed-book NLL (nats, the gate's reading), and the speed-up of the p50.

The zero-B LoRA answers as the base model does, which writes free text rather than the reply
format: no verdict is read (its difference is 0 by absence; the top-k difference is the reading
that counts here), and its replies copy their prompt less than a trained adapter's, so a drafting
engine (`prompt_lookup`) likely gains less here than on a trained run.
"""

from __future__ import annotations

import json
import logging
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from lorarag.core.errors import UserError
from lorarag.fallback.system import AdvancedRAGSystem, Judgement
from lorarag.rag.generators.base import Generation, Generator

log = logging.getLogger(__name__)

# name -> generator settings over the demo's fp32 generator (configs/run/cpu-demo-fp32.yaml)
ENGINES: dict[str, dict] = {
    "transformers-fp32": {},
    "fp32-prompt-lookup": {"prompt_lookup": 10},
    "bf16": {"dtype": "bfloat16"},  # fp32 LM head (the default): configs/run/cpu-demo.yaml's generator
    "bf16-prompt-lookup": {"dtype": "bfloat16", "prompt_lookup": 10},
    # CTranslate2's C++ decoder, fp32, the adapter merged into a converted copy (rag/generators/ct2.py)
    "ctranslate2-fp32": {"kind": "ctranslate2", "attn_impl": None, "prefix_cache": False, "prompt_lookup": None},
}


def twin(name: str, engines: dict[str, dict]) -> str | None:
    """The engine with the same settings as `name` less `prompt_lookup` (its exact reference)."""
    want = {k: v for k, v in engines[name].items() if k != "prompt_lookup"}
    if want == engines[name]:
        return None
    return next((n for n, s in engines.items() if s == want), None)


@dataclass
class Readings:
    """One engine's per-question results, in question order: wall seconds, answer text, the
    detector's judgement and the generations of its passes (closed-book, then scored)."""

    seconds: list[float] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    judged: list[Judgement] = field(default_factory=list)
    passes: list[list[Generation]] = field(default_factory=list)


class Recording:
    """The detector's generator, with every generation it returns kept in `seen`."""

    def __init__(self, inner: Generator) -> None:
        self.inner, self.seen = inner, []

    def generate(self, conversations, **kw) -> list[Generation]:
        out = self.inner.generate(conversations, **kw)
        self.seen.extend(out)
        return out

    def close(self) -> None:
        self.inner.close()


def _answer_one(system: AdvancedRAGSystem, question: str, into: Readings) -> None:
    """Answer `question` alone; record its wall time, answer, judgement and generations."""
    detector = system.detector
    judge, gen = detector.judge, detector.generator
    seen: list[Judgement] = []

    def recording(qs, srcs):
        out = judge(qs, srcs)
        seen.extend(out)
        return out

    detector.judge, detector.generator = recording, Recording(gen)  # type: ignore[method-assign]
    try:
        t0 = time.perf_counter()
        (ans,) = system.answer([question])
        into.seconds.append(time.perf_counter() - t0)
        into.passes.append(detector.generator.seen)
    finally:
        del detector.judge  # the bound method again
        detector.generator = gen
    into.texts.append(ans.text)
    into.judged.extend(seen)


def _probs_gap(a: Judgement, b: Judgement) -> float:
    """Largest difference of one verdict label's probability (a label missing on one side reads 0)."""
    pa, pb = dict(a.verdict.probs), dict(b.verdict.probs)
    return max((abs(pa.get(k, 0.0) - pb.get(k, 0.0)) for k in {*pa, *pb}), default=0.0)


def _topk_gap(a: Generation, b: Generation) -> float:
    """Largest difference of a top-k token's probability, over the positions before the two
    replies' first different token (a token in one top-k list only reads probability 0)."""
    gap = 0.0
    for ta, tb, ka, kb in zip(a.tokens, b.tokens, a.top_logprobs, b.top_logprobs):
        pa, pb = {t: math.exp(v) for t, v in ka}, {t: math.exp(v) for t, v in kb}
        gap = max(gap, *(abs(pa.get(t, 0.0) - pb.get(t, 0.0)) for t in {*pa, *pb}))
        if ta != tb:
            break
    return gap


def compare(ref: Readings, got: Readings) -> dict:
    """Agreement of `got` with the reference engine over the same questions: the answer text, the
    scored reply, every pass's tokens (greedy agreement), top-k and verdict probabilities, NLL."""
    n = len(ref.texts)
    pairs = [(a, b) for pa, pb in zip(ref.passes, got.passes) for a, b in zip(pa, pb)]
    nll = [abs(a.doubt - b.doubt) for a, b in zip(ref.judged, got.judged) if a.doubt is not None and b.doubt is not None]
    return {
        "answer_agreement": sum(a == b for a, b in zip(ref.texts, got.texts)) / n,
        "raw_reply_agreement": sum(a.verdict.raw == b.verdict.raw for a, b in zip(ref.judged, got.judged)) / n,
        "pass_token_agreement": sum(a.tokens == b.tokens for a, b in pairs) / max(len(pairs), 1),
        "max_topk_prob_diff": max((_topk_gap(a, b) for a, b in pairs), default=0.0),
        "max_verdict_prob_diff": max((_probs_gap(a, b) for a, b in zip(ref.judged, got.judged)), default=0.0),
        "max_nll_diff": max(nll, default=0.0),
    }


def _agreement(r: dict) -> str:
    return (
        f"same answer {r['answer_agreement']:.3f}, same reply {r['raw_reply_agreement']:.3f}, same tokens per "
        f"pass {r['pass_token_agreement']:.3f}, max |dP top-k| {r['max_topk_prob_diff']:.1e}, max |dP verdict| "
        f"{r['max_verdict_prob_diff']:.1e}, max |dNLL| {r['max_nll_diff']:.1e}"
    )


def _row(name: str, r: Readings) -> dict:
    lat = sorted(r.seconds)
    return {
        "engine": name,
        "answers": len(lat),
        "answers_per_s": len(lat) / sum(lat),
        "p50_s": statistics.median(lat),
        "p95_s": lat[min(len(lat) - 1, int(0.95 * len(lat)))],
    }


def run(questions: int, out: Path, names: list[str] | None = None, echo: Callable[[str], None] = print) -> list[dict]:
    """The benchmark (module docstring) over `questions` distinct demo questions, for the engines
    `names` of ENGINES (default: all; the first is the reference); writes `out`."""
    from lorarag.bench.serve import demo_system

    unknown = [n for n in names or () if n not in ENGINES]
    if unknown:
        raise UserError(f"--engines: unknown {unknown} (known: {', '.join(ENGINES)})")
    engines = {n: ENGINES[n] for n in names} if names else ENGINES
    work = out.parent / "serve-work"  # the adapter and index bench serve builds, shared
    systems, pool = {}, []
    for name, settings in engines.items():
        systems[name], pool = demo_system(work, settings)
    asked = pool[:questions]
    warm = pool[-1]
    readings = {name: Readings() for name in engines}
    try:
        for s in systems.values():
            s.answer([warm])  # first-call costs
        for i, q in enumerate(asked):
            for name, s in systems.items():
                _answer_one(s, q, readings[name])
            log.info("question %d/%d answered by every engine", i + 1, len(asked))
    finally:
        for s in systems.values():
            s.close()
    ref_name = next(iter(engines))
    rows = []
    for name, r in readings.items():
        row = _row(name, r)
        row.update(compare(readings[ref_name], r))
        row["p50_speedup_vs_" + ref_name] = rows[0]["p50_s"] / row["p50_s"] if rows else 1.0
        pair = twin(name, engines)
        if pair is not None:
            row["vs_" + pair] = {
                **compare(readings[pair], r),
                "p50_speedup": _row(pair, readings[pair])["p50_s"] / row["p50_s"],
            }
        rows.append(row)
        echo(
            f"  {name:<22} {row['answers_per_s']:.3f} answers/s, p50 {row['p50_s']:.2f} s, p95 {row['p95_s']:.2f} s; "
            f"{_agreement(row)}"
        )
        if pair is not None:
            v = row["vs_" + pair]
            echo(f"    vs {pair}: p50 {v['p50_speedup']:.2f}x, {_agreement(v)}")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"questions": len(asked), "engines": engines, "rows": rows}, indent=1), encoding="utf-8")
    echo(f"-> {out}")
    return rows
