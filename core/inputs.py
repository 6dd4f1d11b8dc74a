"""The one gate every input file passes before it is read.

A path a loader reads must be a regular file of at most `MAX_INPUT_BYTES`: a directory would be a
traceback deep in a reader, a FIFO blocks the read forever, and a character device (/dev/zero)
is read until memory runs out. `os.stat` tells them apart without opening anything, so the
refusal comes before any read, as one RecordError naming the path and what it is.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from lorarag.core.errors import RecordError

MAX_INPUT_BYTES = 2 * 1024**3  # 2 GiB: far above any QA set or corpus file, far below a runaway read

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _gib(n: int) -> str:
    return f"{n / 1024**3:.1f} GiB"


def _stat(path: Path, what: str) -> os.stat_result:
    try:
        return os.stat(path)
    except FileNotFoundError:
        raise RecordError(f"{path}: {what} not found") from None
    except OSError as exc:
        raise RecordError(f"{path}: {what}: cannot stat ({exc.strerror or type(exc).__name__})") from None


def check_input_file(path: str | Path, what: str, *, max_bytes: int = MAX_INPUT_BYTES) -> Path:
    """`path` when it is a regular file of at most `max_bytes`; else a one-line RecordError naming
    the path, what it is (directory, FIFO, device...) and `what` the loader expected."""
    p = Path(path)
    st = _stat(p, what)
    if not stat.S_ISREG(st.st_mode):
        kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")
        raise RecordError(f"{p}: {what} is {kind}, not a regular file")
    if st.st_size > max_bytes:
        raise RecordError(f"{p}: {what} is {_gib(st.st_size)}, over the {_gib(max_bytes)} input limit")
    return p


def check_input_dir(path: str | Path, what: str) -> Path:
    """`path` when it is a directory; else a one-line RecordError naming it and what it is."""
    p = Path(path)
    if not stat.S_ISDIR(_stat(p, what).st_mode):
        raise RecordError(f"{p}: {what} must be a directory")
    return p


def read_input_bytes(path: str | Path, what: str) -> bytes:
    """The bytes of a checked input file (see `check_input_file`)."""
    p = check_input_file(path, what)
    try:
        return p.read_bytes()
    except OSError as exc:
        raise RecordError(f"{p}: cannot read {what} ({exc.strerror or type(exc).__name__})") from None


def read_input_text(path: str | Path, what: str) -> str:
    """A checked input file decoded as UTF-8 (a leading BOM dropped); a byte that is not UTF-8 is
    a RecordError with file:line and the byte's offset."""
    raw = read_input_bytes(path, what)
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise RecordError(f"{path}:{line}: not UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start})") from None
