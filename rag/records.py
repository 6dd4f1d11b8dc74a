"""Frozen, typed records that the pipeline stages exchange, and their JSONL form.

Every stage takes and returns these records; nothing passes dict bags around. Each record
round-trips through JSON (`to_json` / `from_json`) so runs can be written incrementally and
read back by later stages (evaluation, comparison, attribution).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, TypeVar

from lorarag.core.errors import RecordError

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
    """Everything that happened while answering one question."""

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
    """Turn a record (possibly nested) into JSON-ready dicts and lists."""
    return dataclasses.asdict(record)


def _build(cls: type, data: Any) -> Any:
    """Rebuild a dataclass (recursively) from `to_dict` output, tuples restored."""
    if not isinstance(data, dict):
        raise RecordError(f"expected an object for {cls.__name__}, got {type(data).__name__}")
    names = {f.name: f for f in dataclasses.fields(cls)}
    unknown = set(data) - set(names)
    if unknown:
        raise RecordError(f"unknown field(s) for {cls.__name__}: {sorted(unknown)}")
    kwargs: dict[str, Any] = {}
    hints = _NESTED.get(cls, {})
    for name, value in data.items():
        if name in hints and value is not None:
            sub, many = hints[name]
            value = tuple(_build(sub, v) for v in value) if many else _build(sub, value)
        elif isinstance(value, list):
            value = _deep_tuple(value)
        kwargs[name] = value
    try:
        return cls(**kwargs)
    except TypeError as exc:  # missing required field
        raise RecordError(f"{cls.__name__}: {exc}") from None


def _deep_tuple(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_deep_tuple(v) for v in value)
    return value


# Which fields hold nested records: {cls: {field: (record class, is_sequence)}}.
_NESTED: dict[type, dict[str, tuple[type, bool]]] = {
    Retrieved: {"chunk": (Chunk, False)},
    Trace: {"retrieved": (Retrieved, True), "reranked": (Retrieved, True)},
    Answer: {"trace": (Trace, False)},
}


def register_nested(cls: type, fields: dict[str, tuple[type, bool]]) -> None:
    """Declare nested record fields of a record class defined in another package."""
    _NESTED[cls] = fields


def from_dict(cls: type[T], data: Any) -> T:
    """Build a record of type `cls` from its dict form; RecordError if it does not fit."""
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


def iter_jsonl_dicts(path: str | Path, *, tolerate_torn_tail: bool = False) -> Iterator[dict[str, Any]]:
    """Yield the JSON objects of a JSONL file; RecordError names file:line on a bad line.

    With `tolerate_torn_tail`, a last line without newline that does not parse (a write cut by
    SIGKILL) is skipped with a warning instead of raising: that row is simply redone on resume.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise RecordError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RecordError(f"{path}: not UTF-8 (byte {exc.start})") from None
    lines = text.split("\n")
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            is_tail = i == len(lines) and not text.endswith("\n")
            if tolerate_torn_tail and is_tail:
                log.warning("%s:%d: ignoring a torn last line (interrupted write)", path, i)
                return
            raise RecordError(f"{path}:{i}: malformed JSON ({exc.msg})") from None
        if not isinstance(obj, dict):
            raise RecordError(f"{path}:{i}: expected a JSON object")
        yield obj


def read_jsonl(path: str | Path, cls: type[T], *, tolerate_torn_tail: bool = False) -> list[T]:
    """Read a JSONL file of records of type `cls`; RecordError names file:line on a bad line."""
    out: list[T] = []
    for i, obj in enumerate(iter_jsonl_dicts(path, tolerate_torn_tail=tolerate_torn_tail), 1):
        try:
            out.append(from_dict(cls, obj))
        except RecordError as exc:
            raise RecordError(f"{path}: record {i}: {exc}") from None
    return out
