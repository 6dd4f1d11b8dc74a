"""Sharded evaluation: a deterministic partition of the items by qid, and a merge that checks it.

`lorarag eval CONFIG --shard I/N` evaluates the items whose qid hashes to shard I (of N) into
`<out_dir>/shards/I-of-N/`, resumable as one-process evaluation is; any machine, any order. The
merge (`lorarag eval CONFIG --merge N`) refuses unless every shard is there, every item of the
set is present exactly once, no row belongs to another shard, and every shard was produced under
the same stamp (config, system, adapter, gate, items) and every row by the same index, prompt
settings and model (their `made_by`, eval/stamps.py: a base model swapped between two shards'
runs is refused), each matching the merging config's when given; it then writes `<out_dir>/results.jsonl`
in the scenario set's order — the same rows one process writes. `slurm_array` writes an sbatch
array script that runs one shard per task.

The partition hashes the qid with SHA-256 (not Python's salted `hash`), so the same item lands in
the same shard on every machine and in every run.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from lorarag.core import outputs
from lorarag.core.errors import ConfigError, UserError
from lorarag.eval import stamps
from lorarag.eval.records import ItemResult, load_results, save_results
from lorarag.eval.runner import STAMP_FILE, plain_stamp, stamp_differences  # each shard dir holds a stamp

T = TypeVar("T")


class ShardError(UserError):
    """Shards that cannot be merged: one missing, an item twice or absent, or another stamp."""


@dataclass(frozen=True)
class Shard:
    """Shard `index` of `count` (0-based index)."""

    index: int
    count: int

    @classmethod
    def parse(cls, text: str) -> Shard:
        """`I/N` with 0 <= I < N; ConfigError naming the bad value."""
        try:
            i, n = (int(x) for x in text.split("/"))
        except ValueError:
            raise ConfigError(f"--shard {text!r}: expected I/N, e.g. 0/4") from None
        if n < 1 or not 0 <= i < n:
            raise ConfigError(f"--shard {text!r}: needs 0 <= I < N")
        return cls(i, n)

    @property
    def name(self) -> str:
        return f"{self.index}-of-{self.count}"


def shard_of(qid: str, count: int) -> int:
    """The shard (0..count-1) that `qid` belongs to, the same on every machine."""
    return int.from_bytes(hashlib.sha256(qid.encode("utf-8")).digest()[:8], "big") % count


def select(items: Sequence[T], shard: Shard, qid=lambda s: s.qid) -> list[T]:
    """The items of `shard`, in their order."""
    return [s for s in items if shard_of(qid(s), shard.count) == shard.index]


def shard_dir(out_dir: str | Path, shard: Shard) -> Path:
    return Path(out_dir) / "shards" / shard.name


def write_stamp(folder: Path, stamp: dict) -> None:
    """Record what a shard's results depend on (compared by the merge)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / STAMP_FILE).write_text(json.dumps(stamp, indent=1, sort_keys=True), encoding="utf-8")


def _check_stamp(folder: Path, name: str, text: str, want: dict) -> None:
    """ShardError when a shard's stamp file is unreadable or differs from the merging config's."""
    try:
        got = json.loads(text)
    except json.JSONDecodeError:
        raise ShardError(f"shard {name}: {folder / STAMP_FILE} is unreadable: re-run `--shard {name}`") from None
    diff = stamp_differences(got, want)
    if diff:
        shown = ", ".join(diff[:6]) + (f" and {len(diff) - 6} more" if len(diff) > 6 else "")
        raise ShardError(
            f"shard {name} ({folder}) was evaluated under another config than the one merging "
            f"({shown} differ): re-run `--shard {name}` under this config"
        )


_PLURAL = {"index": "indexes", "prompt": "prompt settings", "model": "models"}


def _check_rows(
    rows: Mapping[str, ItemResult], shard_of_row: Mapping[str, str], made_by: Mapping[str, stamps.Stamp] | None
) -> None:
    """ShardError when rows were made by different models, indexes or prompt settings (a base model
    swapped between two shards' runs), or, with `made_by` (qid -> the stamp the merging config
    gives it), by another item, index, prompt or model than the merging config's."""
    first: tuple[str, stamps.Stamp] | None = None
    for qid, r in rows.items():
        name = shard_of_row[qid]
        if made_by is not None and qid in made_by:
            part = stamps.changed_part(r.made_by, made_by[qid])
            if part is not None:
                what = "no stamp (an older lorarag)" if part == "no stamp" else f"another {part}"
                raise ShardError(
                    f"shard {name}: item {qid} was evaluated with {what} than the config merging "
                    f"now: re-run `--shard {name}` under this config"
                )
        shared = stamps.shared_parts(r.made_by)
        if first is None:
            first = (name, shared)
        elif shared != first[1]:
            part = stamps.changed_part(first[1], shared) if first[1] and shared else None
            what = _PLURAL.get(part or "", "lorarag versions (one wrote no row stamps)")
            raise ShardError(
                f"shards {first[0]} and {name} were evaluated with different {what} (item {qid}): re-run one of them"
            )


