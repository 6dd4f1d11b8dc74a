"""Output files as things we own: a command replaces only what it wrote itself, unchanged since.

Every CLI writer (`--slurm` scripts, `report`/`compare --out`, `import-conflicts --out`) calls
`claim` with every path it is about to write before writing any of them, then `record` after. A
folder that holds our outputs keeps a small manifest, `.lorarag-outputs.json`
(`{"format": 1, "files": {name: sha256 hex of the bytes we wrote}}`), so a file is ours exactly
when its current bytes hash to what we recorded: a file the user wrote, or edited after us, is
refused with a one-line `OutputError` naming it and `--force`. Two things `--force` never overrides:
an input of the same command (its config and the configs its `base:` chain names, its data) is never
an output, and a path that is a symlink resolving out of its folder is never written through.

A file lorarag appends to (results, resume logs, traces) is listed as `"grows"` in place of a hash
(`own`): ours while listed, whatever its bytes. `remove_owned` (`--fresh`) removes only listed files.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from lorarag.core.errors import UserError
from lorarag.core.hashing import sha256_file

log = logging.getLogger(__name__)

MANIFEST = ".lorarag-outputs.json"
_FORMAT = 1
GROWS = "grows"  # the manifest's mark of a file lorarag appends to


class OutputError(UserError):
    """An output path holds a file lorarag did not write (or one edited since), or cannot be written."""


def _sha256(path: Path) -> str | None:
    try:
        return sha256_file(path)
    except OSError:
        return None


def _recorded(folder: Path) -> dict[str, str]:
    """name -> sha256 of the files lorarag wrote in `folder` ({} without a readable manifest)."""
    try:
        data = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    files = data.get("files") if isinstance(data, dict) and data.get("format") == _FORMAT else None
    if not isinstance(files, dict):
        return {}
    return {k: v for k, v in files.items() if isinstance(k, str) and isinstance(v, str)}


def is_ours(path: str | Path) -> bool:
    """True when `path` is a file lorarag wrote and nobody changed since (one it appends to: listed)."""
    path = Path(path)
    want = _recorded(path.parent).get(path.name)
    if want is None or not path.is_file() or path.is_symlink():
        return False
    return want == GROWS or _sha256(path) == want


def _escapes(path: Path) -> bool:
    """True when `path` is a symlink (or under one) that resolves outside its own folder."""
    try:
        return path.resolve().parent != path.parent.resolve()
    except (OSError, RuntimeError):
        return True


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve() or (a.exists() and b.exists() and os.path.samefile(a, b))
    except OSError:
        return False


def claim(paths: Iterable[str | Path], *, force: bool = False, inputs: Iterable[str | Path] = ()) -> None:
    """OutputError (one line) unless every path in `paths` may be written: absent, or a file we
    wrote and that is unchanged, or (`force`) any file. A path that is one of `inputs`, a symlink
    resolving out of its folder, or a folder, is refused even with `force`."""
    inputs = [Path(p) for p in inputs]
    for raw in paths:
        path = Path(raw)
        if _escapes(path):
            raise OutputError(
                f"{path}: is a link to {path.resolve()}, outside {path.parent}; refusing to write "
                "through it, even with --force: give another output path"
            )
        for src in inputs:
            if _same(path, src):
                raise OutputError(
                    f"{path}: is an input of this command ({src}); refusing to overwrite it, "
                    "even with --force: give another output path"
                )
        if not path.exists() and not path.is_symlink():
            continue
        if path.is_dir():
            raise OutputError(f"{path}: is a folder; name a file to write")
        if force or is_ours(path):
            continue
        raise OutputError(
            f"{path}: exists and was not written by lorarag (or was edited since); refusing "
            "to overwrite it: give another path, or --force to replace it"
        )


def _save(folder: Path, known: dict[str, str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f"{MANIFEST}.{os.getpid()}.tmp"
    try:
        tmp.write_text(json.dumps({"format": _FORMAT, "files": dict(sorted(known.items()))}, indent=1), encoding="utf-8")
        os.replace(tmp, folder / MANIFEST)
    except OSError as exc:
        raise OutputError(f"{folder / MANIFEST}: cannot write it ({exc.strerror or exc})") from None


def record(paths: Iterable[str | Path]) -> None:
    """Note the files just written in their folders' manifests, so a later run may replace them."""
    by_folder: dict[Path, list[Path]] = {}
    for raw in paths:
        p = Path(raw)
        by_folder.setdefault(p.parent, []).append(p)
    for folder, files in by_folder.items():
        known = _recorded(folder)
        for p in files:
            digest = _sha256(p)
            if digest is not None:
                known[p.name] = digest
        _save(folder, known)


