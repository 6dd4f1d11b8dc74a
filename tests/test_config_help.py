"""`lorarag validate --explain KEY`: what a config key means (type, default, bounds, description),
read from the pydantic models' `Field(description=...)`, through the real CLI entry point."""

from __future__ import annotations

import pytest

from lorarag.cli import CONFIG_SCHEMAS, _schema
from lorarag.core.explain import _models_in


def test_a_nested_key_says_type_default_bounds_and_meaning(cli):
    code, out, _ = cli("validate", "--explain", "rag.retrieval.top_k")
    assert code == 0
    head, desc = out.strip().splitlines()
    assert head == "rag.retrieval.top_k: int, default 5, >= 1"
    assert desc.strip() == "passages given to the model"


def test_a_key_three_sections_down_in_a_run_config(cli):
    code, out, _ = cli("validate", "--explain", "run.fallback.gate.threshold")
    assert code == 0
    assert out.splitlines()[0] == "run.fallback.gate.threshold: float | null, default null"
    assert "gate.json" in out  # null means: the calibrated threshold saved next to the adapter


@pytest.mark.parametrize(
    "key, head",
    [
        ("eval.max_per_cell", "eval.max_per_cell: int | null, default 40, >= 1"),  # a run config's eval: section
        ("train.swift", "train.swift: dict[str, Any], default {}"),
        ("eval.judge", "eval.judge: JudgeConfig, default the section's defaults"),  # configs/eval/*.yaml's key
        ("numerics.cpu_isa", 'numerics.cpu_isa: one of "avx2" | null, default null'),
    ],
)
def test_a_key_as_a_run_config_writes_it(cli, key, head):
    code, out, _ = cli("validate", "--explain", key)
    assert code == 0 and out.splitlines()[0] == head


def test_a_section_lists_its_keys_with_their_defaults(cli):
    code, out, _ = cli("validate", "--explain", "rag.retrieval")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "rag.retrieval: RetrievalConfig, default the section's defaults"
    keys = [ln.split(":")[0].strip() for ln in lines if ln.startswith("  ") and not ln.startswith("      ") and ":" in ln][
        1:
    ]  # the first indented line is the section's own description
    assert keys == ["mode", "top_n", "top_k", "min_score"]
    assert '  mode: one of "bm25", "dense", "hybrid" = "bm25"' in lines
    assert "  top_n: int = 20, >= 1" in lines
    assert "  min_score: float | null = null, >= 0.0 and <= 1.0" in lines


def test_a_list_of_sections_is_entered_as_its_section(cli):
    code, out, _ = cli("validate", "--explain", "run.systems.max_new_tokens")
    assert code == 0
    assert out.splitlines()[0] == "run.systems.max_new_tokens: int, default 24"


@pytest.mark.parametrize(
    "key, needles",
    [
        (
            "rag.retrieval.top_kk",
            ["rag.retrieval.top_kk: unknown key", "keys of rag.retrieval: mode, top_n, top_k, min_score"],
        ),
        ("rag.retrieval.top_k.x", ["rag.retrieval.top_k.x: unknown key", "top_k is int, not a section"]),
        ("ragg.retrieval", ["ragg.retrieval: unknown config kind 'ragg'", "check, eval, rag, run, train"]),
    ],
)
def test_an_unknown_key_is_one_line(cli, key, needles):
    code, out, err = cli("validate", "--explain", key)
    assert code == 2 and out == "" and "Traceback" not in err
    (line,) = err.strip().splitlines()
    assert line.startswith("error: ")
    for n in needles:
        assert n in line, line


def test_every_key_of_every_schema_says_what_it_means():
    """A leaf key without a description would explain as `(no description)`; sections may lean on
    their model's docstring instead."""
    seen: set[type] = set()
    missing: list[str] = []

    def walk(model: type, path: str) -> None:
        if model in seen:
            return
        seen.add(model)
        for name, field in model.model_fields.items():
            inner = _models_in(field.annotation)
            if not field.description and not (inner and all(m.__doc__ for m in inner)):
                missing.append(f"{path}.{name}")
            for m in inner:
                walk(m, f"{path}.{name}")

    for kind in CONFIG_SCHEMAS:
        walk(_schema(kind), kind)
    assert len(seen) > 20 and not missing, missing
