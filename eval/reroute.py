"""A LoRA-RAG system's results under another routing policy, replayed from its own records.

The route is a pure function of the verdict, the detector's doubt (1 − P(supported)) and whether the
memory counts as known after the gate (fallback/policy.decide_route), and the answer is the route's
field of the reply (`route_answer`). An ItemResult of a `lora_rag` system holds all of them:
`verdict`, `flag_score` (from the saved verdict probabilities), `memory_answer` (set exactly when
the memory was known), `context_answer_model` (the reply's source value) and `raw_output` (the
reply, whose `answer:` field `policy.answer: reply` gives). So a policy ablation, abstaining instead
of answering from the sources when the memory is gated out (`unknown_conflict`), another
`flag_threshold` or `on_invalid`, or the reply's own answer field, is read without a model call, on
the same verdicts, item for item. A memory the record's gate found confident (its CONFIDENT_NOTE)
overrides sources that disagree with it under the variant too (policy rule 5). tests/test_run_e2e.py
holds a replay against the same policy evaluated through the model.

Where a valid reply has no memory, `no_memory: read` answers by the base model's reading of the
sources, and `verdict_read` does where the verdict would abstain: a generation the reply's fields do
not hold. A replay keeps the reading of a record that was read (its note) and routes the others;
where the variant reads an item its record did not, the reading comes from `readings`, the base_rag
system's records on the same context and budget (the same prompt, sources and model: the reading is
base RAG's answer, tests/test_run_e2e.py), or the replay refuses. A reading the variant's
`read_support` finds unsupported by the item's sources (`policy.supported`) becomes an abstention,
as through the model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from lorarag.core.errors import RecordError
from lorarag.eval.records import ItemResult
from lorarag.fallback.config import PolicyConfig
from lorarag.fallback.format import parse_reply
from lorarag.fallback.policy import (
    CONFIDENT_NOTE,
    DISOWNED_NOTE,
    OVERRIDE_NOTE,
    READ_NOTES,
    UNSUPPORTED_NOTE,
    final_answer,
    memory_in_use,
    read_note,
    reads_sources,
    route_with_override,
    supported,
)


def reroute(
    items: Sequence[ItemResult], policy: PolicyConfig, system: str, readings: Mapping[str, ItemResult] | None = None
) -> list[ItemResult]:
    """`items` (one lora_rag system's results) routed by `policy`, renamed `system`; every other
    field (verdict, passes, contexts, latency) is the replayed system's own. `readings`: base RAG's
    results by qid, the base model's reading where the variant reads and the record did not."""
    out = []
    for r in items:
        if r.route is None or r.verdict is None:
            raise RecordError(f"{r.system} {r.qid}: no verdict or route to replay (not a lora_rag result)")
        # a reading the record's own policy withheld (unsupported) holds no answer to replay: read it again
        was_read = any(n in READ_NOTES for n in r.notes) and UNSUPPORTED_NOTE not in r.notes
        notes = tuple(n for n in r.notes if n not in (*READ_NOTES, UNSUPPORTED_NOTE, OVERRIDE_NOTE, DISOWNED_NOTE))
        doubt = r.flag_score if r.flag_score is not None else float("nan")
        uses = memory_in_use(r.verdict, r.memory_answer is not None, policy)  # rule 0: a memory the reply disowns
        # rule 5 as the record's gate decided it: a confident memory overrides sources that disagree
        route, over = route_with_override(
            r.verdict,
            doubt,
            uses,
            uses and CONFIDENT_NOTE in r.notes,
            r.memory_answer or "",
            r.context_answer_model or "",
            policy,
        )
        if r.memory_answer is not None and not uses:
            notes = (*notes, DISOWNED_NOTE)
        if reads_sources(r.verdict != "invalid", uses, route, policy):
            tag = (read_note(policy), f"route replayed from {r.system}: read")
            if was_read:
                out.append(_supported(replace(r, system=system, notes=(*notes, *tag)), policy))
            elif readings is not None and r.qid in readings:
                b = readings[r.qid]
                out.append(
                    _supported(
                        replace(
                            r,
                            system=system,
                            route="context",
                            answer=b.answer,
                            abstained=b.abstained,
                            cited=b.cited,
                            bad_citations=b.bad_citations,
                            notes=(*notes, *tag, f"reading: {b.system}'s answer"),
                        ),
                        policy,
                    )
                )
            else:
                raise RecordError(
                    f"{r.system} {r.qid}: the variant reads the sources where this record was routed "
                    "by its verdict, and no base_rag reading of the item is given (evaluate base_rag "
                    "on the same context, or the variant through the model)"
                )
            continue
        reply = parse_reply(r.raw_output).answer if r.raw_output else ""
        answer = final_answer(route, r.memory_answer or "", r.context_answer_model or "", reply, policy)
        out.append(
            replace(
                r,
                system=system,
                route=route,
                answer=answer,
                abstained=route == "abstain",
                cited=() if was_read else r.cited,
                bad_citations=() if was_read else r.bad_citations,
                notes=(*notes, *((OVERRIDE_NOTE,) if over else ()), f"route replayed from {r.system}: {r.route} -> {route}"),
            )
        )
    return out


def _supported(r: ItemResult, policy: PolicyConfig) -> ItemResult:
    """`r` (a reading) as an abstention where `policy.read_support` finds its answer unsupported."""
    if r.abstained or supported(r.question, r.answer, r.final_texts, policy.read_support):
        return r
    return replace(
        r, route="abstain", answer="", abstained=True, cited=(), bad_citations=(), notes=(*r.notes, UNSUPPORTED_NOTE)
    )
