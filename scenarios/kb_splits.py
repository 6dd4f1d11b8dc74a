"""Seeded splits of a labelled QA set by fact: what the LoRA learns, and what it never sees.

A fact is a group of items that share an answer-bearing chunk or a `cluster` (union of items by
relevant chunk id and by cluster: the demo world's organisations, a set's articles), so no chunk
that answers a held-out question is ever shown in training, not even as a distractor, and a
cluster's questions are learned or held out together. Facts are shuffled by `splits.seed` (within
each language with `splits.stratify_languages`) and cut into
- `known` (test) and `known_dev` (the gate's dev split): both taught closed-book, in every wording
  the set offers (a known item less the one its test asks, where it has one to spare:
  scenarios/kb_wordings.py), and with conflict-aware rows;
- `context_only`: seen in training only with a source to copy (memory "unknown");
- `unseen_dev` (the gate's dev split) and `unseen` (test): never in training.
Items with neither answers nor `unanswerable` (BEIR queries without answers) cannot be taught or
scored: they are set aside as `retrieval_only`. Each split is saved as JSONL (QAItem records).
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path

from lorarag.core.errors import RecordError
from lorarag.rag.records import write_jsonl
from lorarag.scenarios.config import SplitConfig
from lorarag.scenarios.kb_records import QAItem

GROUPS = ("known", "known_dev", "context_only", "unseen_dev", "unseen")
TAUGHT = ("known", "known_dev")  # closed-book rows and conflict-aware rows with a memory
TRAIN_VISIBLE = (*TAUGHT, "context_only")  # may appear in training rows at all
HELD_OUT = ("unseen_dev", "unseen")  # never in training, not even as a distractor
RETRIEVAL_ONLY = "retrieval_only"


def facts(items: Sequence[QAItem]) -> list[list[QAItem]]:
    """Items grouped into facts: connected by shared relevant chunk ids or cluster; in first-seen order."""
    parent = list(range(len(items)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[str, int] = {}
    for i, it in enumerate(items):
        for cid in (*it.relevant_ids, *((f"cluster:{it.cluster}",) if it.cluster else ())):
            if cid in owner:
                parent[root(i)] = root(owner[cid])
            else:
                owner[cid] = i
    groups: dict[int, list[QAItem]] = {}
    for i, it in enumerate(items):
        groups.setdefault(root(i), []).append(it)
    return list(groups.values())


def _cut(n: int, fraction: float, keep: int = 1) -> int:
    """round(n * fraction), at least 1 and leaving at least `keep` of the n."""
    return min(max(1, round(n * fraction)), n - keep)


def split_by_fact(items: Sequence[QAItem], cfg: SplitConfig) -> dict[str, list[QAItem]]:
    """{group: items} for every group of GROUPS (and `retrieval_only`), deterministic by `cfg.seed`."""
    usable = [it for it in items if it.answers or it.unanswerable]
    groups = sorted(facts(usable), key=lambda g: min(it.qid for it in g))
    random.Random(f"{cfg.seed}/kb-splits").shuffle(groups)
    if cfg.stratify_languages:  # each language cut in the same fractions, then the parts joined
        langs = sorted({g[0].language for g in groups})
        parts = [_split([g for g in groups if g[0].language == lang], cfg, check=False) for lang in langs]
        out = {k: sorted((it for p in parts for it in p[k]), key=lambda it: it.qid) for k in GROUPS}
        out[RETRIEVAL_ONLY] = [it for it in items if not (it.answers or it.unanswerable)]
        _check_dev(out, cfg, sum(any(it.answers for it in g) for g in groups), len(groups))
        return out
    out = _split(groups, cfg)
    out[RETRIEVAL_ONLY] = [it for it in items if not (it.answers or it.unanswerable)]
    return out


def _split(groups: list[list[QAItem]], cfg: SplitConfig, check: bool = True) -> dict[str, list[QAItem]]:
    n = len(groups)
    # unanswerable questions are facts of the split but teach and calibrate nothing: only facts with
    # an answer count towards the 5 the known, context-only, dev and test parts need
    answered = sum(any(it.answers for it in g) for g in groups)
    if answered < 5:
        raise RecordError(
            f"{answered} fact(s) with answers: too few to split into known, context-only and "
            "never-learned facts with dev and test parts (at least 5; unanswerable questions "
            "do not count)"
        )
    n_known = _cut(n, cfg.known_fraction, keep=3)
    n_ctx = min(round(n * cfg.context_only_fraction), n - n_known - 2)
    known, ctx, unseen = groups[:n_known], groups[n_known : n_known + n_ctx], groups[n_known + n_ctx :]
    k_dev, u_dev = (_cut(len(g), cfg.dev_fraction) if len(g) > 1 else 0 for g in (known, unseen))
    cut = {
        "known_dev": known[:k_dev],
        "known": known[k_dev:],
        "context_only": ctx,
        "unseen_dev": unseen[:u_dev],
        "unseen": unseen[u_dev:],
    }
    out = {g: sorted((it for fact in cut[g] for it in fact), key=lambda it: it.qid) for g in GROUPS}
    if check:
        _check_dev(out, cfg, answered, n)
    return out


def _check_dev(out: dict[str, list[QAItem]], cfg: SplitConfig, answered: int, n: int) -> None:
    empty = [g for g in ("known_dev", "unseen_dev") if not any(it.answers for it in out[g])]
    if empty:  # the gate is calibrated on answered dev questions of both kinds
        raise RecordError(
            f"splits.seed {cfg.seed}: the gate's dev part(s) {' and '.join(empty)} hold no question "
            f"with an answer ({answered} answered facts among {n}); add answered facts or change the seed"
        )


def save_splits(groups: dict[str, list[QAItem]], folder: str | Path, seed: int) -> list[Path]:
    """`<folder>/<group>.jsonl` for every group and `split.json` (counts and seed); the paths."""
    folder = Path(folder)
    paths = []
    for g, items in groups.items():
        write_jsonl(folder / f"{g}.jsonl", items)
        paths.append(folder / f"{g}.jsonl")
    summary = {
        "seed": seed,
        "items": {g: len(v) for g, v in groups.items()},
        "facts": {g: len(facts(v)) for g, v in groups.items()},
    }
    (folder / "split.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    return [*paths, folder / "split.json"]
