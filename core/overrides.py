"""`--set key=value`: change one key of a config from the command line, without writing a YAML file.

`parse_sets(["eval.max_per_cell=10", "train.swift.bf16=false"])` gives the nested mapping
`{"eval": {"max_per_cell": 10}, "train": {"swift": {"bf16": False}}}`: dotted keys as the config
file writes them, values parsed as YAML (`10` an int, `false` a bool, `null`, `[a, b]` a list).
`core.config.load_config(path, Model, overrides)` lays it over the file (after its `base:` chain)
and validates the result like the file itself, so a typo in a key is the same one-line error;
the run folder's config.yaml holds the values used and run.json's `command` the `--set` given.
"""

from __future__ import annotations

from typing import Any

import yaml

from lorarag.core.errors import ConfigError

HELP = "change one config key, as the YAML writes it: --set eval.max_per_cell=10 (repeatable; values are YAML)"


def parse_sets(items: list[str] | None) -> dict[str, Any]:
    """The nested mapping of `key=value` items (module docstring); ConfigError for a malformed one."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, raw = item.partition("=")
        parts = key.strip().split(".")
        if not sep or not all(p.strip() for p in parts):
            raise ConfigError(f"--set {item!r}: expected key=value with a dotted key, e.g. eval.max_per_cell=10")
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError:
            raise ConfigError(f"--set {key.strip()}: the value {raw!r} is not valid YAML") from None
        node = out
        for i, part in enumerate(parts[:-1]):
            node = node.setdefault(part.strip(), {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {key.strip()}: {'.'.join(parts[: i + 1])} is set to a value above")
        leaf = parts[-1].strip()
        if isinstance(node.get(leaf), dict):
            raise ConfigError(f"--set {key.strip()}: its keys are set one by one above")
        node[leaf] = value
    return out