def merge_shards(
    out_dir: str | Path,
    count: int,
    qids: Sequence[str],
    stamp: Mapping[str, Any] | None = None,
    made_by: Mapping[str, stamps.Stamp] | None = None,
) -> list[ItemResult]:
    """Every shard's rows, checked (module docstring), in the order of `qids`; written to
    `<out_dir>/results.jsonl` (which must not exist yet: a merge never overwrites results).
    `stamp`: the stamp of the config merging; every shard must have been run under exactly it
    (ShardError naming the shard and the differing keys), so one config's results are never
    written as another's. `made_by`: qid -> the row stamp the merging config gives that item
    (`stamps.expected_stamps`); rows made otherwise, or rows of one shard made by another model
    than another shard's, are refused (`_check_rows`)."""
    out = Path(out_dir)
    final = out / "results.jsonl"
    if final.exists():
        raise ShardError(f"{final} exists: the merge never overwrites results (move it away first)")
    if len(set(qids)) != len(qids):
        raise ShardError("the scenario set repeats a qid: shards cannot be checked against it")
    stamps: dict[str, str] = {}
    rows: dict[str, ItemResult] = {}
    where: dict[str, str] = {}
    for i in range(count):
        folder = shard_dir(out, Shard(i, count))
        if not (folder / "results.jsonl").is_file() or not (folder / STAMP_FILE).is_file():
            raise ShardError(f"shard {i}/{count} missing: no results in {folder} (run `--shard {i}/{count}`)")
        stamps[folder.name] = (folder / STAMP_FILE).read_text(encoding="utf-8")
        if stamp is not None:
            _check_stamp(folder, f"{i}/{count}", stamps[folder.name], plain_stamp(dict(stamp)))
        for r in load_results(folder):
            if shard_of(r.qid, count) != i:
                raise ShardError(f"{folder}: item {r.qid} belongs to shard {shard_of(r.qid, count)}, not {i}")
            if r.qid in rows:
                raise ShardError(f"item {r.qid} appears twice across the shards")
            rows[r.qid] = r
            where[r.qid] = f"{i}/{count}"
    if len(set(stamps.values())) > 1:
        first = next(iter(stamps))
        other = next(k for k, v in stamps.items() if v != stamps[first])
        raise ShardError(
            f"shards {first} and {other} were evaluated under different stamps "
            f"(config, system, adapter or gate differ): re-run one of them"
        )
    missing = [q for q in qids if q not in rows]
    extra = sorted(set(rows) - set(qids))
    if missing or extra:
        what = (
            f"{len(missing)} item(s) missing (first {missing[0]})"
            if missing
            else f"{len(extra)} item(s) not in the scenario set (first {extra[0]})"
        )
        raise ShardError(f"shards do not cover the scenario set: {what}")
    _check_rows(rows, where, made_by)
    merged = [rows[q] for q in qids]
    save_results(final, merged)
    kept = (
        json.dumps(plain_stamp(dict(stamp)), indent=1, sort_keys=True) if stamp is not None else next(iter(stamps.values()))
    )
    (out / STAMP_FILE).write_text(kept, encoding="utf-8")
    return merged


def slurm_array(
    config: str | Path,
    count: int,
    out: str | Path,
    *,
    partition: str | None = None,
    gpus_per_task: int = 1,
    time_limit: str = "24:00:00",
    python: str = "python",
    force: bool = False,
) -> Path:
    """An sbatch script running `lorarag eval CONFIG --shard $SLURM_ARRAY_TASK_ID/N`, one shard per
    task, then (a dependent job is the user's call) `lorarag eval CONFIG --merge N`. An existing
    `out` is replaced only when lorarag wrote it (core/outputs.py) or with `force`; CONFIG never."""
    if count < 1:
        raise ConfigError("--shards must be >= 1")
    out = Path(out)
    if out.exists() and out.is_dir():
        raise ConfigError(f"{out}: is a folder; name the sbatch file to write")
    lines = [
        "#!/bin/bash",
        "#SBATCH --job-name=lorarag-eval",
        f"#SBATCH --array=0-{count - 1}",
        f"#SBATCH --gpus-per-task={gpus_per_task}",
        f"#SBATCH --time={time_limit}",
        "#SBATCH --output=lorarag-eval-%A_%a.out",
    ]
    if partition:
        lines.append(f"#SBATCH --partition={partition}")
    cfg = shlex.quote(str(config))
    lines += [
        "set -euo pipefail",
        f'{python} -m lorarag.cli eval {cfg} --shard "$SLURM_ARRAY_TASK_ID/{count}"',
        f"# when every task has finished: {python} -m lorarag.cli eval {cfg} --merge {count}",
    ]
    return outputs.write_text(out, "\n".join(lines) + "\n", force=force, inputs=[config])
