"""Labelled questions from the formats people have: our JSONL, BEIR queries + qrels, SQuAD
v1.1/v2.0, ConflictNQ. Each becomes a `QAItem` with its labels (document or chunk ids, answer
spans where the set has offsets); scenarios/kb_labels.py maps them to the index's chunk ids.

JSONL (one object per line):
    {"id": "q1", "question": "...", "answers": ["..."], "relevant_ids": ["doc or chunk id"],
     "unanswerable": false, "paraphrases": ["another wording"], "language": "en",
     "conflicts": [{"text": "a passage asserting a wrong answer", "answer": "the wrong answer"}]}
`answers` and `relevant_ids` are required and non-empty unless `"unanswerable": true` (then both
must be empty: nothing in the corpus answers it). Any other key is an error.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Callable

from lorarag.core.errors import RecordError
from lorarag.rag.prompt import detect_language
from lorarag.scenarios.config import QuestionSource
from lorarag.scenarios.kb_corpus import conflictnq_rows, squad_articles
from lorarag.scenarios.kb_records import (
    Conflict,
    Label,
    QAItem,
    existing,
    field,
    int_list,
    jsonl_objects,
    no_other_keys,
    str_list,
)

JSONL_KEYS = {"id", "question", "answers", "relevant_ids", "unanswerable", "paraphrases", "language", "conflicts"}
LANGUAGES = ("en", "zh", "fr")


class _Items:
    """QAItems in reading order; a repeated id is an error naming both places."""

    def __init__(self, src: QuestionSource) -> None:
        self.src = src
        self.items: list[QAItem] = []
        self.where: dict[str, str] = {}

    def language(self, question: str, given: str | None = None) -> str:
        if given is not None:
            return given
        return detect_language(question) if self.src.language == "auto" else self.src.language

    def add(self, item: QAItem) -> None:
        if item.qid in self.where:
            raise RecordError(f"{item.where}: id {item.qid!r} repeats ({self.where[item.qid]})")
        self.where[item.qid] = item.where
        self.items.append(item)

    def result(self) -> list[QAItem]:
        if not self.items:
            raise RecordError(f"{self.src.path}: no questions")
        return self.items


def _conflicts(obj: dict, where: str) -> tuple[Conflict, ...]:
    raw = field(obj, "conflicts", list, where, required=False, empty=True) or []
    out = []
    for k, c in enumerate(raw):
        w = f"{where}: conflicts[{k}]"
        if not isinstance(c, dict):
            raise RecordError(f"{w}: expected an object {{text, answer}}")
        no_other_keys(c, {"text", "answer"}, w)
        out.append(Conflict(field(c, "text", str, w), field(c, "answer", str, w)))
    return tuple(out)


def _jsonl(src: QuestionSource) -> list[QAItem]:
    out = _Items(src)
    for where, obj in jsonl_objects(src.path):
        no_other_keys(obj, JSONL_KEYS, where)
        qid = field(obj, "id", str, where)
        where = f"{where} (id {qid})"
        unanswerable = field(obj, "unanswerable", bool, where, required=False) or False
        answers = str_list(obj, "answers", where, empty=unanswerable)
        rel = str_list(obj, "relevant_ids", where, empty=unanswerable)
        if unanswerable and (answers or rel):
            raise RecordError(f"{where}: {'answers' if answers else 'relevant_ids'}: must be empty for an "
                              "unanswerable question")
        lang = field(obj, "language", str, where, required=False)
        if lang is not None and lang not in LANGUAGES:
            raise RecordError(f"{where}: language: {lang!r} is not one of {', '.join(LANGUAGES)}")
        q = field(obj, "question", str, where)
        out.add(QAItem(qid, q, answers, language=out.language(q, lang), labels=tuple(Label(r) for r in rel),
                       wordings=str_list(obj, "paraphrases", where, required=False, empty=True),
                       unanswerable=unanswerable, conflicts=_conflicts(obj, where), where=where))
    return out.result()


def read_qrels(path: Path) -> dict[str, list[tuple[str, str]]]:
    """BEIR qrels: query id -> [(corpus id, `file:line`)] of the rows with a positive score."""
    path = existing(path, "qrels file")
    out: dict[str, list[tuple[str, str]]] = {}
    with path.open(encoding="utf-8-sig", newline="") as fh:
        for i, row in enumerate(csv.reader(fh, delimiter="\t"), 1):
            where = f"{path}:{i}"
            if not row or not "".join(row).strip():
                continue
            if len(row) != 3:
                raise RecordError(f"{where}: expected 3 tab-separated fields (query-id, corpus-id, score), "
                                  f"got {len(row)}")
            if i == 1 and row[2] == "score":  # the header
                continue
            try:
                score = int(row[2])
            except ValueError:
                raise RecordError(f"{where}: score: expected an integer, got {row[2]!r}") from None
            if score > 0:
                out.setdefault(row[0], []).append((row[1], where))
    return out


def _beir(src: QuestionSource) -> list[QAItem]:
    folder = existing(src.path, "BEIR folder")
    qrels = read_qrels(folder / "qrels" / f"{src.split}.tsv")
    out = _Items(src)
    seen: set[str] = set()
    for where, obj in jsonl_objects(folder / "queries.jsonl"):
        qid = field(obj, "_id", str, where)
        seen.add(qid)
        if qid not in qrels:
            continue  # not in this split
        where = f"{where} (id {qid})"
        meta = field(obj, "metadata", dict, where, required=False, empty=True) or {}
        mw = f"{where}: metadata"
        answers = str_list(meta, "answers", mw, required=False)
        if "answer" in meta:
            if answers:
                raise RecordError(f"{mw}: both `answer` and `answers`: give one")
            answers = (field(meta, "answer", str, mw),)
        starts = int_list(meta, "answer_start", mw)
        docs = [d for d, _ in qrels[qid]]
        if starts is not None and len(starts) != len(answers):
            raise RecordError(f"{mw}: answer_start: {len(starts)} offsets for {len(answers)} answers")
        if starts is not None and len(set(docs)) == 1:  # offsets into the one relevant document
            labels = tuple(Label(docs[0], s, s + len(a)) for a, s in zip(answers, starts))
        else:
            labels = tuple(Label(d) for d in dict.fromkeys(docs))
        q = field(obj, "text", str, where)
        out.add(QAItem(qid, q, answers, language=out.language(q), labels=labels, where=where))
    for qid, rows in qrels.items():
        if qid not in seen:
            raise RecordError(f"{rows[0][1]}: query-id {qid!r} is not in {folder / 'queries.jsonl'}")
    return out.result()


def _squad(src: QuestionSource) -> list[QAItem]:
    out = _Items(src)
    for pwhere, par in squad_articles(src.path):
        context = field(par, "context", str, pwhere)
        for k, qa in enumerate(field(par, "qas", list, pwhere, empty=True)):
            where = f"{pwhere}.qas[{k}]"
            if not isinstance(qa, dict):
                raise RecordError(f"{where}: expected an object")
            qid = field(qa, "id", str, where)
            where = f"{where} (id {qid})"
            impossible = field(qa, "is_impossible", bool, where, required=False) or False
            raw = field(qa, "answers", list, where, empty=impossible)
            if impossible and raw:
                raise RecordError(f"{where}: answers: must be empty when is_impossible is true")
            labels, answers = [], []
            for j, a in enumerate(raw):
                aw = f"{where}: answers[{j}]"
                if not isinstance(a, dict):
                    raise RecordError(f"{aw}: expected an object {{text, answer_start}}")
                text, start = field(a, "text", str, aw), field(a, "answer_start", int, aw)
                if context[start:start + len(text)] != text:
                    raise RecordError(f"{aw}: answer_start {start} does not point at {text!r} in the context")
                labels.append(Label(par["_doc"], start, start + len(text)))
                answers.append(text)
            q = field(qa, "question", str, where)
            out.add(QAItem(qid, q, tuple(dict.fromkeys(answers)), language=out.language(q),
                           labels=tuple(dict.fromkeys(labels)), unanswerable=impossible, where=where))
    return out.result()


def _conflictnq(src: QuestionSource) -> list[QAItem]:
    out = _Items(src)
    for where, r in conflictnq_rows(src.path):
        qid = r["id"]
        where = f"{where} (id {qid})"
        raw_q = field(r, "question", str, where)
        q = field(r, "cleaned_question", str, where, required=False) or raw_q
        wrong = field(r, "fake_short_answer", str, where)
        out.add(QAItem(qid, q, (field(r, "real_short_answer", str, where),), language=out.language(q),
                       labels=tuple(Label(f"{qid}/real{k}") for k in range(len(r["real_passages"]))),
                       wordings=(raw_q,) if raw_q != q else (),
                       conflicts=tuple(Conflict(p["passage"], wrong) for p in r["fake_passages"]), where=where))
    return out.result()


READERS: dict[str, Callable[[QuestionSource], list[QAItem]]] = {
    "jsonl": _jsonl, "beir": _beir, "squad": _squad, "conflictnq": _conflictnq}


def load_questions(src: QuestionSource) -> list[QAItem]:
    """The labelled questions named by `src` (labels not yet mapped to chunk ids)."""
    return READERS[src.kind](src)
