"""A wheel built from a clean clone works outside the checkout, on the configs it ships."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_a_wheel_from_a_clean_clone_runs_outside_the_checkout(tmp_path):
    """Clone, build the wheel, install it (no deps) in a fresh venv that borrows this venv's
    dependencies, then from a folder outside any checkout: `lorarag run` on a packaged config
    with --dry-run, and `lorarag bench scale`, whose evaluation part loads a packaged config."""
    if subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True).returncode:
        pytest.skip("not a git checkout")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True, timeout=120)
    dist = tmp_path / "dist"
    out = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), str(clone)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    (wheel,) = dist.glob("lorarag-*.whl")

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    out = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    # the dependencies (torch, transformers, ...) from this venv, after the wheel's own lorarag
    (site / "zz-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    where = subprocess.run(
        [
            str(py),
            "-c",
            "import lorarag, lorarag.rag.index.store as i; "
            "from lorarag.core.paths import packaged_config as p; "
            "print(lorarag.__file__); print(i.__file__); print(p('run/ci-tiny.yaml'))",
        ],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert where.returncode == 0, where.stderr[-2000:]
    paths = where.stdout.split()
    assert all(str(site) in p for p in paths), paths  # the wheel's copy, not the checkout
    cfg = paths[2]

    lorarag = venv / "bin" / "lorarag"
    dry = subprocess.run(
        [str(lorarag), "run", cfg, "--dry-run"], cwd=work, env=env, capture_output=True, text=True, timeout=300
    )
    assert dry.returncode == 0, dry.stdout[-2000:] + dry.stderr[-2000:]
    assert "train" in dry.stdout.lower()

    bench = subprocess.run(
        [
            str(lorarag),
            "bench",
            "scale",
            "--sizes",
            "1000",
            "--dim",
            "8",
            "--shards",
            "2",
            "--out",
            str(work / "scale.json"),
        ],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert bench.returncode == 0, bench.stdout[-2000:] + bench.stderr[-2000:]
    result = json.loads((work / "scale.json").read_text())
    assert result, "bench scale wrote no results"
