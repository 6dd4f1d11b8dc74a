"""The index folder as a thing we own: recognised by its manifest, replaced atomically, never
anything else.

`index.dir` may name a folder of the user's own files, the corpus itself, or a file. Before any
build replaces it, `check_replaceable` accepts only: nothing there yet, an empty folder, or a
folder holding our manifest (a previous index); anything else is a one-line `IndexDirError` and
nothing is touched. A build writes into a hidden sibling `.NAME.building-PID` and swaps it in
(the previous index goes to `.NAME.old-PID` for the moment of the swap). A build killed with
SIGKILL leaves those behind: the next build of the same index removes them, but only folders
with exactly that name, of a process that is no longer running, holding nothing but the files an
index build writes.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from pathlib import Path

from lorarag.core.errors import ConfigError

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
# Everything an index build (or `lorarag search`'s trace) writes into an index folder.
OUR_FILES = frozenset({MANIFEST, "chunks.jsonl", "ingest-report.json", "bm25", "dense.faiss", "last-retrieval.json"})
_LEFTOVER = re.compile(r"^\.(?P<name>.+)\.(?P<kind>building|old)-(?P<pid>\d+)$")


class IndexMismatch(ConfigError):
    """An index that is missing, incomplete, unreadable or built with other settings than the config's."""


class IndexDirError(ConfigError):
    """`index.dir` names something that is not an index of ours: it is never replaced."""


def is_ours(folder: Path) -> bool:
    """True when `folder` holds an index manifest (any format version) written by this project."""
    path = folder / MANIFEST
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(data, dict) and {"format_version", "corpus_hash", "n_chunks"} <= set(data)


def index_path(folder: str | Path) -> Path:
    """The folder an index is written to: `index.dir`, or where it points when it is a symlink."""
    path = Path(folder)
    return path.resolve() if path.is_symlink() else path


def check_replaceable(final: Path) -> None:
    """IndexDirError unless `final` is absent, an empty folder, or an index of ours."""
    if not final.exists() and not final.is_symlink():
        return
    if not final.is_dir():
        raise IndexDirError(
            f"index.dir {final}: is a file, not an index folder; refusing to replace it (point index.dir at a new folder)"
        )
    if is_ours(final):
        return
    try:
        empty = next(final.iterdir(), None) is None
    except OSError as exc:
        raise IndexDirError(f"index.dir {final}: cannot list it ({exc.strerror})") from None
    if not empty:
        raise IndexDirError(
            f"index.dir {final}: an existing folder that is not an index (no {MANIFEST}); "
            "refusing to replace it: point index.dir at a new or empty folder"
        )


def check_apart(final: Path, corpus_paths: list[str]) -> None:
    """IndexDirError when the index folder and a corpus path contain one another."""
    fi = final.resolve()
    for p in corpus_paths:
        rp = Path(p).resolve()
        if fi == rp or rp in fi.parents or fi in rp.parents:
            raise IndexDirError(
                f"index.dir {final} and corpus path {p} overlap: the index would be read "
                "as corpus, or replace it; keep the index outside the corpus"
            )


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return False  # our own leftovers from an earlier, failed build in this process
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_leftovers(final: Path) -> list[str]:
    """Remove the `.building-PID` / `.old-PID` folders that killed builds of `final` left; returns
    their names. Folders of a running build, or holding anything a build does not write, stay."""
    removed: list[str] = []
    try:
        siblings = list(final.parent.iterdir())
    except OSError:
        return removed
    for p in siblings:
        m = _LEFTOVER.match(p.name)
        if m is None or m["name"] != final.name or p.is_symlink() or not p.is_dir():
            continue
        if _alive(int(m["pid"])):
            log.info("%s: left alone (process %s is still running)", p, m["pid"])
            continue
        names = {c.name for c in p.iterdir()}
        if not names <= OUR_FILES:
            log.warning(
                "%s: not removed, it holds files an index build does not write: %s",
                p,
                ", ".join(sorted(names - OUR_FILES)[:3]),
            )
            continue
        shutil.rmtree(p)
        removed.append(p.name)
        log.info("removed %s, left by an interrupted build", p)
    return removed


def building_dir(final: Path) -> Path:
    """A fresh, empty hidden sibling to build the index in; IndexDirError (one line) when the
    folder above `final` cannot be created or written (read-only, a file in the way)."""
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise IndexDirError(f"index.dir {final}: cannot create its folder {final.parent} ({exc.strerror or exc})") from None
    clean_leftovers(final)
    tmp = final.with_name(f".{final.name}.building-{os.getpid()}")
    try:
        tmp.mkdir()
    except FileExistsError:
        raise IndexDirError(
            f"{tmp}: exists and holds files an index build does not write; move it away and build again"
        ) from None
    except OSError as exc:
        raise IndexDirError(
            f"index.dir {final}: cannot write in {final.parent} ({exc.strerror or exc}); "
            "point index.dir at a writable folder"
        ) from None
    return tmp


def swap_in(tmp: Path, final: Path) -> None:
    """Replace `final` (re-checked: ours, empty or absent) by the finished build `tmp`."""
    check_replaceable(final)
    old = final.with_name(f".{final.name}.old-{os.getpid()}")
    try:
        if final.exists():
            final.rename(old)
        try:
            tmp.rename(final)
        except OSError:
            if old.exists():
                old.rename(final)  # the previous index serves on
            raise
    except OSError as exc:
        raise IndexDirError(
            f"index.dir {final}: cannot put the new index in place ({exc.strerror or exc}); "
            "the previous index, if any, is left as it was"
        ) from None
    if old.exists():
        shutil.rmtree(old)
