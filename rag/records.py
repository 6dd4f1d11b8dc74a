"""Frozen, typed records that the pipeline stages exchange, and their JSONL form.

Every stage takes and returns these records; nothing passes dict bags around. Each record
round-trips through JSON (`to_json` / `from_json`) so runs can be written incrementally and
read back by later stages (evaluation, comparison, attribution).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import types
import typing
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from lorarag.core.errors import RecordError
from lorarag.core.inputs import loads_json

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class Document:
    """One parsed source file: its text and where it came from."""

    doc_id: str  # stable: path relative to the corpus root, POSIX separators
    source: str  # same relative path, kept for display
    text: str
    # Page start offsets into `text` (PDF only): page i starts at page_offsets[i].
    page_offsets: tuple[int, ...] = ()
    meta: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Chunk:
    """A retrievable piece of a document with full provenance."""

    chunk_id: str  # stable hash of (doc_id, chunker params, offsets, text)
    doc_id: str
    source: str
    text: str
    start: int  # character offset into Document.text, inclusive
    end: int  # character offset, exclusive
    heading_path: tuple[str, ...] = ()
    page: int | None = None  # 1-based PDF page of `start`
    # Optional date or version the chunk asserts (scenario chunks, archives); free text.
    date: str | None = None


@dataclass(frozen=True)
class Retrieved:
    """A chunk returned by a retriever or reranker for one query."""

    chunk: Chunk
    score: float
    rank: int  # 1-based
    stage: str = "retrieve"  # "bm25" | "dense" | "hybrid" | "rerank" | "retrieve"


@dataclass(frozen=True)
class Trace:
    """Everything that happened while answering one question.

    The fallback fields (`verdict` to `notes`) belong to the layer above (fallback/system.py
    fills them; the base RAGSystem leaves them empty) but are kept on this one record on purpose:
    every system the study compares (base RAG, the fallback, the prompt baselines, closed book)
    returns the same `Answer`, and the layers that read it (eval/records.py's item results, the
    conflict metrics, attribution, the explorer; serve/app.py; `lorarag ask`) take one record type
    with no type switch. A fallback-only subclass would make each of them test which trace it got,
    and a generic dict of extras would lose the per-field types this module's record reader checks.
    What it costs: rag/ names fields only fallback/ sets, so a new fallback decision is added
    here, in the bottom layer, with a default that keeps the base system's traces unchanged.
    """

    question: str
    retrieved: tuple[Retrieved, ...] = ()  # before rerank (top-N)
    reranked: tuple[Retrieved, ...] = ()  # after rerank (top-k), empty without a reranker
    prompt: str = ""
    raw_output: str = ""
    timings_s: tuple[tuple[str, float], ...] = ()  # (stage, seconds)
    # Fallback decisions (empty for the base RAGSystem).
    verdict: str | None = None
    verdict_score: float | None = None  # probability of the chosen verdict
    # Probability of each verdict label at the verdict position (for thresholds and ROC).
    verdict_probs: tuple[tuple[str, float], ...] = ()
    route: str | None = None
    context_answer: str | None = None
    memory_answer: str | None = None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Answer:
    """A system's answer to one question."""

    question: str
    text: str
    cited: tuple[str, ...] = ()  # source labels like "S1" present in the text and given
    bad_citations: tuple[str, ...] = ()  # labels cited in the text that were not given
    sources: tuple[str, ...] = ()  # deduplicated source files, in order of first use
    abstained: bool = False
    trace: Trace | None = None


def to_dict(record: Any) -> dict[str, Any]:
    """Turn a record (possibly nested) into JSON-ready dicts and lists; a row of an input format
    (a JSON object already, as scenarios/world_kb.py writes them) passes as it is."""
    return dict(record) if isinstance(record, dict) else dataclasses.asdict(record)


def _json_kind(value: Any) -> str:
    """How a JSON value reads to a user: 'a string', 'a list', ..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _wanted(hint: Any) -> str:
    """What a type hint asks for, in the words of `_json_kind`."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_wanted(a) for a in args)
    if origin is tuple:
        return (
            f"a list of {_wanted(args[0]).removeprefix('a ').removeprefix('an ')}s"
            if len(args) == 2 and args[1] is Ellipsis
            else f"a list of {len(args)}"
        )
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin is dict:
        return "an object"
    if dataclasses.is_dataclass(hint):
        return "an object"
    return {str: "a string", int: "an integer", float: "a number", bool: "true/false", type(None): "null"}.get(
        hint, getattr(hint, "__name__", str(hint))
    )


