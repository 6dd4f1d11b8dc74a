"""What a new user reads first holds no research history: no experiment id (E12, E30.1: the research
log's names, docs/research-log.md) in the product's Python files, its configs (configs/run/) or the
README, and the README stays short enough to read before the first command."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EXPERIMENT_ID = re.compile(r"\bE[0-9]{1,3}(\.[0-9]+)?\b")
NOQA = re.compile(r"#\s*noqa:[A-Z0-9, ]*")  # a linter's rule code (E731) is no experiment id
NOT_PRODUCT = {"tests", ".venv", "runs", "checkpoints", "data", "build", ".git"}
README_MAX_LINES = 120


def experiment_ids(path: Path) -> list[str]:
    """`path:line: text` for every line of `path` that names an experiment id."""
    out = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if EXPERIMENT_ID.search(NOQA.sub("", line)):
            out.append(f"{path.relative_to(REPO)}:{i}: {line.strip()}")
    return out


def product_files() -> list[Path]:
    py = [
        p
        for p in REPO.rglob("*.py")
        if not NOT_PRODUCT & set(p.relative_to(REPO).parts)
        and not any(part.endswith(".egg-info") for part in p.relative_to(REPO).parts)
    ]
    return sorted(py) + sorted((REPO / "configs/run").glob("*.yaml")) + [REPO / "README.md"]


@pytest.mark.parametrize(
    "line, named",
    [
        ("not adopted (E26.1: the cost goes)", True),
        ("see E5.8 and", True),
        ("E3", True),
        ("# noqa: E731", False),
        ("E1234 is a number", False),
        ("an E-mail, E.coli", False),
        ("SE12", False),
    ],
)
def test_the_id_pattern_finds_ids_and_only_ids(line, named):
    assert bool(EXPERIMENT_ID.search(NOQA.sub("", line))) is named


def test_product_files_configs_and_readme_name_no_experiment_id():
    files = product_files()
    assert len(files) > 100 and REPO / "configs/run/cpu-demo.yaml" in files and REPO / "cli/__init__.py" in files
    assert not any("tests" in p.relative_to(REPO).parts for p in files)
    hits = [h for f in files for h in experiment_ids(f)]
    assert not hits, "experiment ids belong in docs/research-log.md:\n" + "\n".join(hits)


def test_the_scan_sees_an_id_in_a_product_file(tmp_path, monkeypatch):
    """The check can fail: an id planted in a file it reads is reported with its line."""
    fake = tmp_path / "core" / "x.py"
    fake.parent.mkdir()
    fake.write_text('"""ok"""\n# measured in E40.2\n', encoding="utf-8")
    monkeypatch.setattr(f"{__name__}.REPO", tmp_path)
    assert experiment_ids(fake) == ["core/x.py:2: # measured in E40.2"]


def test_the_readme_is_short():
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines; the research narrative belongs in docs/results.md"
    )


def test_the_readmes_own_kb_config_validates_where_a_user_saves_it(tmp_path, cli):
    """The README's `my-kb.yaml` is a valid run config, and `lorarag validate` reads a YAML outside
    configs/ as a run config (its base path made absolute: the README saves it in the checkout)."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```yaml\n(.*?)```", text, re.S).group(1)
    assert block.startswith("base: configs/run/cpu-demo.yaml")
    cfg = tmp_path / "my-kb.yaml"
    cfg.write_text(block.replace("base: configs/run/", f"base: {REPO}/configs/run/", 1), encoding="utf-8")
    code, out, _ = cli("validate", cfg)
    assert code == 0 and out.splitlines() == [f"ok    {cfg}", "1 valid, 0 invalid"], out
    code, out, _ = cli("run", cfg, "--dry-run")
    assert code == 0 and "corpus folder my-docs/ + questions jsonl my-questions.jsonl" in out


def test_the_vllm_kind_without_vllm_installed_is_one_clear_error(monkeypatch, tmp_path):
    """vLLM is an extra (`make install-vllm`): without it, asking for the vllm generator says so."""
    import lorarag.rag.generators.registry as generators
    from lorarag.core.errors import ConfigError
    from lorarag.rag.config import GeneratorConfig

    monkeypatch.setattr(generators, "find_spec", lambda name: None if name == "vllm" else object())
    with pytest.raises(
        ConfigError,
        match=r"generator.kind: vllm needs vLLM, which is not installed here "
        r"\(`make install-vllm`",
    ):
        generators.build_generator(GeneratorConfig(kind="vllm", model=str(tmp_path)))
