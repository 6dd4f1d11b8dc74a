"""File hashes, written once: what names a file by its content (manifests, run records, the test
ledger, a corpus's documents, model weights)."""

from __future__ import annotations

import hashlib
from pathlib import Path

_CACHE: dict[tuple[str, int, int], str] = {}  # (resolved path, size, mtime_ns) -> sha256


def sha256_file(path: str | Path) -> str:
    """sha256 (hex) of a file's bytes, read in 1 MiB blocks; OSError when it cannot be read."""
    h = hashlib.sha256()
    with Path(path).open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def file_sha256(path: str | Path) -> str:
    """`sha256_file`, remembered per process by path + size + mtime: for large files read often in one
    process (model weights); a user's files that may change under it are hashed with `sha256_file`."""
    path = Path(path).resolve()
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _CACHE:
        _CACHE[key] = sha256_file(path)
    return _CACHE[key]
