"""Labelled questions from the formats people have: our JSONL, BEIR queries + qrels, SQuAD
v1.1/v2.0, ConflictNQ. Each becomes a `QAItem` with its labels (document or chunk ids, answer
spans where the set has offsets); scenarios/kb_labels.py maps them to the index's chunk ids.

JSONL (one object per line):
    {"id": "q1", "question": "...", "answers": ["..."], "relevant_ids": ["doc or chunk id"],
     "unanswerable": false, "paraphrases": ["another wording"], "language": "en",
     "conflicts": [{"text": "a passage asserting a wrong answer", "answer": "the wrong answer"}],
     "cluster": "the entity or article the question is about"}
`answers` and `relevant_ids` are required and non-empty unless `"unanswerable": true` (then both
must be empty: nothing in the corpus answers it). Questions sharing a `cluster` (optional: an
organisation, an article) fall in the same split and are resampled together. Any other key is an error.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Sequence
from pathlib import Path

from lorarag.core.errors import RecordError
from lorarag.core.inputs import check_input_dir, read_input_text
from lorarag.rag.prompt import detect_language
from lorarag.scenarios.config import QuestionSource
from lorarag.scenarios.kb_corpus import conflictnq_rows, squad_articles
from lorarag.scenarios.kb_records import (
    Conflict,
    KBCorpus,
    Label,
    QAItem,
    answer_text,
    answers_of,
    field,
    int_list,
    jsonl_objects,
    no_other_keys,
    norm_text,
    str_list,
)

JSONL_KEYS = {"id", "question", "answers", "relevant_ids", "unanswerable", "paraphrases", "language", "conflicts", "cluster"}
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
        out.append(Conflict(field(c, "text", str, w), answer_text(field(c, "answer", str, w), w, "answer")))
    return tuple(out)


def _wordings(question: str, others: tuple[str, ...], where: str, key: str = "paraphrases") -> tuple[str, ...]:
    """`others` when each is a wording of its own: one equal to the question or to an earlier one
    (case and whitespace aside) would count one wording twice."""
    seen = {norm_text(question): "the question"}
    for i, w in enumerate(others):
        if norm_text(w) in seen:
            raise RecordError(f"{where}: {key}[{i}]: {w!r} is the same wording as {seen[norm_text(w)]}")
        seen[norm_text(w)] = f"{key}[{i}]"
    return others


def _check_conflicts(answers: tuple[str, ...], conflicts: tuple[Conflict, ...], where: str, key: str = "conflicts") -> None:
    """A conflict passage must assert a wrong answer: one whose answer is a gold answer would be a
    factual-error item asserting the truth."""
    gold = {norm_text(a) for a in answers}
    for k, c in enumerate(conflicts):
        if norm_text(c.answer) in gold:
            raise RecordError(f"{where}: {key}[{k}].answer: {c.answer!r} is a gold answer (a conflict asserts a wrong one)")


def _jsonl(src: QuestionSource) -> list[QAItem]:
    out = _Items(src)
    for where, obj in jsonl_objects(src.path, "questions file"):
        no_other_keys(obj, JSONL_KEYS, where)
        qid = field(obj, "id", str, where)
        where = f"{where} (id {qid})"
        unanswerable = field(obj, "unanswerable", bool, where, required=False) or False
        answers = answers_of(obj, "answers", where, empty=unanswerable)
        rel = str_list(obj, "relevant_ids", where, empty=unanswerable)
        if unanswerable and (answers or rel):
            raise RecordError(
                f"{where}: {'answers' if answers else 'relevant_ids'}: must be empty for an unanswerable question"
            )
        lang = field(obj, "language", str, where, required=False)
        if lang is not None and lang not in LANGUAGES:
            raise RecordError(f"{where}: language: {lang!r} is not one of {', '.join(LANGUAGES)}")
        q = field(obj, "question", str, where)
        conflicts = _conflicts(obj, where)
        if unanswerable and conflicts:
            raise RecordError(f"{where}: conflicts: an unanswerable question has no truth to contradict")
        _check_conflicts(answers, conflicts, where)
        wordings = _wordings(q, str_list(obj, "paraphrases", where, required=False, empty=True), where)
        cluster = field(obj, "cluster", str, where, required=False) or ""
        out.add(
            QAItem(
                qid,
                q,
                answers,
                language=out.language(q, lang),
                labels=tuple(Label(r) for r in rel),
                wordings=wordings,
                unanswerable=unanswerable,
                conflicts=conflicts,
                where=where,
                cluster=cluster,
            )
        )
    return out.result()


def read_qrels(path: Path) -> dict[str, list[tuple[str, str]]]:
    """BEIR qrels: query id -> [(corpus id, `file:line`)] of the rows with a positive score."""
    text = read_input_text(path, "qrels file")
    out: dict[str, list[tuple[str, str]]] = {}
    # rows of the decoded text (a byte that is not UTF-8 was refused with its line)
    for i, row in enumerate(csv.reader(io.StringIO(text, newline=""), delimiter="\t"), 1):
        where = f"{path}:{i}"
        if not row or not "".join(row).strip():
            continue
        if len(row) != 3:
            raise RecordError(f"{where}: expected 3 tab-separated fields (query-id, corpus-id, score), got {len(row)}")
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
    folder = check_input_dir(src.path, "BEIR folder")
    qrels = read_qrels(folder / "qrels" / f"{src.split}.tsv")
    out = _Items(src)
    seen: set[str] = set()
    for where, obj in jsonl_objects(folder / "queries.jsonl", "BEIR queries file"):
        qid = field(obj, "_id", str, where)
        seen.add(qid)
        if qid not in qrels:
            continue  # not in this split
        where = f"{where} (id {qid})"
        meta = field(obj, "metadata", dict, where, required=False, empty=True) or {}
        mw = f"{where}: metadata"
        answers = answers_of(meta, "answers", mw, required=False)
        if "answer" in meta:
            if answers:
                raise RecordError(f"{mw}: both `answer` and `answers`: give one")
            answers = (answer_text(field(meta, "answer", str, mw), mw, "answer"),)
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
                text, start = answer_text(field(a, "text", str, aw), aw, "text"), field(a, "answer_start", int, aw)
                if context[start : start + len(text)] != text:
                    raise RecordError(f"{aw}: answer_start {start} does not point at {text!r} in the context")
                labels.append(Label(par["_doc"], start, start + len(text)))
                answers.append(text)
            q = field(qa, "question", str, where)
            out.add(
                QAItem(
                    qid,
                    q,
                    tuple(dict.fromkeys(answers)),
                    language=out.language(q),
                    labels=tuple(dict.fromkeys(labels)),
                    unanswerable=impossible,
                    where=where,
                )
            )
    return out.result()


def _conflictnq(src: QuestionSource) -> list[QAItem]:
    out = _Items(src)
    for where, r in conflictnq_rows(src.path):
        qid = r["id"]
        where = f"{where} (id {qid})"
        raw_q = field(r, "question", str, where)
        q = field(r, "cleaned_question", str, where, required=False) or raw_q
        real = answer_text(field(r, "real_short_answer", str, where), where, "real_short_answer")
        wrong = answer_text(field(r, "fake_short_answer", str, where), where, "fake_short_answer")
        if norm_text(wrong) == norm_text(real):
            raise RecordError(f"{where}: fake_short_answer: {wrong!r} is the real short answer")
        reals = {norm_text(p["passage"]) for p in r["real_passages"]}
        same = next((k for k, p in enumerate(r["fake_passages"]) if norm_text(p["passage"]) in reals), None)
        if same is not None:
            raise RecordError(f"{where}: fake_passages[{same}]: the text of a real passage (it would assert the truth)")
        out.add(
            QAItem(
                qid,
                q,
                (real,),
                language=out.language(q),
                labels=tuple(Label(f"{qid}/real{k}") for k in range(len(r["real_passages"]))),
                # the raw NQ question is a second wording only where it differs beyond case and spacing
                wordings=(raw_q,) if norm_text(raw_q) != norm_text(q) else (),
                conflicts=tuple(Conflict(p["passage"], wrong) for p in r["fake_passages"]),
                where=where,
            )
        )
    return out.result()


READERS: dict[str, Callable[[QuestionSource], list[QAItem]]] = {
    "jsonl": _jsonl,
    "beir": _beir,
    "squad": _squad,
    "conflictnq": _conflictnq,
}


def check_against_corpus(items: Sequence[QAItem], corpus: KBCorpus) -> None:
    """What only the corpus can tell: an answer offset (BEIR `metadata.answer_start`, SQuAD's
    `answer_start`) must point at one of the item's answers in its document's own text, and a
    conflict passage must not be the text of a document or chunk the item is labelled with (it
    would be a factual-error item asserting the truth). `items` as loaded or label-mapped."""
    docs = {d.doc_id: d.text for d in corpus.documents}
    chunks = {c.chunk_id: c.text for c in corpus.chunks}
    for it in items:
        where = it.where or it.qid
        gold = {norm_text(a) for a in it.answers}
        for k, lab in enumerate(it.labels):
            if lab.start is None or lab.end is None or lab.doc_id not in docs:
                continue
            off = corpus.body_offset.get(lab.doc_id, 0)
            got = docs[lab.doc_id][off + lab.start : off + lab.end]
            if norm_text(got) not in gold:
                raise RecordError(
                    f"{where}: answer_start[{k}]: {lab.start} does not point at an answer in "
                    f"document {lab.doc_id!r} (it reads {got!r})"
                )
        if not it.conflicts:
            continue
        real = {
            norm_text(docs[i][corpus.body_offset.get(i, 0) :]): i for i in (lab.doc_id for lab in it.labels) if i in docs
        }
        real.update({norm_text(docs[i]): i for i in (lab.doc_id for lab in it.labels) if i in docs})
        real.update({norm_text(chunks[i]): i for i in (*it.relevant_ids, *(lab.doc_id for lab in it.labels)) if i in chunks})
        for k, c in enumerate(it.conflicts):
            if norm_text(c.text) in real:
                raise RecordError(
                    f"{where}: conflicts[{k}].text: the text of {real[norm_text(c.text)]!r}, the real "
                    "document (a conflict passage must assert a wrong answer)"
                )


def load_questions(src: QuestionSource) -> list[QAItem]:
    """The labelled questions named by `src` (labels not yet mapped to chunk ids)."""
    return READERS[src.kind](src)
