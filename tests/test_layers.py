"""The house's rules, checked: one-way layers, no cycles, one installed name, small modules."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("rag", "fallback", "scenarios", "train", "trained", "eval", "study", "serve", "bench")


def test_lint_imports_keeps_the_layers_and_finds_no_cycle():
    """pyproject.toml's import-linter contracts: cli > bench > study > train|eval > scenarios >
    fallback > rag > core, and no circle between the modules of any package. Plain `lint-imports`
    at the checkout root, as a developer runs it: the root is `lorarag`'s own folder, so grimp walks
    every design-card folder as a sub-package of the installed name."""
    exe = Path(sys.executable).with_name("lint-imports")
    if not exe.is_file():
        pytest.skip("import-linter is not installed (pip install -e .[dev])")
    out = subprocess.run(
        [str(exe), "--no-cache"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "one-way layers KEPT" in out.stdout and "no import cycles KEPT" in out.stdout
    analysed = re.search(r"Analyzed (\d+) files", out.stdout)
    assert analysed and int(analysed.group(1)) >= len(list(REPO.glob("*/*.py"))) - len(list(REPO.glob("tests/*.py"))), (
        out.stdout[:500]
    )  # every package folder walked, not only a part of the house


def test_the_checkout_has_no_links_and_a_bare_import_is_refused():
    """The folders are mapped, not linked; `import rag` from the checkout root would load a second
    copy of every module, so each folder refuses it."""
    links = [
        str(p.relative_to(REPO))
        for p in REPO.rglob("*")
        if p.is_symlink() and not any(part in (".git", ".venv", "node_modules") for part in p.relative_to(REPO).parts)
    ]
    assert not links, links
    for name in ("rag", "cli", "core"):
        out = subprocess.run([sys.executable, "-c", f"import {name}"], cwd=REPO, capture_output=True, text=True, timeout=60)
        assert out.returncode != 0 and f"import lorarag.{name}, not {name}" in out.stderr, out.stderr[-500:]
    import lorarag.rag.records as rec

    assert Path(rec.__file__).resolve() == REPO / "rag" / "records.py"


def test_lint_imports_would_catch_an_upward_import(tmp_path):
    """The contracts are not vacuous: the same linter on a copy with rag importing the study, and the
    trained system importing the study, breaks both."""
    exe = Path(sys.executable).with_name("lint-imports")
    if not exe.is_file():
        pytest.skip("import-linter is not installed (pip install -e .[dev])")
    pkg = tmp_path / "lorarag"
    for name in ("core", "rag", "study", "trained", "serve", "bench", "cli"):
        (pkg / name).mkdir(parents=True)
        (pkg / name / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "cli" / "generate.py").write_text("")
    (pkg / "cli" / "serve.py").write_text("")
    (pkg / "rag" / "bad.py").write_text("from lorarag.study import x\n")
    (pkg / "trained" / "load.py").write_text("from lorarag.study import x\n")
    (pkg / "study" / "x.py").write_text("")
    cfg = tmp_path / "pyproject.toml"
    text = (REPO / "pyproject.toml").read_text()
    contracts = text[text.index("[tool.importlinter]") :]
    contracts = re.sub(r"^layers = \[.*\]$", 'layers = ["study", "rag", "core"]', contracts, flags=re.M)
    cfg.write_text(contracts)
    out = subprocess.run(
        [str(exe), "--config", str(cfg), "--no-cache"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode != 0 and "lorarag.rag.bad -> lorarag.study.x" in out.stdout
    assert "the product needs no study BROKEN" in out.stdout and "lorarag.trained.load -> lorarag.study.x" in out.stdout


def test_project_code_imports_only_through_the_lorarag_namespace():
    """`from lorarag.eval import metrics`, never `import eval`: a bare top-level name would load a
    second copy of the module (or a user's own `eval`)."""
    bare = re.compile(r"^\s*(from|import) (" + "|".join(PACKAGES) + r")\b", re.M)
    hits = []
    for folder in (*PACKAGES, "cli", "core", "testing", "tests"):
        for f in (REPO / folder).rglob("*.py"):
            hits += [f"{f.relative_to(REPO)}: {m.group(0).strip()}" for m in bare.finditer(f.read_text())]
    assert not hits, hits[:10]


def test_ruff_passes_with_the_projects_config():
    """pyproject's [tool.ruff]: pyflakes, pycodestyle at 125 characters, import order, pyupgrade,
    bugbear, no blind except; and the formatter's layout (`ruff format --check`)."""
    exe = Path(sys.executable).with_name("ruff")
    if not exe.is_file():
        pytest.skip("ruff is not installed (pip install -e .[dev])")
    for args in (["check", "--no-cache", "."], ["format", "--check", "--no-cache", "."]):
        out = subprocess.run([str(exe), *args], cwd=REPO, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, " ".join(args[:1]) + ": " + out.stdout[-3000:] + out.stderr[-1000:]


def test_no_module_over_400_lines():
    """One module, one stage, readable top to bottom."""
    long = []
    for folder in (*PACKAGES, "cli", "core", "testing"):
        for f in (REPO / folder).rglob("*.py"):  # sub-packages too (rag/index, rag/generators, ...)
            n = len(f.read_text().splitlines())
            if n > 400:
                long.append(f"{f.relative_to(REPO)}: {n}")
    assert not long, long


@pytest.mark.slow
def test_the_wheel_installs_one_top_level_name(tmp_path):
    """The built wheel holds `lorarag` (with the design card's folders as its sub-packages) and its
    dist-info, nothing generic like `eval` or `rag`."""
    out = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path), str(REPO)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    (wheel,) = tmp_path.glob("lorarag-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"lorarag", f"{wheel.name.split('-py')[0]}.dist-info"}
    for module in (
        "rag/index/store.py",
        "fallback/system.py",
        "study/pipeline.py",
        "eval/report.py",
        "train/swift.py",
        "scenarios/world.py",
        "serve/app.py",
        "core/config.py",
        "cli/__init__.py",
        "testing/tiny.py",
        "configs/run/ci-tiny.yaml",
        "configs/run/cpu-demo-fp32.yaml",
    ):
        assert f"lorarag/{module}" in names, module
