"""Records of a user's knowledge base and QA set, and the strict readers their loaders share.

A value is checked for its type and never coerced: a string where a list is expected, a number
where a string is expected, an empty answer, a key the format does not have — each is a
RecordError naming the file, the line (or the JSON path) and the field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lorarag.core.errors import RecordError
from lorarag.core.inputs import loads_json, read_input_text
from lorarag.rag.records import Chunk, Document


@dataclass(frozen=True)
class Label:
    """One relevance label as the set gives it: a document (or chunk) id, with the answer's span
    in that document's own text where the set has offsets (SQuAD, BEIR `answer_start`)."""

    doc_id: str
    start: int | None = None
    end: int | None = None


@dataclass(frozen=True)
class Conflict:
    """A real passage of the set that asserts a wrong answer (ConflictNQ's fabricated passages)."""

    text: str
    answer: str


@dataclass(frozen=True)
class QAItem:
    """A labelled question over a corpus: gold answers and the KB chunk ids that hold them.

    `relevant_ids` are chunk ids of the index, filled by scenarios/kb_labels.map_labels from
    `labels` (a set's document ids and spans); `wordings` are other wordings of the same question.
    """

    qid: str
    question: str
    answers: tuple[str, ...]
    relevant_ids: tuple[str, ...] = ()
    language: str = "en"
    labels: tuple[Label, ...] = ()
    wordings: tuple[str, ...] = ()
    unanswerable: bool = False  # answered nowhere in the corpus (SQuAD v2 `is_impossible`)
    conflicts: tuple[Conflict, ...] = ()
    where: str = ""  # file:line (or JSON path) of the item in its set, for error messages
    # the unit the item's errors cluster in (an organisation, an article): items sharing one fall in
    # the same split and are resampled together; "" = the document of its first relevant chunk
    cluster: str = ""

    @property
    def all_wordings(self) -> tuple[str, ...]:
        """The question first, then its other wordings."""
        return (self.question, *self.wordings)


@dataclass(frozen=True)
class KBCorpus:
    """The documents of a knowledge base and the chunks the index holds."""

    documents: tuple[Document, ...]
    chunks: tuple[Chunk, ...]
    # doc id -> where the set's own text starts in Document.text (after a title line): the
    # offset a set's answer spans are shifted by
    body_offset: dict[str, int]
    problems: tuple[str, ...] = ()  # files a folder ingest left out, with the reason


# ---------------------------------------------------------------------------------------
# Strict readers.
# ---------------------------------------------------------------------------------------
_TYPE = {str: "a string", bool: "true or false", int: "an integer", list: "a list", dict: "an object"}


def _type_name(v: Any) -> str:
    return {
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
        list: "a list",
        dict: "an object",
        type(None): "null",
    }.get(type(v), type(v).__name__)


def field(obj: dict, key: str, kind: type, where: str, *, required: bool = True, empty: bool = False) -> Any:
    """`obj[key]` checked to be of `kind` (bool is not an int; an empty string or list is an error
    unless `empty`); None when absent and not `required`."""
    if key not in obj or (obj[key] is None and not required):
        if required:
            raise RecordError(f"{where}: {key}: required field missing")
        return None
    v = obj[key]
    ok = isinstance(v, kind) and not (kind is int and isinstance(v, bool))
    if not ok:
        raise RecordError(f"{where}: {key}: expected {_TYPE.get(kind, kind.__name__)}, got {_type_name(v)}")
    if not empty and kind in (str, list) and (not v or (kind is str and not v.strip())):
        raise RecordError(f"{where}: {key}: empty")
    return v


def str_list(obj: dict, key: str, where: str, *, required: bool = True, empty: bool = False) -> tuple[str, ...]:
    """`obj[key]` as a list of non-empty strings (a lone string is an error, not a one-item list)."""
    v = field(obj, key, list, where, required=required, empty=empty)
    if v is None:
        return ()
    for i, x in enumerate(v):
        if not isinstance(x, str):
            raise RecordError(f"{where}: {key}[{i}]: expected a string, got {_type_name(x)}")
        if not x.strip():
            raise RecordError(f"{where}: {key}[{i}]: empty")
    return tuple(v)


def int_list(obj: dict, key: str, where: str) -> tuple[int, ...] | None:
    """`obj[key]` as a list of non-negative integers, or None when absent."""
    v = field(obj, key, list, where, required=False, empty=True)
    if v is None:
        return None
    for i, x in enumerate(v):
        if not isinstance(x, int) or isinstance(x, bool) or x < 0:
            raise RecordError(f"{where}: {key}[{i}]: expected a non-negative integer, got {x!r}")
    return tuple(v)


def no_other_keys(obj: dict, allowed: set[str], where: str) -> None:
    """RecordError naming the first key of `obj` the format does not have."""
    extra = sorted(set(obj) - allowed)
    if extra:
        raise RecordError(f"{where}: {extra[0]}: unknown field (known: {', '.join(sorted(allowed))})")


def existing(path: str | Path, what: str) -> Path:
    """`path`, or a one-line RecordError when it does not exist."""
    p = Path(path)
    if not p.exists():
        raise RecordError(f"{p}: {what} not found")
    return p


def jsonl_objects(path: str | Path, what: str = "JSONL file") -> Iterator[tuple[str, dict]]:
    """(`file:line`, object) for every non-blank line; RecordError on a line that is not a JSON object
    (and, before any read, on a path that is not a regular file: core/inputs.py)."""
    text = read_input_text(path, what)
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{i}"
        try:
            obj = loads_json(line, where)
        except json.JSONDecodeError as exc:
            raise RecordError(f"{where}: malformed JSON ({exc.msg})") from None
        if not isinstance(obj, dict):
            raise RecordError(f"{where}: expected a JSON object, got {_type_name(obj)}")
        yield where, obj


def read_json(path: str | Path, what: str = "JSON file") -> Any:
    """A whole JSON file; RecordError with the line of a syntax error."""
    text = read_input_text(path, what)
    try:
        return loads_json(text, str(path))
    except json.JSONDecodeError as exc:
        raise RecordError(f"{path}:{exc.lineno}: malformed JSON ({exc.msg})") from None


_NORM = re.compile(r"\s+")


def norm_text(text: str) -> str:
    """`text` lower-cased with runs of whitespace as one space: what "the same wording" means."""
    return _NORM.sub(" ", text).strip().casefold()


def answer_text(v: str, where: str, key: str) -> str:
    """`v` when it can be an answer: at least one letter or digit (an answer of punctuation alone
    matches everywhere or nowhere)."""
    if not any(ch.isalnum() for ch in v):
        raise RecordError(f"{where}: {key}: {v!r} has no letter or digit (empty or punctuation only)")
    return v


def answers_of(obj: dict, key: str, where: str, *, required: bool = True, empty: bool = False) -> tuple[str, ...]:
    """`obj[key]` as a list of answers (see `str_list` and `answer_text`)."""
    out = str_list(obj, key, where, required=required, empty=empty)
    for i, a in enumerate(out):
        answer_text(a, where, f"{key}[{i}]")
    return out
