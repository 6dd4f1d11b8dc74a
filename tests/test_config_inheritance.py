"""Run configs inherit: `base:` chains, key-by-key merge, `${name}` placeholders, strict YAML."""

from __future__ import annotations

from pathlib import Path

import pytest

from lorarag.core.config import deep_merge, load_config, read_config_data
from lorarag.core.errors import ConfigError
from lorarag.trained.config import RunConfig

REPO = Path(__file__).resolve().parents[1]


def test_deep_merge_merges_mappings_and_replaces_lists_by_hand():
    base = {"a": 1, "m": {"x": 1, "y": {"p": 1, "q": 2}}, "l": [1, 2]}
    delta = {"m": {"y": {"q": 3}, "z": 4}, "l": [9], "b": None}
    assert deep_merge(base, delta) == {"a": 1, "m": {"x": 1, "y": {"p": 1, "q": 3}, "z": 4}, "l": [9], "b": None}
    assert base["m"]["y"] == {"p": 1, "q": 2}  # inputs untouched


def test_child_config_states_only_its_deltas_and_paths_follow_its_name(tmp_path):
    (tmp_path / "base.yaml").write_text("name: parent\nroot: runs\nsub: {dir: '${root}/${name}/index', k: 3}\n")
    (tmp_path / "child.yaml").write_text("base: base.yaml\nname: child\nsub: {k: 5}\n")
    data = read_config_data(tmp_path / "child.yaml")
    assert data == {"name": "child", "root": "runs", "sub": {"dir": "${root}/${name}/index", "k": 5}}


def test_shipped_children_resolve_to_their_parent_plus_the_stated_deltas():
    parent = load_config(REPO / "configs/run/cpu-demo.yaml", RunConfig)
    fp32 = load_config(REPO / "configs/run/cpu-demo-fp32.yaml", RunConfig)
    assert fp32.rag.index.dir == "runs/cpu-demo-fp32/index" and fp32.train.run_name == "cpu-demo-fp32-lora"
    assert fp32.rag.generator.dtype == "float32" and fp32.train.swift["bf16"] is False
    same = fp32.model_dump()
    for key in ("name",):
        same.pop(key)
    want = parent.model_dump()
    want.pop("name")
    # everything else equal, once the name-derived paths and the numerics deltas are put back (fp32,
    # and prompt_lookup: single questions drafted from their prompt, agreeing with plain fp32 decoding)
    same["train"].update(
        run_name="cpu-demo-lora", dataset="runs/cpu-demo/sft/train.jsonl", val_dataset="runs/cpu-demo/sft/val.jsonl"
    )
    # cpu-demo.yaml's `auto` precision is this CPU's choice (core/precision.py), fp32's is fixed
    same["train"]["swift"]["bf16"] = parent.train.swift["bf16"]
    same["rag"]["generator"]["dtype"] = parent.rag.generator.dtype
    same["rag"]["generator"]["prompt_lookup"] = None
    same["rag"]["index"]["dir"] = "runs/cpu-demo/index"
    assert same == want


@pytest.mark.parametrize(
    "files,message",
    [
        ({"a.yaml": "base: b.yaml\nname: a\n", "b.yaml": "base: a.yaml\nname: b\n"}, "part of its own base chain"),
        ({"a.yaml": "base: missing.yaml\nname: a\n"}, "no such config file"),
        ({"a.yaml": "name: a\nname: b\n"}, "duplicate key 'name'"),
        ({"a.yaml": "name: a\nx: {k: 1, k: 2}\n"}, "duplicate key 'k'"),
        ({"a.yaml": "name: a\nrunsdir: '${nope}/x'\n"}, "${nope} names no top-level scalar key"),
        ({"a.yaml": "base: [b.yaml]\nname: a\n"}, "base: must be the path"),
    ],
)
def test_bad_inheritance_is_a_one_line_error(tmp_path, files, message):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(tmp_path / "a.yaml", RunConfig)
    assert message in str(err.value) and "\n" not in str(err.value)