def _convert(hint: Any, value: Any, where: str) -> Any:
    """`value` (parsed JSON) as the type `hint` asks for; RecordError naming the field if it is not.

    Types are checked, never coerced: a string where a list is expected is an error (a string is
    a sequence of characters, and `gold_answers: "Paris"` would silently become five answers).
    """
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for a in args:
            if a is type(None):
                continue
            try:
                return _convert(a, value, where)
            except RecordError:
                continue
        raise RecordError(f"{where}: expected {_wanted(hint)}, got {_json_kind(value)}")
    if dataclasses.is_dataclass(hint):
        return _build(hint, value, where)
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise RecordError(f"{where}: expected {_wanted(hint)}, got {_json_kind(value)}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_convert(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
        if len(value) != len(args):
            raise RecordError(f"{where}: expected a list of {len(args)}, got {len(value)} item(s)")
        return tuple(_convert(a, v, f"{where}[{i}]") for i, (a, v) in enumerate(zip(args, value)))
    if origin is dict:
        if not isinstance(value, dict):
            raise RecordError(f"{where}: expected an object, got {_json_kind(value)}")
        return value
    if origin is typing.Literal:
        if value not in args:
            raise RecordError(f"{where}: expected {_wanted(hint)}, got {value!r}")
        return value
    ok = {
        str: lambda v: isinstance(v, str),
        bool: lambda v: isinstance(v, bool),
        int: lambda v: isinstance(v, int) and not isinstance(v, bool),
        float: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    }.get(hint)
    if ok is None:
        return value  # an annotation this reader does not check
    if not ok(value):
        raise RecordError(f"{where}: expected {_wanted(hint)}, got {_json_kind(value)}")
    return float(value) if hint is float else value


@functools.cache
def _fields(cls: type) -> tuple[dict[str, Any], frozenset[str]]:
    """Type hints of a record class's fields, and the names of those without a default."""
    hints = typing.get_type_hints(cls)
    fields = dataclasses.fields(cls)
    required = frozenset(
        f.name for f in fields if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    )
    return {f.name: hints.get(f.name, Any) for f in fields}, required


def _build(cls: type, data: Any, where: str = "") -> Any:
    """Rebuild a dataclass (recursively) from `to_dict` output: every field's type is checked
    against the class's annotations, JSON lists become tuples, nested records are rebuilt."""
    at = f"{where}: " if where else ""
    if not isinstance(data, dict):
        raise RecordError(f"{at}expected an object for {cls.__name__}, got {_json_kind(data)}")
    hints, required = _fields(cls)
    unknown = set(data) - set(hints)
    if unknown:
        raise RecordError(f"{at}unknown field(s) for {cls.__name__}: {sorted(unknown)}")
    missing = sorted(required - set(data))
    if missing:
        raise RecordError(f"{at}{cls.__name__} without field(s) {', '.join(missing)}")
    prefix = f"{where}." if where else ""
    kwargs = {name: _convert(hints[name], value, prefix + name) for name, value in data.items()}
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise RecordError(f"{at}{cls.__name__}: {exc}") from None


def from_dict(cls: type[T], data: Any) -> T:
    """Build a record of type `cls` from its dict form; RecordError (naming the field) if it does
    not fit: unknown or missing fields, or a value of the wrong JSON type."""
    return _build(cls, data)


def write_jsonl(path: str | Path, records: Iterable[Any]) -> int:
    """Write records to `path` atomically (temp file + rename); return the count."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    n = 0
    with tmp.open("w", encoding="utf-8") as fh:
        for rec in records:
            fh.write(json.dumps(to_dict(rec), ensure_ascii=False) + "\n")
            n += 1
    tmp.replace(path)
    return n


def append_jsonl(path: str | Path, record: Any) -> None:
    """Append one record and flush to disk, for incremental, resumable runs."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(to_dict(record), ensure_ascii=False) + "\n")
        fh.flush()
        import os

        os.fsync(fh.fileno())


def iter_jsonl_lines(path: str | Path, *, tolerate_torn_tail: bool = False) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line number, JSON object) of a JSONL file; RecordError names file:line on a bad line.

    With `tolerate_torn_tail`, a last line without newline that does not parse (a write cut by
    SIGKILL) is skipped with a warning instead of raising: that row is simply redone on resume.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise RecordError(f"{path}: cannot read ({exc.strerror or type(exc).__name__})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RecordError(f"{path}: not UTF-8 text (invalid byte at offset {exc.start})") from None
    lines = text.split("\n")
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = loads_json(line, f"{path}:{i}")  # nested too deeply: a RecordError too
        except json.JSONDecodeError as exc:
            is_tail = i == len(lines) and not text.endswith("\n")
            if tolerate_torn_tail and is_tail:
                log.warning("%s:%d: ignoring a torn last line (interrupted write)", path, i)
                return
            raise RecordError(f"{path}:{i}: malformed JSON ({exc.msg})") from None
        if not isinstance(obj, dict):
            raise RecordError(f"{path}:{i}: expected a JSON object, got {_json_kind(obj)}")
        yield i, obj


def iter_jsonl_dicts(path: str | Path, *, tolerate_torn_tail: bool = False) -> Iterator[dict[str, Any]]:
    """The JSON objects of a JSONL file (see `iter_jsonl_lines`)."""
    for _, obj in iter_jsonl_lines(path, tolerate_torn_tail=tolerate_torn_tail):
        yield obj


def read_jsonl_lines(path: str | Path, cls: type[T], *, tolerate_torn_tail: bool = False) -> list[tuple[int, T]]:
    """(line number, record) of a JSONL file of `cls` records; RecordError names file:line and field."""
    out: list[tuple[int, T]] = []
    for i, obj in iter_jsonl_lines(path, tolerate_torn_tail=tolerate_torn_tail):
        try:
            out.append((i, from_dict(cls, obj)))
        except RecordError as exc:
            raise RecordError(f"{path}:{i}: {exc}") from None
    return out


def read_jsonl(path: str | Path, cls: type[T], *, tolerate_torn_tail: bool = False) -> list[T]:
    """Read a JSONL file of records of type `cls`; RecordError names file:line and field."""
    return [r for _, r in read_jsonl_lines(path, cls, tolerate_torn_tail=tolerate_torn_tail)]
