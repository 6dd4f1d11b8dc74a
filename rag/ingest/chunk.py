"""Chunking: cut Documents into Chunks with stable ids and full provenance.

Two chunkers, chosen by `ChunkerConfig.kind` through `CHUNKERS`:
- `paragraph`: blank-line paragraphs merged greedily up to `chunk_size` characters; the next
  chunk repeats the trailing paragraphs that fit in `chunk_overlap` (the 500/50 recipe).
- `heading`: one chunk per Markdown section (a heading line up to the next heading); each
  keeps its heading path, e.g. ("第二章 车辆和驾驶人", "第一节 机动车").
Both split an over-long paragraph into windows of at most `chunk_size` characters with
`chunk_overlap` characters of overlap, cutting preferably after sentence punctuation
(。！？； . ! ? ;), then after a comma or space. Cuts are at code-point offsets of the parsed
text, so a CJK character is never split, and `chunk.text == doc.text[chunk.start:chunk.end]`.

The heading path of a chunk holds the `##`-and-deeper headings in force at its first body
paragraph (the `#` title is the document itself). Chunk ids hash (doc id, chunker params,
offsets, text): same corpus and parameters => same ids on every run and machine.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import re
from collections.abc import Callable

from lorarag.rag.config import ChunkerConfig
from lorarag.rag.records import Chunk, Document

_PARA_BREAK = re.compile(r"\n[ \t\u3000]*\n\s*")
_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t#]*$", re.MULTILINE)
_SENTENCE_END = "。！？；!?;.…"
_SOFT_END = "，、,：: \t\n\u3000）)】」』"

Span = tuple[int, int]  # [start, end) character offsets into Document.text


def chunk_id(doc_id: str, params: dict, start: int, end: int, text: str) -> str:
    """Stable id: sha256 over a canonical JSON of (doc id, chunker params, offsets, text)."""
    payload = json.dumps([doc_id, params, start, end, text], ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:20]


def _strip(text: str, start: int, end: int) -> Span:
    """Shrink [start, end) so it neither starts nor ends with whitespace."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def paragraphs(text: str, lo: int = 0, hi: int | None = None) -> list[Span]:
    """Non-blank paragraphs (blank-line separated) of text[lo:hi] as stripped spans."""
    hi = len(text) if hi is None else hi
    spans: list[Span] = []
    pos = lo
    for m in _PARA_BREAK.finditer(text, lo, hi):
        s, e = _strip(text, pos, m.start())
        if e > s:
            spans.append((s, e))
        pos = m.end()
    s, e = _strip(text, pos, hi)
    if e > s:
        spans.append((s, e))
    return spans


def _best_cut(text: str, lo: int, hi: int) -> int:
    """Where to end a window in text[lo:hi]: after the last sentence end in its second half,
    else after the last comma/space there, else at hi (a plain code-point boundary)."""
    floor = lo + (hi - lo) // 2
    for marks in (_SENTENCE_END, _SOFT_END):
        for i in range(hi - 1, floor - 1, -1):
            if text[i] in marks:
                return i + 1
    return hi


def split_long(text: str, start: int, end: int, size: int, overlap: int) -> list[Span]:
    """Cut one over-long span into windows of <= size characters overlapping by <= overlap."""
    spans: list[Span] = []
    pos = start
    while end - pos > size:
        cut = _best_cut(text, pos, pos + size)
        spans.append(_strip(text, pos, cut))
        nxt = max(cut - overlap, pos + 1)
        # Start the overlap at a sentence start when one lies inside it.
        for i in range(nxt, cut):
            if text[i] in _SENTENCE_END:
                nxt = i + 1 if i + 1 < cut else nxt
                break
        pos = _strip(text, nxt, end)[0]
    spans.append(_strip(text, pos, end))
    return [s for s in spans if s[1] > s[0]]


