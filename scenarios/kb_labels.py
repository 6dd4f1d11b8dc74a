"""Map a set's labels (document ids, answer spans, or chunk ids) to the chunk ids the index holds.

One rule, in order, per label of an item:
1. `chunk`: the label is a chunk id of the index -> that chunk;
2. `span`: a document id with answer offsets -> the chunks of that document holding the whole
   span (`span_overlap`: none holds it whole, the chunks it overlaps);
3. `answer`: a document id without offsets -> the document's chunks that contain a gold answer
   (matched case-insensitively and whatever the spacing: NQ's "8 , 2014" holds "8, 2014");
4. `document`: otherwise every chunk of the document.
A label that is neither a document nor a chunk id, or a document with no chunk, is an error naming
the item; nothing is dropped silently. Unanswerable items have no label and map to nothing.
The mapping is written to the run dir (`labels.jsonl`, one row per label) by the study.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from lorarag.core.errors import RecordError
from lorarag.rag.records import Chunk
from lorarag.scenarios.kb_records import KBCorpus, QAItem

_TOKEN = re.compile(r"\w+|[^\w\s]", re.UNICODE)


def answer_pattern(answer: str) -> re.Pattern | None:
    """A case-insensitive pattern for `answer` that allows any spacing between its tokens (and
    none between punctuation), bounded by word edges; None for an answer without tokens."""
    toks = _TOKEN.findall(answer)
    if not toks:
        return None
    body = r"\s*".join(re.escape(t) for t in toks)
    # a word edge that a CJK character also makes: Chinese writes no space, so "为2.8亿元" holds 2.8亿元
    lead = rf"(?<![^\W{_CJK_RANGE}])" if toks[0][0].isalnum() and not _cjk(toks[0]) else ""
    tail = rf"(?![^\W{_CJK_RANGE}])" if toks[-1][-1].isalnum() and not _cjk(toks[-1]) else ""
    return re.compile(lead + body + tail, re.IGNORECASE)


_CJK_RANGE = "\u3400-\u9fff"


def _cjk(tok: str) -> bool:
    return any("\u3400" <= ch <= "\u9fff" for ch in tok)


def find_answer(text: str, answers: Sequence[str]) -> tuple[str, re.Match] | None:
    """(the answer, its first match) for the first gold answer found in `text`, else None."""
    for a in answers:
        pat = answer_pattern(a)
        m = pat.search(text) if pat else None
        if m:
            return a, m
    return None


@dataclass(frozen=True)
class LabelMapping:
    """One label of one item and the chunks it maps to (a row of `labels.jsonl`)."""

    qid: str
    label: str  # the document or chunk id as the set gives it
    start: int | None  # the set's answer span, in its own text
    end: int | None
    rule: str  # chunk | span | span_overlap | answer | document
    chunk_ids: tuple[str, ...]


def map_labels(items: Sequence[QAItem], corpus: KBCorpus) -> tuple[list[QAItem], list[LabelMapping]]:
    """Each item with `relevant_ids` = the chunk ids its labels map to, and the mapping rows."""
    by_id = {c.chunk_id: c for c in corpus.chunks}
    by_doc: dict[str, list[Chunk]] = {}
    for c in corpus.chunks:
        by_doc.setdefault(c.doc_id, []).append(c)
    docs = {d.doc_id for d in corpus.documents}
    out, rows = [], []
    for it in items:
        if not it.labels and not it.unanswerable:
            raise RecordError(f"{it.where or it.qid}: no relevant document or chunk")
        ids: list[str] = []
        for lab in it.labels:
            if lab.doc_id in by_id:
                rule, hits = "chunk", [by_id[lab.doc_id]]
            elif lab.doc_id in docs:
                cs = by_doc.get(lab.doc_id, [])
                if not cs:
                    raise RecordError(
                        f"{it.where or it.qid}: document {lab.doc_id!r} holds no chunk (blank, or headings only)"
                    )
                rule, hits = _in_document(it, lab.start, lab.end, corpus.body_offset.get(lab.doc_id, 0), cs)
            else:
                raise RecordError(f"{it.where or it.qid}: {lab.doc_id!r} is neither a document nor a chunk of the corpus")
            rows.append(LabelMapping(it.qid, lab.doc_id, lab.start, lab.end, rule, tuple(c.chunk_id for c in hits)))
            ids += [c.chunk_id for c in hits]
        out.append(replace(it, relevant_ids=tuple(dict.fromkeys(ids))))
    return out, rows


def _in_document(it: QAItem, start: int | None, end: int | None, offset: int, cs: list[Chunk]) -> tuple[str, list[Chunk]]:
    if start is not None and end is not None:
        s, e = start + offset, end + offset
        hold = [c for c in cs if c.start <= s and e <= c.end]
        if hold:
            return "span", hold
        over = [c for c in cs if c.start < e and s < c.end]
        if over:
            return "span_overlap", over
        raise RecordError(f"{it.where or it.qid}: answer span {start}-{end} lies outside every chunk of {cs[0].doc_id!r}")
    hold = [c for c in cs if find_answer(c.text, it.answers)]
    return ("answer", hold) if hold else ("document", cs)
