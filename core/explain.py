"""What a config key means, read from the models themselves: `lorarag validate --explain KEY`.

Every config model is a pydantic `Strict` model whose fields carry `Field(description=...)`;
`explain(Model, "retrieval.top_k")` walks the dotted key down the nested models and returns the
field's type, default, bounds and description, or, for a key naming a section (a nested model),
one line per key of that section. An unknown key is a ConfigError naming the keys that exist.
"""

from __future__ import annotations

import json
import types
import typing
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from lorarag.core.errors import ConfigError

_BOUNDS = (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"))


def _models_in(hint: Any) -> list[type[BaseModel]]:
    """The config models a field's type holds: itself, or inside Optional / list / dict values."""
    if isinstance(hint, type) and issubclass(hint, BaseModel):
        return [hint]
    out: list[type[BaseModel]] = []
    for arg in typing.get_args(hint):
        out += [m for m in _models_in(arg) if m not in out]
    return out


def type_name(hint: Any) -> str:
    """A type as a YAML writer reads it: `int`, `str | None`, `Literal['bm25', 'dense']`."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(a) for a in args)
    if origin is typing.Literal:
        return "one of " + ", ".join(json.dumps(a) for a in args)
    if hint is type(None):
        return "null"
    if origin is not None:
        return f"{getattr(origin, '__name__', str(origin))}[{', '.join(type_name(a) for a in args)}]"
    return getattr(hint, "__name__", str(hint).replace("typing.", ""))


def default_text(field: FieldInfo) -> str:
    """The default as YAML would write it; `required` when the key must be given."""
    if field.is_required():
        return "required"
    value = field.default_factory() if field.default_factory is not None else field.default
    if isinstance(value, BaseModel):
        return "the section's defaults"
    return json.dumps(value, ensure_ascii=False, default=str)


def _bounds(field: FieldInfo) -> str:
    marks = [
        f"{sign} {getattr(m, name)}" for m in field.metadata for name, sign in _BOUNDS if getattr(m, name, None) is not None
    ]
    return f", {' and '.join(marks)}" if marks else ""


def _doc(model: type[BaseModel]) -> str:
    """The first paragraph of a config model's docstring, on one line."""
    return " ".join((model.__doc__ or "").strip().split("\n\n")[0].split())


def _one_line(name: str, field: FieldInfo) -> str:
    inner = _models_in(field.annotation)
    desc = field.description or (_doc(inner[0]) if len(inner) == 1 else "") or "(no description)"
    return f"  {name}: {type_name(field.annotation)} = {default_text(field)}{_bounds(field)}\n      {desc}"


def _section(head: str, desc: str, model: type[BaseModel]) -> str:
    doc = desc or _doc(model)
    lines = [head] + ([f"  {doc}"] if doc else []) + ["keys:"]
    lines += [_one_line(name, f) for name, f in model.model_fields.items()]
    return "\n".join(lines)


def explain(model: type[BaseModel], key: str, prefix: str = "") -> str:
    """The help text of `key` (dotted, relative to `model`; `prefix` names `model` in the output,
    e.g. "rag"); an empty key explains the whole model. A list or mapping of sections is entered
    as its section (`systems.kind`). ConfigError for a key `model` lacks."""
    parts = [p for p in key.split(".") if p]
    full = prefix
    for i, part in enumerate(parts):
        fields = model.model_fields
        if part not in fields:
            raise ConfigError(
                f"{'.'.join(filter(None, (full, part)))}: unknown key "
                f"(keys of {full or model.__name__}: {', '.join(fields)})"
            )
        field = fields[part]
        full = f"{full}.{part}" if full else part
        inner = _models_in(field.annotation)
        if i == len(parts) - 1:
            head = f"{full}: {type_name(field.annotation)}, default {default_text(field)}{_bounds(field)}"
            if len(inner) == 1:
                return _section(head, field.description or "", inner[0])
            return f"{head}\n  {field.description or '(no description)'}"
        if len(inner) != 1:
            raise ConfigError(f"{full}.{parts[i + 1]}: unknown key ({full} is {type_name(field.annotation)}, not a section)")
        model = inner[0]
    return _section(f"{full or model.__name__}: {model.__name__}", "", model)
