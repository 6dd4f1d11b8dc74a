"""Knowledge updates on a user's knowledge base: facts the LoRA learns in their older state.

A knowledge base changes after a model is trained on it. To measure that case on a set with older
versions (`data.outdated`, `{id, answer, date}`), a seeded share (`data.update_fraction`) of the
taught facts that have an older version are taught closed-book with the OLDER answer: the LoRA's
memory is stale, and the KB's current chunk, presented as it is, is right (scenario `update`, the
older answer `superseded`). Of those facts, the ones of the `known` split are tested on the
`update` cell only (their memory is not the truth the other cells assume), and never shown in a
conflict-aware row; the ones of `known_dev` give the conflict-aware `update` rows (memory = the
older answer, verdict supported, answer = the current one), so the judgement is trained on facts
the test never asks. A set without older versions has no such facts: its report says the cell
does not apply.

Those dev facts are few (research-updates.yaml: 34, 68 rows against 254 `outdated` rows), so
with `data.snapshot` set, `dated_twins` can add update rows on every taught fact: a factual-error
training row's substituted passage, dated after the snapshot, becomes a right newer source
(verdict supported, answer its value). The pair differs in the date alone, which is the judgement
the `update` and `factual_error` cells ask for together.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import replace

from lorarag.scenarios.from_corpus import OlderValue, Versions, held_out_older, updated_in
from lorarag.scenarios.kb_records import QAItem
from lorarag.scenarios.kb_splits import TAUGHT
from lorarag.scenarios.records import Scenario


def stale_taught(
    groups: Mapping[str, Sequence[QAItem]], outdated: Mapping[str, Versions], fraction: float, seed: int
) -> dict[str, OlderValue]:
    """qid -> the older version the LoRA is taught instead of the truth (of several, the one an
    outdated test would show: `held_out_older`), for a seeded `fraction` of the
    taught items with answers and an older version (stable per item: the draw reads only the seed and
    the qid, so growing the set keeps every earlier choice)."""
    if fraction <= 0:
        return {}
    out = {}
    for g in TAUGHT:
        for it in groups.get(g, ()):
            versions = outdated.get(it.qid)
            draw = zlib.crc32(f"{seed}/update/{it.qid}".encode()) / 2**32
            if versions and it.answers and draw < fraction:
                out[it.qid] = held_out_older(versions, it.qid, seed)
    return out


def asked_updates(groups: Mapping[str, Sequence[QAItem]], stale: Mapping[str, OlderValue]) -> set[str]:
    """The stale-taught items the test asks (the `known` split's); the others train the judgement."""
    return {it.qid for it in groups.get("known", ()) if it.qid in stale}


def dated_twins(scenarios: Sequence[Scenario], share: float, snapshot: int, seed: int) -> list[Scenario]:
    """An `update` twin of a seeded `share` of the known facts' factual-error scenarios: the same
    sources, the substituted one dated one to three years after `snapshot` (`updated_in`), its
    value now the answer and the taught one superseded. Stable per scenario (the draw reads the
    seed and the scenario id only)."""
    out = []
    for s in scenarios:
        draw = zlib.crc32(f"{seed}/twin/{s.qid}".encode()) / 2**32
        if s.scenario != "factual_error" or s.knowledge != "known" or not s.gold_answers or draw >= share:
            continue
        year = updated_in(snapshot, s.fact_id.split("/", 1)[-1])
        shown = tuple(replace(p, date=year) if p.replaces else p for p in s.presented)
        out.append(
            replace(
                s,
                qid=s.qid.replace("/factual_error", "/update_twin", 1),
                scenario="update",
                presented=shown,
                gold_answers=(s.context_answer,),
                superseded=s.gold_answers[:1],
            )
        )
    return out
