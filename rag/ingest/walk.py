"""Which files a corpus is: the walk under `corpus.paths`, before anything is opened.

Only regular files are ever read. Everything else the walk meets is an `Entry` with a reason,
listed in the ingest report: FIFOs, sockets and devices (opening a FIFO blocks for ever), folders
that cannot be listed, dangling links, and symlinks that resolve outside every corpus path (a
link to /etc/passwd is not part of a corpus) unless `corpus.follow_symlinks_outside` is true, files
over the one-document cap (core/inputs.py `MAX_DOCUMENT_BYTES`: refused by size, never read), and
names that are not UTF-8 (a latin-1 byte: no id could be written or printed; the entry's id shows
the byte escaped, e.g. `caf\xe9.md`).
A symlinked folder inside the corpus is not followed (its files are read where they are), so no
file is read twice under two ids. Hidden files and folders (a leading dot) are skipped silently.
Entries come in sorted path order, the same on every machine.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from lorarag.core import inputs
from lorarag.rag.config import CorpusConfig

_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


@dataclass(frozen=True)
class Entry:
    """One thing the walk found: a regular file to read (`reason` None) or one left out, and why."""

    path: Path  # as found under the corpus path (a link is not replaced by its target)
    doc_id: str  # relative to the corpus path, POSIX separators ("sub/" for a folder)
    reason: str | None = None


def _list_dir(folder: Path) -> list[os.DirEntry]:
    with os.scandir(folder) as it:
        return sorted(it, key=lambda e: e.name)


def _special(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _bad_name(rel: str) -> str | None:
    """The reason a relative path cannot be a document id (not UTF-8), else None."""
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        return "name is not UTF-8 (rename it): never opened"
    return None


def _printable(rel: str) -> str:
    """`rel` with the bytes of a non-UTF-8 name escaped (`caf\\xe9.md`), safe to print and write."""
    return os.fsencode(rel).decode("utf-8", "backslashreplace")


def _too_big(size: int) -> str | None:
    cap = inputs.MAX_DOCUMENT_BYTES
    if size <= cap:
        return None
    return f"{inputs.size_text(size)}, over the {inputs.size_text(cap)} limit for one corpus file: never opened"


def _inside(target: Path, roots: list[Path]) -> bool:
    return any(target == r or r in target.parents for r in roots)


def walk_root(root: Path, roots: list[Path], follow_outside: bool = False) -> list[Entry]:
    """The entries under one corpus path (`roots`: every corpus path, resolved)."""
    base = root if root.is_dir() else root.parent
    out: list[Entry] = []
    seen = {root.resolve()}

    def rel(p: Path) -> str:
        return _printable(p.relative_to(base).as_posix())

    def one(p: Path) -> None:
        bad = _bad_name(p.relative_to(base).as_posix())
        if bad is not None:
            out.append(Entry(p, rel(p), bad))
            return
        if p.is_symlink():
            target = p.resolve()
            if not target.exists():
                out.append(Entry(p, rel(p), "unreadable (dangling link)"))
                return
            inside = _inside(target, roots)
            if not inside and not follow_outside:
                out.append(
                    Entry(
                        p,
                        rel(p),
                        f"symlink to {target}, outside the corpus paths (set "
                        "corpus.follow_symlinks_outside: true to index it)",
                    )
                )
                return
            if target.is_dir():
                if inside or target in seen:
                    out.append(
                        Entry(p, rel(p) + "/", "symlinked folder not followed (inside the corpus, or already walked)")
                    )
                    return
                seen.add(target)
        try:
            st = p.stat()
        except OSError as exc:
            out.append(Entry(p, rel(p), f"unreadable ({exc.strerror or type(exc).__name__})"))
            return
        mode = st.st_mode
        if stat.S_ISDIR(mode):
            visit(p)
        elif stat.S_ISREG(mode):
            out.append(Entry(p, rel(p), _too_big(st.st_size)))
        else:
            out.append(Entry(p, rel(p), f"not a regular file ({_special(mode)}): never opened"))

    def visit(folder: Path) -> None:
        try:
            entries = _list_dir(folder)
        except OSError as exc:
            label = rel(folder) + "/" if folder != base else "./"
            why = exc.strerror or type(exc).__name__
            out.append(Entry(folder, label, f"unreadable folder ({why}): its files are left out"))
            return
        for e in entries:
            if not e.name.startswith("."):
                one(Path(e.path))

    if root.is_dir():  # a corpus path that is itself a link to a folder is the user's choice
        visit(root)
    else:
        name = _printable(root.name)
        try:
            st = root.stat()
        except OSError as exc:
            return [Entry(root, name, f"unreadable ({exc.strerror or type(exc).__name__})")]
        reason = _bad_name(root.name) or (
            _too_big(st.st_size)
            if stat.S_ISREG(st.st_mode)
            else f"not a regular file ({_special(st.st_mode)}): never opened"
        )
        return [Entry(root, name, reason)]
    return sorted(out, key=lambda e: e.path)


def walk_corpus(cfg: CorpusConfig) -> list[tuple[str, list[Entry]]]:
    """(corpus path, its entries) for every path of `cfg` (missing paths are the caller's check)."""
    roots = [Path(p).resolve() for p in cfg.paths]
    return [(p, walk_root(Path(p), roots, cfg.follow_symlinks_outside)) for p in cfg.paths]
