"""The one gate every input file passes before it is read.

A path a loader reads must be a regular file of at most `MAX_INPUT_BYTES`: a directory would be a
traceback deep in a reader, a FIFO blocks the read forever, and a character device (/dev/zero)
is read until memory runs out. `os.stat` tells them apart without opening anything, so the
refusal comes before any read, as one RecordError naming the path and what it is.

The same gate bounds every other read of a user's file, each with the cap of what it holds: one
corpus document (`MAX_DOCUMENT_BYTES`, and a .docx's members once unpacked: `check_zip_size`), a
config file (`MAX_CONFIG_BYTES`). JSON parsed from a user's file nests at most as deep as Python's
parser recurses: deeper is a RecordError too (`loads_json`), not a RecursionError.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from lorarag.core.errors import RecordError

MAX_INPUT_BYTES = 2 * 1024**3  # 2 GiB: far above any QA set or corpus file, far below a runaway read
# One document of a folder corpus is read whole, decoded and copied a few times: 256 MiB is far above
# any real document (a 1,000-page book is a few MiB of text) and keeps a read within a few GiB.
MAX_DOCUMENT_BYTES = 256 * 1024**2
MAX_CONFIG_BYTES = 1024**2  # 1 MiB of YAML: a hundred times the largest config

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def size_text(n: int) -> str:
    """`n` bytes for a message: in GiB from 1 GiB up, else in MiB."""
    return f"{n / 1024**3:.1f} GiB" if n >= 1024**3 else f"{n / 1024**2:.1f} MiB"


def _stat(path: Path, what: str) -> os.stat_result:
    try:
        return os.stat(path)
    except FileNotFoundError:
        raise RecordError(f"{path}: {what} not found") from None
    except OSError as exc:
        raise RecordError(f"{path}: {what}: cannot stat ({exc.strerror or type(exc).__name__})") from None


def check_input_file(path: str | Path, what: str, *, max_bytes: int | None = None) -> Path:
    """`path` when it is a regular file of at most `max_bytes` (default `MAX_INPUT_BYTES`); else a
    one-line RecordError naming the path, what it is (directory, FIFO, device...) and `what` the
    loader expected."""
    p = Path(path)
    max_bytes = MAX_INPUT_BYTES if max_bytes is None else max_bytes
    st = _stat(p, what)
    if not stat.S_ISREG(st.st_mode):
        kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")
        raise RecordError(f"{p}: {what} is {kind}, not a regular file")
    if st.st_size > max_bytes:
        raise RecordError(f"{p}: {what} is {size_text(st.st_size)}, over the {size_text(max_bytes)} input limit")
    return p


def check_input_dir(path: str | Path, what: str) -> Path:
    """`path` when it is a directory; else a one-line RecordError naming it and what it is."""
    p = Path(path)
    if not stat.S_ISDIR(_stat(p, what).st_mode):
        raise RecordError(f"{p}: {what} must be a directory")
    return p


def read_input_bytes(path: str | Path, what: str, *, max_bytes: int | None = None) -> bytes:
    """The bytes of a checked input file (see `check_input_file`)."""
    p = check_input_file(path, what, max_bytes=max_bytes)
    try:
        return p.read_bytes()
    except OSError as exc:
        raise RecordError(f"{p}: cannot read {what} ({exc.strerror or type(exc).__name__})") from None


def read_input_text(path: str | Path, what: str, *, max_bytes: int | None = None) -> str:
    """A checked input file decoded as UTF-8 (a leading BOM dropped); a byte that is not UTF-8 is
    a RecordError with file:line and the byte's offset."""
    raw = read_input_bytes(path, what, max_bytes=max_bytes)
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise RecordError(f"{path}:{line}: not UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start})") from None


def check_zip_size(path: str | Path, what: str, *, max_bytes: int | None = None) -> Path:
    """`path` when it is a zip archive (a .docx) whose members unpack to at most `max_bytes` in all
    (default `MAX_DOCUMENT_BYTES`), read from its directory (`infolist`) before anything is unpacked:
    a zip bomb of a few MiB would otherwise unpack to GiBs in the parser (and Python's zipfile never
    unpacks a member past the size listed there). A file that is not a zip passes (its reader says
    what is wrong with it)."""
    import zipfile

    max_bytes = MAX_DOCUMENT_BYTES if max_bytes is None else max_bytes
    p = check_input_file(path, what, max_bytes=max_bytes)
    try:
        with zipfile.ZipFile(p) as zf:
            total = sum(i.file_size for i in zf.infolist())
    except (zipfile.BadZipFile, OSError, EOFError):
        return p
    if total > max_bytes:
        raise RecordError(
            f"{p}: {what} unpacks to {size_text(total)}, over the {size_text(max_bytes)} input limit (a zip bomb?)"
        )
    return p


def loads_json(text: str | bytes, where: str) -> object:
    """`json.loads(text)`, with JSON nested deeper than Python's parser recurses a RecordError at
    `where` instead of a RecursionError (a syntax error stays `json.JSONDecodeError`: the caller
    words it with its line)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise RecordError(f"{where}: JSON nested too deeply (more levels than the reader allows)") from None
