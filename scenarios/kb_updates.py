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
"""

from __future__ import annotations

import zlib
from typing import Mapping, Sequence

from lorarag.scenarios.from_corpus import OlderValue, Versions, held_out_older
from lorarag.scenarios.kb_records import QAItem
from lorarag.scenarios.kb_splits import TAUGHT


def stale_taught(groups: Mapping[str, Sequence[QAItem]], outdated: Mapping[str, Versions], fraction: float,
                 seed: int) -> dict[str, OlderValue]:
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
