"""Ingest: walk the corpus folders, parse each file into a `Document`, report every bad file.

Readers are chosen by file extension through `READERS`. A file that cannot be used (corrupt
PDF, empty file, binary data named `.md`, invalid UTF-8, unreadable, unsupported extension,
Markdown with headings and no text) never stops the ingest: it is listed in the `IngestReport`
with a one-line reason and the rest of the corpus goes on; so is everything the walk does not
open (rag/ingest/walk.py: FIFOs and devices, unreadable folders, symlinks out of the corpus).
Text files with a UTF-8, UTF-16 or UTF-32 byte-order mark are decoded accordingly. Document ids
are paths relative to the corpus root (POSIX separators), so they are the same on every machine
and in every checkout. `IngestReport.sources` holds the sha256 of every readable file's bytes:
the index keeps it to tell when the corpus changed since it was built (`corpus_fingerprint`).
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lorarag.core import inputs
from lorarag.core.errors import ConfigError, RecordError
from lorarag.core.hashing import sha256_file
from lorarag.rag.config import CorpusConfig
from lorarag.rag.ingest.walk import Entry, walk_corpus
from lorarag.rag.records import Document

log = logging.getLogger(__name__)


class IngestError(ConfigError):
    """The corpus cannot be indexed (nothing usable, or a bad file under `strict`)."""


class BadFile(ValueError):
    """Raised by a reader: the file cannot be used; the message is the one-line reason."""


@dataclass(frozen=True)
class Problem:
    """One file that was left out of the corpus, and why."""

    source: str  # path relative to its corpus root
    reason: str


@dataclass(frozen=True)
class IngestReport:
    """What an ingest produced: the parsed documents and the files it had to leave out."""

    documents: tuple[Document, ...]
    problems: tuple[Problem, ...]
    sources: tuple[tuple[str, str], ...] = ()  # (id, sha256 of the bytes) of every file read

    def summary(self) -> str:
        """One line: how many documents were read and how many files were left out."""
        return f"{len(self.documents)} document(s) read, {len(self.problems)} file(s) left out"


# ---------------------------------------------------------------------------------------
# Readers: path -> (text, page start offsets). Each raises BadFile with a one-line reason.
# ---------------------------------------------------------------------------------------


def _reason(exc: RecordError, path: Path) -> str:
    """A RecordError of core/inputs.py as a BadFile reason (the report names the file already)."""
    return str(exc).removeprefix(f"{path}: ")


def _read_bytes(path: Path) -> bytes:
    """The file's bytes, refused before any read when it is not a regular file or is over the
    one-document cap (core/inputs.py: the walk checked it, but it may have grown since)."""
    try:
        inputs.check_input_file(path, "corpus file", max_bytes=inputs.MAX_DOCUMENT_BYTES)
    except RecordError as exc:
        raise BadFile(_reason(exc, path)) from None
    try:
        return path.read_bytes()
    except OSError as exc:
        raise BadFile(f"unreadable ({exc.strerror or type(exc).__name__})") from None


# Byte-order marks, longest first (the UTF-32 LE mark starts with the UTF-16 LE one).
_BOMS = ((b"\xff\xfe\x00\x00", "utf-32"), (b"\x00\x00\xfe\xff", "utf-32"), (b"\xff\xfe", "utf-16"), (b"\xfe\xff", "utf-16"))
_HEADING_LINE = re.compile(r"^\s*#{1,6}(\s.*)?$")


def _decode(raw: bytes, path: Path) -> str:
    """Text of a file: by its byte-order mark (UTF-8/16/32), else UTF-8; BadFile otherwise."""
    codec = next((c for bom, c in _BOMS if raw.startswith(bom)), None)
    if codec is not None:
        try:
            return raw.decode(codec)  # the utf-16/utf-32 codecs read and drop the mark
        except UnicodeDecodeError as exc:
            raise BadFile(
                f"invalid {codec.upper()} at byte {exc.start} (it starts with a {codec.upper()} byte-order mark)"
            ) from None
    if b"\x00" in raw[:8192]:
        raise BadFile(f"binary data, not text (named {path.suffix}; UTF-16 needs a byte-order mark)")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise BadFile(f"invalid UTF-8 at byte {exc.start}") from None


def _read_text(path: Path) -> tuple[str, tuple[int, ...]]:
    raw = _read_bytes(path)
    if not raw.strip():
        raise BadFile("empty file")
    text = _decode(raw, path)
    if not text.strip():
        raise BadFile("empty file")
    if all(_HEADING_LINE.match(line) for line in text.splitlines() if line.strip()):
        raise BadFile("only headings, no text to index")
    # One newline convention so offsets are the same on every OS.
    return text.replace("\r\n", "\n").replace("\r", "\n"), ()


def _join_pages(pages: list[str]) -> tuple[str, tuple[int, ...]]:
    """Join page texts with blank lines; return the text and each page's start offset."""
    parts: list[str] = []
    starts: list[int] = []
    pos = 0
    for page in pages:
        starts.append(pos)
        parts.append(page)
        pos += len(page) + 2
    return "\n\n".join(parts), tuple(starts)


