"""A LoRA-RAG system's results under another routing policy, replayed from its own records.

The route is a pure function of the verdict, the detector's doubt (1 − P(supported)) and whether
the memory counts as known after the gate (fallback/policy.decide_route), and the answer is the
route's field of the reply (`route_answer`). An ItemResult of a `lora_rag` system holds all of
them: `verdict`, `flag_score` (from the saved verdict probabilities), `memory_answer` (set exactly
when the memory was known), `context_answer_model` (the reply's source value) and `raw_output` (the
reply, whose `answer:` field `policy.answer: reply` gives). So a policy ablation, abstaining instead
of answering from the sources when the memory is gated out (`unknown_conflict`), another
`flag_threshold` or `on_invalid`, or the reply's own answer field, is read without a model call, on
the same verdicts, item for item. tests/test_run_e2e.py holds a replay against the same policy
evaluated through the model.

With `no_memory: read` a valid reply without a memory is answered by the base model's reading of
the sources, a generation the verdict's fields do not hold: a `read` policy replays only records
that were read (their READ_NOTE), and keeps their answer. A `verdict` policy replays from any.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from lorarag.core.errors import RecordError
from lorarag.eval.records import ItemResult
from lorarag.fallback.config import PolicyConfig
from lorarag.fallback.format import parse_reply
from lorarag.fallback.policy import READ_NOTE, decide_route, final_answer, reads_sources


def reroute(items: Sequence[ItemResult], policy: PolicyConfig, system: str) -> list[ItemResult]:
    """`items` (one lora_rag system's results) routed by `policy`, renamed `system`; every other
    field (verdict, passes, contexts, latency) is the replayed system's own."""
    out = []
    for r in items:
        if r.route is None or r.verdict is None:
            raise RecordError(f"{r.system} {r.qid}: no verdict or route to replay (not a lora_rag result)")
        was_read = READ_NOTE in r.notes
        notes = tuple(n for n in r.notes if n != READ_NOTE)
        if reads_sources(r.verdict != "invalid", r.memory_answer is not None, policy):
            if not was_read:
                raise RecordError(f"{r.system} {r.qid}: the variant reads the sources where the gate rejected the "
                                  "memory, and this record was routed by its verdict: no reading to replay "
                                  "(evaluate the variant through the model)")
            out.append(replace(r, system=system, notes=(*r.notes, f"route replayed from {r.system}: read")))
            continue
        doubt = r.flag_score if r.flag_score is not None else float("nan")
        route = decide_route(r.verdict, doubt, r.memory_answer is not None, policy)
        reply = parse_reply(r.raw_output).answer if r.raw_output else ""
        answer = final_answer(route, r.memory_answer or "", r.context_answer_model or "", reply, policy)
        out.append(replace(r, system=system, route=route, answer=answer, abstained=route == "abstain",
                           cited=() if was_read else r.cited, bad_citations=() if was_read else r.bad_citations,
                           notes=(*notes, f"route replayed from {r.system}: {r.route} -> {route}")))
    return out
