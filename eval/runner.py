"""Run one system over a scenario set, writing ItemResults incrementally and resuming after a crash.

`results.jsonl` in the run directory is append-only: each batch's rows are written in one
write, flushed and fsync'ed. On start, rows already there are read back (a torn last line from a
SIGKILL is cut off the file first), their qids are skipped, and the rest is answered — so a run
killed at any point and restarted ends with every qid exactly once. With `made_by` (the hashes of
the index, prompt settings and model: eval/stamps.py) every row records what produced it, and a
resume keeps exactly the rows whose stamp matches what the item would get now; the others (an
edited item, another index, prompt or model, an older row without a stamp) are answered again.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pydantic import BaseModel

from lorarag.core import outputs
from lorarag.core.errors import RecordError, UserError
from lorarag.core.runinfo import git_sha, start_run
from lorarag.eval import stamps
from lorarag.eval.records import RESULTS_FILE, ItemResult, item_result, load_results, lookup_closed_book, results_path
from lorarag.rag.records import Answer, to_dict

if TYPE_CHECKING:
    from lorarag.scenarios.records import Scenario

log = logging.getLogger(__name__)


@runtime_checkable
class ScenarioSystem(Protocol):
    """Anything evaluable: a name and a batch method answering scenarios in order (the systems
    of eval/systems.py, or any object with these two members)."""

    name: str

    def answer_scenarios(self, items: list[Scenario]) -> list[Answer]:
        """One Answer per scenario, same order."""
        ...


def _cut_torn_tail(path: Path) -> int:
    """Truncate `path` after its last newline (a SIGKILL can leave half a line); bytes cut."""
    if not path.exists():
        return 0
    size = path.stat().st_size
    if size == 0:
        return 0
    with path.open("rb+") as fh:
        # Read back from the end until a newline is found (lines are short; 64 KiB steps).
        pos, tail = size, b""
        while pos > 0:
            step = min(65536, pos)
            pos -= step
            fh.seek(pos)
            tail = fh.read(step) + tail
            nl = tail.rfind(b"\n")
            if nl >= 0:
                keep = pos + nl + 1
                break
        else:
            keep = 0
        if keep < size:
            fh.truncate(keep)
            fh.flush()
            os.fsync(fh.fileno())
            log.warning("%s: cut a torn last line (%d bytes) left by an interrupted write", path, size - keep)
        return size - keep


def _append_batch(path: Path, rows: Sequence[ItemResult]) -> None:
    """Append rows in one write, then flush and fsync (durable before the next batch starts)."""
    data = "".join(json.dumps(to_dict(r), ensure_ascii=False) + "\n" for r in rows)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def _rewrite(path: Path, rows: Sequence[ItemResult]) -> None:
    """Replace `path` with `rows` through a temporary sibling (the rows dropped are never half gone)."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        fh.write("".join(json.dumps(to_dict(r), ensure_ascii=False) + "\n" for r in rows))
        fh.flush()
        os.fsync(fh.fileno())
    tmp.replace(path)


def _keep_matching(done: list[ItemResult], want: Mapping[str, stamps.Stamp], path: Path) -> tuple[list[ItemResult], Counter]:
    """The rows whose stamp is the one their item gets now, and why the others go (by part); the
    file is rewritten without those others, so they are answered again."""
    keep, why = [], Counter()
    for r in done:
        part = stamps.changed_part(r.made_by, want[r.qid])
        if part is None:
            keep.append(r)
        else:
            why[part] += 1
    if why:
        _rewrite(path, keep)
    return keep, why


def _check_existing(done: list[ItemResult], wanted: set[str], path: Path) -> None:
    stray = sorted({r.qid for r in done} - wanted)
    if stray:
        raise RecordError(
            f"{path}: {len(stray)} result(s) for qids not in this scenario set (e.g. {stray[0]}); use another out_dir"
        )


STAMP_FILE = "stamp.json"
# What a run directory holds that the runner wrote: cleared together when a run starts over.
RUN_FILES = (RESULTS_FILE, "resumes.jsonl", "run.json", "config.yaml", STAMP_FILE)


class ResumeMismatch(UserError):
    """A run directory whose results were made with another config than the one resuming."""