def _read_pdf_pypdf(path: Path) -> tuple[str, tuple[int, ...]]:
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    raw = _read_bytes(path)
    if not raw.strip():
        raise BadFile("empty file")
    import io

    try:
        reader = PdfReader(io.BytesIO(raw))
        pages = [(p.extract_text() or "").replace("\r\n", "\n") for p in reader.pages]
    except (PdfReadError, ValueError, KeyError, TypeError, OSError) as exc:
        raise BadFile(f"corrupt PDF ({type(exc).__name__}: {str(exc)[:80]})") from None
    if not any(p.strip() for p in pages):
        raise BadFile(f"PDF without extractable text ({len(pages)} page(s); scanned?)")
    return _join_pages(pages)


def _read_pdf_mineru(path: Path) -> tuple[str, tuple[int, ...]]:
    """Parse with the MinerU CLI (layout-aware, as in the original write-up): Markdown out."""
    exe = shutil.which("mineru")
    if exe is None:
        raise BadFile("pdf_parser=mineru but the `mineru` CLI is not on PATH")
    with tempfile.TemporaryDirectory(prefix="lorarag-mineru-") as out:
        proc = subprocess.run([exe, "-p", str(path), "-o", out], capture_output=True, text=True, timeout=1800)
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1][:120]
            raise BadFile(f"corrupt PDF (mineru exit {proc.returncode}: {last})")
        mds = sorted(Path(out).rglob("*.md"))
        if not mds:
            raise BadFile("mineru produced no Markdown")
        text = mds[0].read_text(encoding="utf-8")
    if not text.strip():
        raise BadFile("PDF without extractable text (mineru)")
    return text, ()  # MinerU merges pages: no page offsets


def _read_docx(path: Path) -> tuple[str, tuple[int, ...]]:
    import zipfile

    from docx import Document as DocxDocument
    from docx.opc.exceptions import PackageNotFoundError
    from lxml.etree import LxmlError

    if not _read_bytes(path).strip():
        raise BadFile("empty file")
    try:
        inputs.check_zip_size(path, "DOCX")  # a zip bomb is refused before python-docx unpacks it
    except RecordError as exc:
        raise BadFile(_reason(exc, path)) from None
    try:
        doc = DocxDocument(str(path))
    except (zipfile.BadZipFile, KeyError, ValueError, PackageNotFoundError, LxmlError) as exc:
        raise BadFile(f"corrupt DOCX ({type(exc).__name__})") from None
    paras: list[str] = []
    for p in doc.paragraphs:
        text = p.text.strip()
        if not text:
            continue
        style = (p.style.name or "") if p.style is not None else ""
        if style.startswith("Heading ") and style[8:].isdigit():  # keep structure as Markdown
            text = "#" * int(style[8:]) + " " + text
        paras.append(text)
    if not paras:
        raise BadFile("empty document")
    if all(p.startswith("#") for p in paras):
        raise BadFile("only headings, no text to index")
    return "\n\n".join(paras), ()


