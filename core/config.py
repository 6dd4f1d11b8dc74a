"""Config loading: YAML -> pydantic models with `extra="forbid"`, validated once at the edge.

Every config model in the project derives from `Strict`. `load_config(path, Model)` turns
any YAML or validation problem into a one-line `ConfigError` naming the file and the key,
e.g. `configs/rag/cpu.yaml: chunker.chunk_szie: unknown key`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from lorarag.core.errors import ConfigError, RecordError
from lorarag.core.inputs import MAX_CONFIG_BYTES, check_input_file

M = TypeVar("M", bound=BaseModel)


class Strict(BaseModel):
    """Base for all config models: unknown keys are errors, instances are immutable, and a number
    is finite (NaN or infinity in a config is a typo no stage could use)."""

    model_config = ConfigDict(extra="forbid", frozen=True, protected_namespaces=(), allow_inf_nan=False)


def _describe(err: dict[str, Any]) -> str:
    loc = ".".join(str(p) for p in err.get("loc", ()))
    kind = err.get("type", "")
    if kind == "extra_forbidden":
        return f"{loc}: unknown key"
    if kind == "missing":
        return f"{loc}: required key missing"
    return f"{loc}: {err.get('msg', 'invalid')}" if loc else err.get("msg", "invalid")


def validate_data(data: Any, model: type[M], source: str) -> M:
    """Validate already-parsed data against `model`; ConfigError with one line per call."""
    try:
        return model.model_validate(data if data is not None else {})
    except ValidationError as exc:
        errs = exc.errors()
        first = _describe(errs[0])
        more = f" (+{len(errs) - 1} more)" if len(errs) > 1 else ""
        raise ConfigError(f"{source}: {first}{more}") from None


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a mapping with the same key twice (YAML would keep the last silently)."""


def _unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: set = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def read_yaml(path: str | Path) -> Any:
    """Parse a YAML file; ConfigError (one line) if it cannot be read or parsed, or repeats a key."""
    path = Path(path)
    try:
        if path.exists():  # a FIFO, a device (`base: /dev/zero`) or a huge file: refused before any read
            check_input_file(path, "config file", max_bytes=MAX_CONFIG_BYTES)
        text = path.read_text(encoding="utf-8")
    except RecordError as exc:
        raise ConfigError(str(exc)) from None
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ConfigError(f"{path}:{where}: {problem}") from None
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply (more levels than the YAML reader allows)") from None


def deep_merge(base: dict[str, Any], delta: dict[str, Any]) -> dict[str, Any]:
    """`base` with `delta` laid over it: mappings merge key by key, anything else (lists too) replaces."""
    out = dict(base)
    for key, value in delta.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


_PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _substitute(value: Any, top: dict[str, Any], path: Path) -> Any:
    """`${key}` in a string -> the config's top-level scalar `key` (e.g. `runs/${name}/index`)."""
    if isinstance(value, dict):
        return {k: _substitute(v, top, path) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, top, path) for v in value]
    if not isinstance(value, str):
        return value

    def one(m: re.Match) -> str:
        key = m.group(1)
        if key not in top or isinstance(top[key], (dict, list)) or top[key] is None:
            raise ConfigError(f"{path}: ${{{key}}} names no top-level scalar key of the config")
        return str(top[key])

    return _PLACEHOLDER.sub(one, value)


def read_config_data(path: str | Path, _chain: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The config mapping of `path` with its `base:` chain resolved (paths relative to the file)
    and `${key}` placeholders filled; ConfigError names the file of any problem."""
    path = Path(path)
    data = read_yaml(path)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping")
    base = data.pop("base", None)
    if base is not None:
        if not isinstance(base, str):
            raise ConfigError(f"{path}: base: must be the path of another config file")
        base_path = (path.parent / base).resolve()
        if base_path in _chain or base_path == path.resolve():
            raise ConfigError(f"{path}: base: {base} is part of its own base chain")
        data = deep_merge(read_config_data(base_path, (*_chain, path.resolve())), data)
    return data


def config_files(path: str | Path) -> list[Path]:
    """`path` and every config its `base:` chain names (each an input of the command that reads
    it, never one of its outputs); the files that cannot be read are left out."""
    out = [Path(path)]
    while True:
        try:
            data = read_yaml(out[-1])
        except ConfigError:
            return out
        base = data.get("base") if isinstance(data, dict) else None
        if not isinstance(base, str):
            return out
        nxt = (out[-1].parent / base).resolve()
        if any(nxt == p.resolve() for p in out):
            return out
        out.append(nxt)


def load_config(path: str | Path, model: type[M], overrides: dict[str, Any] | None = None) -> M:
    """Read and validate a YAML config file into `model` (`base:` chain merged, `overrides` (the
    CLI's `--set`, core/overrides.py) laid over it, `auto` precisions resolved for this machine
    (core/precision.py), `${key}` filled)."""
    from lorarag.core.precision import resolve  # reads the CPU's features

    data = resolve(deep_merge(read_config_data(path), overrides or {}))
    return validate_data(_substitute(data, data, Path(path)), model, str(path))


def dump_config(cfg: BaseModel) -> str:
    """The resolved config as YAML text (for run directories)."""
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False, allow_unicode=True)