def plain_stamp(value: Any) -> Any:
    """A stamp as JSON gives it back (tuples -> lists), so a stamp read from disk compares equal."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


_plain = plain_stamp


def stamp_differences(old: Any, new: Any, prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two stamps (`generator.max_new_tokens`)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for k in sorted(set(old) | set(new), key=str):
            key = f"{prefix}.{k}" if prefix else str(k)
            if k not in old or k not in new:
                out.append(key)
            else:
                out += stamp_differences(old[k], new[k], key)
        return out
    return [] if old == new else [prefix or "(stamp)"]


def clear_run_dir(out: str | Path) -> list[str]:
    """Remove the runner's own files from a run directory (nothing else); the names removed."""
    out = Path(out)
    removed = [n for n in RUN_FILES if (out / n).is_file()]
    for name in removed:
        (out / name).unlink()
    return removed


def claim_run_dir(out: Path, stamp: Mapping[str, Any], *, on_change: str = "refuse") -> bool:
    """Make `out` hold results of `stamp` only (the one check every resumable eval goes through).

    A directory with results (or a run manifest) and another stamp, or none, is either refused
    (`on_change="refuse"`: ResumeMismatch naming the differing keys) or cleared of the runner's own
    files (`"restart"`: nothing else in it is touched). Returns True when earlier results were cleared.
    """
    if on_change not in ("refuse", "restart"):
        raise ValueError(f"on_change must be refuse or restart, not {on_change!r}")
    stamp = _plain(dict(stamp))
    marker = out / STAMP_FILE
    started = results_path(out).exists() or (out / "run.json").exists()
    old = None
    if marker.exists():
        try:
            old = json.loads(marker.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            old = "unreadable"
    if (
        marker.exists()
        and not started
        and old != stamp
        and not (outputs.is_ours(marker) or (isinstance(old, dict) and set(old) == set(stamp)))
    ):
        raise outputs.OutputError(
            f"{marker}: exists and was not written by lorarag (or was edited since); refusing "
            "to overwrite it: give another out_dir"
        )
    cleared = False
    if started and old != stamp:
        keys = (
            stamp_differences(old, stamp)
            if isinstance(old, dict)
            else [f"({'no' if old is None else 'an unreadable'} {STAMP_FILE}: results from an older version)"]
        )
        if on_change == "refuse":
            shown = ", ".join(keys[:6]) + (f" and {len(keys) - 6} more" if len(keys) > 6 else "")
            raise ResumeMismatch(
                f"{out}: holds results made with another config ({shown} differ); "
                "start over with --fresh or use another out_dir"
            )
        log.info("%s: config changed (%s): starting over", out, ", ".join(keys[:6]))
        clear_run_dir(out)
        cleared = True
    out.mkdir(parents=True, exist_ok=True)
    if old != stamp or cleared:
        tmp = marker.with_name(STAMP_FILE + ".tmp")
        tmp.write_text(json.dumps(stamp, indent=1, sort_keys=True), encoding="utf-8")
        tmp.replace(marker)
        outputs.record([marker])
    return cleared


def run_eval(
    system: ScenarioSystem,
    scenarios: Sequence,
    out_dir: str | Path,
    *,
    batch_size: int = 16,
    closed_book: Mapping[str, str] | None = None,
    config: BaseModel | None = None,
    data: Iterable[str | Path] = (),
    progress: bool = True,
    stamp: Mapping[str, Any] | None = None,
    on_change: str = "refuse",
    made_by: Mapping[str, str] | None = None,
) -> list[ItemResult]:
    """Answer every scenario not yet in `out_dir/results.jsonl`; return all results in scenario order.

    `closed_book` maps qid (or "q:" + question, see `records.closed_book_map`) to the same model's
    closed-book answer. The run manifest (`run.json`, `config.yaml`) is written on a fresh start;
    a resume appends a line to `resumes.jsonl` instead. `stamp`: what the results depend on
    (model, generation settings, items...); results of another stamp are never resumed onto
    (`claim_run_dir`: refused, or cleared with `on_change="restart"`). `made_by`: the parts of each
    row's stamp shared by every item (index, prompt, model: eval/stamps.py); rows are then reused
    only where their stamp matches (module docstring) and the resume says how many were recomputed.
    """
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    if not isinstance(system, ScenarioSystem):
        raise TypeError(f"{type(system).__name__} is not a ScenarioSystem (needs name and answer_scenarios)")
    qids = [s.qid for s in scenarios]
    if len(set(qids)) != len(qids):
        dup = next(q for q in qids if qids.count(q) > 1)
        raise RecordError(f"scenario set has duplicate qid {dup!r}")
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ResumeMismatch(f"{out}: is a file, not a run directory")
    if stamp is not None:
        claim_run_dir(out, stamp, on_change=on_change)
    out.mkdir(parents=True, exist_ok=True)
    path = results_path(out)
    path.touch()  # even with no items (an empty shard): the results exist, under their stamp
    _cut_torn_tail(path)
    done = load_results(path, system=system.name) if path.exists() else []
    _check_existing(done, set(qids), path)
    want = stamps.expected_stamps(scenarios, made_by) if made_by is not None else None
    why: Counter = Counter()
    if want is not None and done:
        done, why = _keep_matching(done, want, path)

    if done or why or (out / "run.json").exists():
        with (out / "resumes.jsonl").open("a", encoding="utf-8") as fh:
            fh.write(
                json.dumps(
                    {
                        "resumed": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                        "git_sha": git_sha(),
                        "already_done": len(done),
                        "recomputed": dict(why),
                    }
                )
                + "\n"
            )
        log.info("%s", resume_message(path, len(done), len(qids), why))
    else:
        start_run(out, config, data=data)
    finished = {r.qid for r in done}
    todo = [s for s in scenarios if s.qid not in finished]
    by_qid = {r.qid: r for r in done}
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(qids), initial=len(done), desc=f"eval {system.name}", unit="item")
    try:
        for start in range(0, len(todo), batch_size):
            batch = todo[start : start + batch_size]
            t0 = time.perf_counter()
            answers = system.answer_scenarios(list(batch))
            wall = (time.perf_counter() - t0) / len(batch)
            if len(answers) != len(batch):
                raise RuntimeError(f"{system.name}: answered {len(answers)} of {len(batch)} scenarios")
            rows = [
                item_result(
                    system.name,
                    s,
                    a,
                    lookup_closed_book(closed_book, s.qid, s.question),
                    latency_s=None if (a.trace and a.trace.timings_s) else wall,
                    made_by=want[s.qid] if want is not None else (),
                )
                for s, a in zip(batch, answers)
            ]
            _append_batch(path, rows)
            by_qid.update((r.qid, r) for r in rows)
            if bar is not None:
                bar.update(len(rows))
    finally:
        if bar is not None:
            bar.close()
    return [by_qid[q] for q in qids]


