"""One writer per run or eval folder: a lock file, `.lorarag.lock`, held while the command runs.

`hold(folder, what)` takes an exclusive `fcntl.flock` on `folder/.lorarag.lock` without waiting and
writes who holds it (pid, host, command) into the file. A second writer, in another process, gets a
one-line `FolderLocked` naming that holder instead of writing every item a second time beside the
first. The kernel drops a flock when its process ends, however it ends, so the file a killed
process left behind is simply taken over by the next writer. The same process may hold a folder
again (nested steps): each `hold` is matched by a `release`, and the file is removed when the last
one lets go, or when the process exits (a command that ends, or fails, never releases by hand).
"""

from __future__ import annotations

import atexit
import errno
import fcntl
import json
import logging
import os
import platform
import shlex
import sys
from pathlib import Path

from lorarag.core.errors import UserError

log = logging.getLogger(__name__)

LOCK_FILE = ".lorarag.lock"


class FolderLocked(UserError):
    """Another live process is writing the folder."""


_held: dict[Path, list] = {}  # resolved folder -> [descriptor of its locked file, holds, folder made by hold]


def holder(path: Path) -> str:
    """Who the lock file at `path` says holds it: `pid 123 on host-a (lorarag eval x.yaml)`."""
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
        cmd = " ".join(shlex.quote(str(c)) for c in info["command"])
        return f"pid {int(info['pid'])} on {info['host']} ({cmd})"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process (it has not said which yet)"


def _lock(path: Path) -> int | None:
    """A descriptor of `path` locked by us, or None when another process holds it. A file removed
    (by its last holder, at exit) between our open and our lock is opened again."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except OSError:
            os.close(fd)
            raise
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)


def hold(folder: str | Path, what: str = "folder") -> Path:
    """Make this process the one writer of `folder` (created if missing) until it exits; a
    `FolderLocked` naming the holder when another live process writes it."""
    folder = Path(folder)
    key = folder.resolve()
    if key in _held:
        _held[key][1] += 1
        return folder
    made = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    path = key / LOCK_FILE
    try:
        fd = _lock(path)
    except OSError as exc:
        if exc.errno in (errno.ENOLCK, errno.EOPNOTSUPP):  # a file system without flock (some NFS)
            log.warning("%s: cannot lock (%s): nothing stops a second writer", folder, exc.strerror)
            return folder
        raise
    if fd is None:
        raise FolderLocked(
            f"{folder}: this {what} is being written by {holder(path)}; wait for it to "
            "finish or stop it (a lock left by a process that died is taken over)"
        )
    info = json.dumps({"pid": os.getpid(), "host": platform.node(), "command": sys.argv}).encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, info, 0)
    _held[key] = [fd, 1, made]
    return folder


def release(folder: str | Path, *, every: bool = False) -> None:
    """Undo one `hold` of `folder` (all of them with `every`); the last removes its lock file (and
    the folder, when `hold` made it and nothing else was written there) and lets go. Nothing when
    this process does not hold it."""
    key = Path(folder).resolve()
    entry = _held.get(key)
    if entry is None:
        return
    entry[1] -= 1
    if entry[1] > 0 and not every:
        return
    fd, _, made = _held.pop(key)
    try:
        (key / LOCK_FILE).unlink(missing_ok=True)  # while still locked: a waiter re-opens (see _lock)
        if made and not any(key.iterdir()):
            key.rmdir()
    except OSError as exc:  # a folder gone read-only or removed meanwhile: the lock still ends below
        log.debug("%s: lock file left (%s)", key, exc)
    os.close(fd)


@atexit.register
def release_all() -> None:
    """Let go of every folder this process holds (at exit; `lorarag`'s entry point when a command ends)."""
    for key in list(_held):
        release(key, every=True)
