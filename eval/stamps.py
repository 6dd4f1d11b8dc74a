"""What produced one result row: the hashes of its item, the index, the prompt settings and the model.

Each ItemResult carries `made_by`, sorted `(part, hash)` pairs:

    item    the scenario record itself: question, gold answers, presented passages' text, its world
    index   the chunks the system retrieves (or reads its oracle passage) from, and how they are embedded
    prompt  the grounded prompt's settings (`rag.prompt`: wording, system prompts, max_context_chars)
    model   the base model's and the adapters' content (file hashes, not paths)

The caller (study/evaluate.py for `lorarag run`, study/eval_system.py for `lorarag eval`) hashes the
parts shared by every item once per run (`part_sha256`); `row_stamp` adds the item's own. The runner
reuses a row only when its `made_by` equals the one the item would get now, so a knowledge-base edit
recomputes exactly the rows it touches, and a row without the stamp (an older lorarag) is recomputed.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from lorarag.rag.records import Chunk, to_dict
from lorarag.scenarios.records import Scenario

PARTS = ("item", "index", "prompt", "model")
Stamp = tuple[tuple[str, str], ...]


def part_sha256(value: Any) -> str:
    """A short (16 hex) sha256 of a JSON-able value (dict keys sorted): one part of a row's stamp."""
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def item_sha256(scenario: Scenario) -> str:
    """The item part: the whole scenario record (a reworded question, another gold answer or passage
    text, another world all give another hash)."""
    return part_sha256(to_dict(scenario))


def chunks_sha256(chunks: Iterable[Chunk], settings: Any = None) -> str:
    """The index part: every chunk's id, document and text in index order, and `settings` (the
    embedder and reranker that rank them)."""
    h = hashlib.sha256()
    for c in chunks:
        h.update(json.dumps([c.chunk_id, c.doc_id, c.text], ensure_ascii=False).encode("utf-8") + b"\n")
    return part_sha256({"chunks": h.hexdigest(), "settings": settings})


def row_stamp(scenario: Scenario, shared: Mapping[str, str]) -> Stamp:
    """The `made_by` of `scenario`'s row: its item hash and the run's `shared` parts."""
    unknown = set(shared) - set(PARTS) - {"item"}
    if unknown or "item" in shared:
        raise ValueError(
            f"row stamp parts are {', '.join(PARTS[1:])} (the item's is added here), not "
            f"{', '.join(sorted(unknown | ({'item'} & set(shared))))}"
        )
    return tuple(sorted({"item": item_sha256(scenario), **shared}.items()))


def expected_stamps(scenarios: Sequence[Any], shared: Mapping[str, str]) -> dict[str, Stamp]:
    """qid -> the `made_by` each item's row must carry to be reused."""
    return {s.qid: row_stamp(s, shared) for s in scenarios}


def changed_part(old: Stamp, new: Stamp) -> str | None:
    """None when the stamps match; else the first part (in PARTS order) that differs, or
    "no stamp" for a row written before rows were stamped."""
    if not old:
        return "no stamp"
    a, b = dict(old), dict(new)
    if a == b:
        return None
    return next((p for p in PARTS if a.get(p) != b.get(p)), "stamp")


def shared_parts(stamp: Stamp) -> Stamp:
    """A row's stamp without its item part: what every row of one run has in common."""
    return tuple((k, v) for k, v in stamp if k != "item")


def describe(reasons: Counter) -> str:
    """`item 1, index 2` (why rows were recomputed, in PARTS order)."""
    order = {p: i for i, p in enumerate(PARTS)}
    return ", ".join(f"{k} {n}" for k, n in sorted(reasons.items(), key=lambda kv: order.get(kv[0], len(order))))