def pack(text: str, paras: list[Span], size: int, overlap: int) -> list[Span]:
    """Merge consecutive paragraphs up to `size` characters; carry trailing paragraphs that
    fit in `overlap` into the next chunk; split paragraphs longer than `size`."""
    pieces: list[Span] = []
    for s, e in paras:
        pieces.extend(split_long(text, s, e, size, overlap) if e - s > size else [(s, e)])
    chunks: list[Span] = []
    cur: list[Span] = []
    for piece in pieces:
        if cur and piece[1] - cur[0][0] > size:
            chunks.append((cur[0][0], cur[-1][1]))
            keep: list[Span] = []
            for p in reversed(cur):  # trailing paragraphs within the overlap budget
                if cur[-1][1] - p[0] > overlap or piece[1] - p[0] > size:
                    break
                keep.insert(0, p)
            cur = keep if keep != cur else []
        cur.append(piece)
    if cur:
        chunks.append((cur[0][0], cur[-1][1]))
    return chunks


class _Headings:
    """The Markdown headings of one document, to look up the path in force at an offset."""

    def __init__(self, text: str) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.paths: list[tuple[str, ...]] = []
        stack: list[tuple[int, str]] = []  # (level, title)
        for m in _HEADING.finditer(text):
            level = len(m.group(1))
            while stack and stack[-1][0] >= level:
                stack.pop()
            if level >= 2:
                stack.append((level, m.group(2).strip()))
            self.starts.append(m.start())
            self.ends.append(m.end())
            self.paths.append(tuple(t for _, t in stack))

    def is_heading(self, span: Span) -> bool:
        i = bisect.bisect_left(self.starts, span[0])
        return i < len(self.starts) and self.starts[i] == span[0] and self.ends[i] >= span[1]

    def path_at(self, offset: int) -> tuple[str, ...]:
        i = bisect.bisect_right(self.starts, offset) - 1
        return self.paths[i] if i >= 0 else ()


class Chunker:
    """Base: turn a Document into Chunks; subclasses choose the spans."""

    def __init__(self, cfg: ChunkerConfig) -> None:
        self.cfg = cfg
        self.params = cfg.model_dump(mode="json")

    def spans(self, text: str, heads: _Headings) -> list[Span]:
        raise NotImplementedError

    def chunk(self, doc: Document) -> list[Chunk]:
        """All chunks of one document, in text order."""
        heads = _Headings(doc.text)
        out: list[Chunk] = []
        for start, end in self.spans(doc.text, heads):
            body = [p for p in paragraphs(doc.text, start, end) if not heads.is_heading(p)]
            if not body:  # a heading with nothing under it is not worth retrieving
                continue
            text = doc.text[start:end]
            page = bisect.bisect_right(doc.page_offsets, start) if doc.page_offsets else None
            out.append(
                Chunk(
                    chunk_id=chunk_id(doc.doc_id, self.params, start, end, text),
                    doc_id=doc.doc_id,
                    source=doc.source,
                    text=text,
                    start=start,
                    end=end,
                    heading_path=heads.path_at(body[0][0]),
                    page=page,
                )
            )
        return out

    def chunk_all(self, docs: list[Document] | tuple[Document, ...]) -> list[Chunk]:
        """Chunks of many documents, in document order."""
        return [c for d in docs for c in self.chunk(d)]


class ParagraphChunker(Chunker):
    """Blank-line paragraphs merged up to chunk_size with chunk_overlap (headings included)."""

    def spans(self, text: str, heads: _Headings) -> list[Span]:
        return pack(text, paragraphs(text), self.cfg.chunk_size, self.cfg.chunk_overlap)


class HeadingChunker(Chunker):
    """One chunk per Markdown section; over-long sections are packed like `paragraph`."""

    def spans(self, text: str, heads: _Headings) -> list[Span]:
        bounds = [0, *heads.starts, len(text)]
        out: list[Span] = []
        for lo, hi in zip(bounds, bounds[1:]):
            s, e = _strip(text, lo, hi)
            if e <= s:
                continue
            if e - s <= self.cfg.chunk_size:
                out.append((s, e))
            else:
                out.extend(pack(text, paragraphs(text, s, e), self.cfg.chunk_size, self.cfg.chunk_overlap))
        return out


CHUNKERS: dict[str, Callable[[ChunkerConfig], Chunker]] = {"paragraph": ParagraphChunker, "heading": HeadingChunker}


def make_chunker(cfg: ChunkerConfig) -> Chunker:
    """The chunker named by `cfg.kind`."""
    return CHUNKERS[cfg.kind](cfg)
