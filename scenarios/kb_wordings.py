"""Which wording each known test item is asked in, and the wordings training may use instead.

A LoRA trained on one sentence and tested on the same sentence can answer from the string rather
than from the fact. So each item of the `known` (test) split with two or more wordings keeps one
out of every SFT row, closed-book or conflict-aware, and the test asks it in that one:
- `set`: the set words it two or more ways (ConflictNQ's cleaned and raw NQ question, a JSONL
  item's `paraphrases`): the held-out wording is the first of a seeded shuffle of its wordings
  (seed and item id only: the same wording whatever else the set holds) that is no other
  question's wording; training uses the rest;
- `paraphrase`: the set words it once and `data.paraphrase` generated other wordings
  (study/paraphrase.py): training uses the generated ones, the test asks the set's own;
- `trained`: neither is possible (one wording and no kept paraphrase, or every wording it has is
  also a wording of another question of the set, case and spacing aside, so another row would
  train it anyway): the test asks the set's own wording, a trained one, and the tables say so.
The gate's known dev facts (`known_dev`) are planned the same way and asked at dev in their
held-out wording, so the threshold reads the memory's confidence in the condition the test asks
it in (a wording training never used), not in trained sentences. Since a held-out wording is no
other question's wording, no other training or dev question asks it.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from lorarag.scenarios.kb_records import QAItem, norm_text

How = Literal["set", "paraphrase", "trained"]


@dataclass(frozen=True)
class KnownWording:
    """The wording the test asks one known item in, and the wordings its SFT rows use."""

    qid: str
    test: str
    trained: tuple[str, ...]  # question first, as QAItem.all_wordings; holds `test` only when how == "trained"
    how: How

    @property
    def held_out(self) -> bool:
        return self.how != "trained"


PLANNED = ("known", "known_dev")  # the taught facts the test or the gate's dev split asks


def plan_wordings(
    groups: Mapping[str, Sequence[QAItem]], seed: int, generated: Collection[str] = ()
) -> dict[str, KnownWording]:
    """qid -> KnownWording for every item of the PLANNED groups (see the module docstring);
    `generated`: qids whose wordings besides the question were written by data.paraphrase."""
    owners: dict[str, set[str]] = {}
    for items in groups.values():
        for it in items:
            for w in it.all_wordings:
                owners.setdefault(norm_text(w), set()).add(it.qid)

    def own(it: QAItem, w: str) -> bool:
        return owners[norm_text(w)] == {it.qid}

    plan = {}
    for it in (it for g in PLANNED for it in groups.get(g, ())):
        ws = it.all_wordings
        if len(ws) > 1 and it.qid in generated:
            if own(it, it.question):
                plan[it.qid] = KnownWording(it.qid, it.question, ws[1:], "paraphrase")
                continue
        elif len(ws) > 1:
            order = list(ws)
            random.Random(f"{seed}/test-wording/{it.qid}").shuffle(order)
            held = next((w for w in order if own(it, w)), None)
            if held is not None:
                plan[it.qid] = KnownWording(it.qid, held, tuple(w for w in ws if w != held), "set")
                continue
        plan[it.qid] = KnownWording(it.qid, it.question, ws, "trained")
    return plan


def _as(it: QAItem, wordings: tuple[str, ...]) -> QAItem:
    return replace(it, question=wordings[0], wordings=wordings[1:])


def training_groups(groups: Mapping[str, list[QAItem]], plan: Mapping[str, KnownWording]) -> dict[str, list[QAItem]]:
    """`groups` with each planned item worded only as training may word it."""
    return {
        g: [_as(it, plan[it.qid].trained) if g in PLANNED and it.qid in plan else it for it in items]
        for g, items in groups.items()
    }


def as_tested(items: Iterable[QAItem], plan: Mapping[str, KnownWording]) -> list[QAItem]:
    """Known `items` each worded only as the test asks it."""
    return [_as(it, (plan[it.qid].test,)) if it.qid in plan else it for it in items]


def held_out(plan: Mapping[str, KnownWording], qids: Collection[str] | None = None) -> dict[str, str]:
    """Held-out wording -> the qid of its item (of `qids` when given): what no training row may ask."""
    return {p.test: q for q, p in plan.items() if p.held_out and (qids is None or q in qids)}


def wording_summary(plan: Mapping[str, KnownWording], qids: Iterable[str]) -> dict:
    """For the run summary: of the known test items `qids`, how many are asked in a wording training
    never used, by how, and the ids of those asked in a trained one (the headline labels their cells)."""
    asked = sorted(set(qids))
    by: dict[str, int] = {"set": 0, "paraphrase": 0, "trained": 0}
    for q in asked:
        by[plan[q].how] += 1
    return {
        "items": len(asked),
        "held_out": len(asked) - by["trained"],
        "by": by,
        "trained_wording": [q for q in asked if not plan[q].held_out],
    }