def own(paths: Iterable[str | Path]) -> None:
    """List files lorarag appends to (or is about to create and append to) as ours, whatever their
    bytes: a later `claim` lets lorarag go on with them, `remove_owned` may remove them."""
    by_folder: dict[Path, list[str]] = {}
    for raw in paths:
        by_folder.setdefault(Path(raw).parent, []).append(Path(raw).name)
    for folder, names in by_folder.items():
        known = _recorded(folder)
        if any(known.get(n) != GROWS for n in names):
            _save(folder, {**known, **dict.fromkeys(names, GROWS)})


def remove_owned(folder: str | Path, names: Iterable[str]) -> tuple[list[str], list[str]]:
    """Remove those of `names` in `folder` that its manifest lists (`--fresh`): (removed, kept), kept
    being the files there lorarag did not write, left as they are. Links are never followed."""
    folder = Path(folder)
    known = _recorded(folder)
    removed, kept = [], []
    for name in names:
        path = folder / name
        if not path.is_file() and not path.is_symlink():
            continue
        if name in known and not path.is_symlink():
            path.unlink()
            known.pop(name)
            removed.append(name)
        else:
            kept.append(name)
    if removed:
        _save(folder, known)
    return removed, kept


def write_text(path: str | Path, text: str, *, force: bool = False, inputs: Iterable[str | Path] = ()) -> Path:
    """`claim`, write `text` (UTF-8) through a temporary sibling, `record`; returns the path."""
    path = Path(path)
    claim([path], force=force, inputs=inputs)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        raise OutputError(f"{path}: cannot write it ({exc.strerror or exc})") from None
    record([path])
    return path


def _started_here(folder: Path) -> bool:
    """True when `folder` holds the run.json lorarag's `start_run` wrote (listed in the manifest, or
    `older_run`)."""
    return is_ours(folder / "run.json") or older_run(folder)


def older_run(folder: str | Path) -> bool:
    """True for a run folder lorarag started before it kept a manifest: no manifest, and a run.json
    with the keys `start_run` writes. Its config.yaml and run.json count as lorarag's."""
    folder = Path(folder)
    run_json = folder / "run.json"
    if (folder / MANIFEST).exists() or run_json.is_symlink():
        return False
    try:
        data = json.loads(run_json.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(data, dict) and {"started", "git_sha", "versions"} <= set(data)


def remove_run_folder(folder: str | Path, what: str = "run folder") -> bool:
    """`--fresh` for a whole run folder (a training run and its checkpoints): removed only when
    lorarag started it (`_started_here`) or it is empty, never through a link; OutputError (one
    line) otherwise, with nothing removed. False when there was nothing there."""
    folder = Path(folder)
    if folder.is_symlink():
        raise OutputError(f"{folder}: is a link; --fresh never removes through it: remove it yourself or name another run")
    if not folder.exists():
        return False
    if not folder.is_dir():
        raise OutputError(f"{folder}: is a file, not a {what}; refusing to remove it")
    if not _started_here(folder) and any(folder.iterdir()):
        raise OutputError(
            f"{folder}: holds files but no run.json lorarag wrote; --fresh removes only a {what} "
            "lorarag made: remove it yourself or name another run"
        )
    shutil.rmtree(folder)
    return True


def clear_tree(folder: str | Path) -> list[Path]:
    """`--fresh` for a folder of outputs (a run's eval/ and report/): removes the files its manifests
    list, the run folders lorarag started in it (`_started_here`: results and all), and the folders
    left empty; never follows a link. Returns the files kept (not lorarag's), which stay as they are."""
    folder = Path(folder)
    if folder.is_symlink() or not folder.is_dir():
        return [folder] if folder.is_symlink() else []
    known, kept = _recorded(folder), []
    for entry in sorted(folder.iterdir()):
        if entry.name == MANIFEST:
            continue
        if entry.is_dir() and not entry.is_symlink():
            if _started_here(entry):
                shutil.rmtree(entry)
            else:
                kept += clear_tree(entry)
        elif entry.name in known and not entry.is_symlink():
            entry.unlink()
        else:
            kept.append(entry)
    if not kept:
        (folder / MANIFEST).unlink(missing_ok=True)
        folder.rmdir()
    elif any((folder / k).exists() for k in known):
        _save(folder, {k: v for k, v in known.items() if (folder / k).exists()})
    else:
        (folder / MANIFEST).unlink(missing_ok=True)
    return kept