def resume_message(path: Path, reused: int, total: int, why: Counter) -> str:
    """`…: resuming: 12 of 15 items reused, 3 recomputed (their item, index, prompt or model changed:
    item 1, index 2)`; rows never answered before are counted as still to do."""
    redo = sum(why.values())
    text = f"{path}: resuming: {reused} of {total} items reused"
    if redo:
        text += f", {redo} recomputed (their item, index, prompt or model changed: {stamps.describe(why)})"
    rest = total - reused - redo
    return text + (f", {rest} not done yet" if rest else "")


def write_results(
    items: Sequence[ItemResult], out_dir: str | Path, *, stamp: Mapping[str, Any], config: BaseModel | None = None
) -> list[ItemResult]:
    """Results made without a model call (eval.reroute), written whole under `stamp` with the run
    manifest; a folder holding them under the same stamp (and each row made by what made its
    counterpart in `items`) is read back, one under another is cleared."""
    out = Path(out_dir)
    claim_run_dir(out, stamp, on_change="restart")
    path = results_path(out)
    _cut_torn_tail(path)
    wanted = [r.qid for r in items]
    if path.exists() and path.stat().st_size:
        done = {r.qid: r for r in load_results(path)}
        if set(done) == set(wanted) and all(done[r.qid].made_by == r.made_by for r in items):
            return [done[q] for q in wanted]
        path.unlink()  # one write makes them all: anything else there is a torn earlier write
    start_run(out, config)
    _append_batch(path, items)
    return list(items)