def _read_html(path: Path) -> tuple[str, tuple[int, ...]]:
    import trafilatura

    raw = _read_bytes(path)
    if not raw.strip():
        raise BadFile("empty file")
    try:
        html: str | bytes = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        html = raw  # not UTF-8: trafilatura reads the page's declared charset
    text = trafilatura.extract(
        html, output_format="markdown", include_comments=False, include_tables=True, favor_recall=True
    )
    if not text or not text.strip():
        raise BadFile("no main text found in HTML")
    return text.replace("\r\n", "\n"), ()


def _read_pdf(parser: str) -> Callable[[Path], tuple[str, tuple[int, ...]]]:
    if parser == "mineru" or (parser == "auto" and shutil.which("mineru")):
        return _read_pdf_mineru
    return _read_pdf_pypdf


READERS: dict[str, Callable[[Path], tuple[str, tuple[int, ...]]]] = {
    ".md": _read_text,
    ".markdown": _read_text,
    ".txt": _read_text,
    ".docx": _read_docx,
    ".html": _read_html,
    ".htm": _read_html,
}


# ---------------------------------------------------------------------------------------
# Walking the corpus
# ---------------------------------------------------------------------------------------


def read_file(path: Path, doc_id: str, pdf_parser: str = "auto") -> Document:
    """Parse one file into a Document; BadFile with a one-line reason if it cannot be used."""
    suffix = path.suffix.lower()
    reader = _read_pdf(pdf_parser) if suffix == ".pdf" else READERS.get(suffix)
    if reader is None:
        raise BadFile(f"unsupported extension {suffix or '(none)'!r}")
    if not path.exists():
        raise BadFile("unreadable (dangling link or vanished file)")
    text, pages = reader(path)
    return Document(doc_id=doc_id, source=doc_id, text=text, page_offsets=pages)


def _sha256(path: Path) -> str:
    try:
        return sha256_file(path)  # in blocks: the file is at most the one-document cap (the walk)
    except OSError as exc:
        return f"unreadable ({exc.strerror or type(exc).__name__})"


def _readable(entry: Entry) -> bool:
    """A regular file one of the readers takes (others cannot change what an index holds)."""
    suffix = entry.path.suffix.lower()
    return entry.reason is None and (suffix == ".pdf" or suffix in READERS)


def _walk(cfg: CorpusConfig) -> list[tuple[str, list[Entry]]]:
    if not cfg.paths:
        raise IngestError("corpus.paths is empty: name at least one folder or file to index")
    for entry in cfg.paths:
        root = Path(entry)
        if not root.exists() and not root.is_symlink():
            raise IngestError(f"corpus path does not exist: {entry}")
    return walk_corpus(cfg)


def corpus_fingerprint(cfg: CorpusConfig) -> tuple[tuple[str, str], ...]:
    """(id, sha256 of the bytes) of every file of the corpus a reader takes, sorted by id."""
    return tuple(sorted((e.doc_id, _sha256(e.path)) for _, entries in _walk(cfg) for e in entries if _readable(e)))


def ingest(cfg: CorpusConfig) -> IngestReport:
    """Read every file under `cfg.paths`; IngestError under `strict` if any file is bad."""
    docs: list[Document] = []
    problems: list[Problem] = []
    sources: list[tuple[str, str]] = []
    seen: dict[str, str] = {}
    for root, entries in _walk(cfg):
        for e in entries:
            if e.doc_id in seen:
                raise IngestError(
                    f"two corpus files share the id {e.doc_id!r} ({seen[e.doc_id]} and {root}); use distinct file names"
                )
            seen[e.doc_id] = root
            if e.reason is not None:
                log.warning("skipping %s: %s", e.doc_id, e.reason)
                problems.append(Problem(e.doc_id, e.reason))
                continue
            if _readable(e):
                sources.append((e.doc_id, _sha256(e.path)))
            try:
                docs.append(read_file(e.path, e.doc_id, cfg.pdf_parser))
            except BadFile as exc:
                log.warning("skipping %s: %s", e.doc_id, exc)
                problems.append(Problem(e.doc_id, str(exc)))
    report = IngestReport(tuple(docs), tuple(problems), tuple(sorted(sources)))
    if cfg.strict and problems:
        raise IngestError(f"strict ingest: {len(problems)} bad file(s), first: {problems[0].source}: {problems[0].reason}")
    return report
