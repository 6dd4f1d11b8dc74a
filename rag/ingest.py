"""Ingest: walk the corpus folders, parse each file into a `Document`, report every bad file.

Readers are chosen by file extension through `READERS`. A file that cannot be used (corrupt
PDF, empty file, binary data named `.md`, invalid UTF-8, unreadable, unsupported extension)
never stops the ingest: it is listed in the `IngestReport` with a one-line reason and the rest
of the corpus goes on. Document ids are paths relative to the corpus root (POSIX separators),
so they are the same on every machine and in every checkout.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from lorarag.core.errors import ConfigError
from lorarag.rag.config import CorpusConfig
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

    def summary(self) -> str:
        """One line: how many documents were read and how many files were left out."""
        return f"{len(self.documents)} document(s) read, {len(self.problems)} file(s) left out"


# ---------------------------------------------------------------------------------------
# Readers: path -> (text, page start offsets). Each raises BadFile with a one-line reason.
# ---------------------------------------------------------------------------------------


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise BadFile(f"unreadable ({exc.strerror or type(exc).__name__})") from None


def _read_text(path: Path) -> tuple[str, tuple[int, ...]]:
    raw = _read_bytes(path)
    if not raw.strip():
        raise BadFile("empty file")
    if b"\x00" in raw[:8192]:
        raise BadFile(f"binary data, not text (named {path.suffix})")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise BadFile(f"invalid UTF-8 at byte {exc.start}") from None
    if not text.strip():
        raise BadFile("empty file")
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
        proc = subprocess.run([exe, "-p", str(path), "-o", out], capture_output=True, text=True,
                              timeout=1800)
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

    if not _read_bytes(path).strip():
        raise BadFile("empty file")
    try:
        doc = DocxDocument(str(path))
    except (zipfile.BadZipFile, KeyError, ValueError, PackageNotFoundError) as exc:
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
    text = trafilatura.extract(html, output_format="markdown", include_comments=False,
                               include_tables=True, favor_recall=True)
    if not text or not text.strip():
        raise BadFile("no main text found in HTML")
    return text.replace("\r\n", "\n"), ()


def _read_pdf(parser: str) -> Callable[[Path], tuple[str, tuple[int, ...]]]:
    if parser == "mineru" or (parser == "auto" and shutil.which("mineru")):
        return _read_pdf_mineru
    return _read_pdf_pypdf


READERS: dict[str, Callable[[Path], tuple[str, tuple[int, ...]]]] = {
    ".md": _read_text, ".markdown": _read_text, ".txt": _read_text,
    ".docx": _read_docx, ".html": _read_html, ".htm": _read_html,
}


# ---------------------------------------------------------------------------------------
# Walking the corpus
# ---------------------------------------------------------------------------------------


def _walk(root: Path) -> list[Path]:
    """Files under `root` in sorted order, hidden files and folders skipped."""
    if root.is_file() or root.is_symlink() and not root.is_dir():
        return [root]
    out = []
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if any(part.startswith(".") for part in rel.parts):
            continue
        if p.is_dir():
            continue
        out.append(p)
    return out


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


def ingest(cfg: CorpusConfig) -> IngestReport:
    """Read every file under `cfg.paths`; IngestError under `strict` if any file is bad."""
    docs: list[Document] = []
    problems: list[Problem] = []
    seen: dict[str, str] = {}
    for entry in cfg.paths:
        root = Path(entry)
        if not root.exists() and not root.is_symlink():
            raise IngestError(f"corpus path does not exist: {entry}")
        base = root.parent if root.is_file() else root
        for path in _walk(root):
            doc_id = path.relative_to(base).as_posix()
            if doc_id in seen:
                raise IngestError(f"two corpus files share the id {doc_id!r} "
                                  f"({seen[doc_id]} and {entry}); use distinct file names")
            seen[doc_id] = entry
            try:
                docs.append(read_file(path, doc_id, cfg.pdf_parser))
            except BadFile as exc:
                log.warning("skipping %s: %s", doc_id, exc)
                problems.append(Problem(doc_id, str(exc)))
    report = IngestReport(tuple(docs), tuple(problems))
    if cfg.strict and problems:
        raise IngestError(f"strict ingest: {len(problems)} bad file(s), first: "
                          f"{problems[0].source}: {problems[0].reason}")
    return report
