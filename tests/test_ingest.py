"""Ingest: every reader on small generated files, each bad input reported, real regulation text."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from lorarag.rag.config import CorpusConfig
from lorarag.rag.ingest.parse import IngestError, ingest

from .conftest import shared_data


def make_pdf(pages: list[str]) -> bytes:
    """A minimal valid PDF (Helvetica text, one line per page), xref offsets computed."""
    n = len(pages)
    objs = [
        "<< /Type /Catalog /Pages 2 0 R >>",
        "<< /Type /Pages /Kids [" + " ".join(f"{3 + 2 * i} 0 R" for i in range(n)) + f"] /Count {n} >>",
    ]
    font_id = 3 + 2 * n
    for i, text in enumerate(pages):
        stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET"
        objs.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {4 + 2 * i} 0 R"
            f" /Resources << /Font << /F1 {font_id} 0 R >> >> >>"
        )
        objs.append(f"<< /Length {len(stream)} >>\nstream\n{stream}\nendstream")
    objs.append("<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    out = b"%PDF-1.4\n"
    offsets = []
    for i, body in enumerate(objs, 1):
        offsets.append(len(out))
        out += f"{i} 0 obj\n{body}\nendobj\n".encode("latin-1")
    xref = len(out)
    out += f"xref\n0 {len(objs) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{o:010d} 00000 n \n".encode() for o in offsets)
    out += f"trailer\n<< /Size {len(objs) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return out


@pytest.fixture()
def corpus(tmp_path: Path) -> Path:
    """A folder with one good file per reader and one of each bad input."""
    root = tmp_path / "kb"
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "a.md").write_text("# Titre\n\n## Section\n\nL'élève été à Lyon.\n", encoding="utf-8")
    (root / "sub" / "b.txt").write_text("机动车所有人应当申请注册登记。\n", encoding="utf-8")
    (root / "sub" / "deeper" / "c.pdf").write_bytes(make_pdf(["Hello page one", "Second page text"]))
    import docx

    d = docx.Document()
    d.add_heading("Company profile", level=2)
    d.add_paragraph("The headquarters are in Berlin.")
    d.save(str(root / "d.docx"))
    (root / "e.html").write_text(
        "<html><head><title>t</title></head><body><nav>Menu Home About</nav><article><h1>News</h1>"
        "<p>The company reported a net profit of 12.5 million dollars in 2023, its best year since"
        " it was founded in 1998 in a small garage in Berlin by two engineers.</p><p>Alice Martin, the"
        " chief executive, said the new factory would open in the spring of next year.</p></article>"
        "<footer>Copyright</footer></body></html>",
        encoding="utf-8",
    )
    # Bad inputs, one each.
    (root / "broken.pdf").write_bytes(b"%PDF-1.4\n1 0 obj garbage that is not a pdf\n")
    (root / "empty.md").write_bytes(b"")
    (root / "blank.txt").write_bytes(b"  \n\n \n")
    (root / "image.md").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    (root / "latin1.txt").write_bytes("café crème".encode("latin-1"))
    (root / "broken.docx").write_bytes(b"PK\x03\x04 truncated zip")
    (root / "table.xlsx").write_bytes(b"PK\x03\x04 not supported")
    os.symlink(root / "missing-target.md", root / "dangling.md")
    (root / ".hidden.md").write_text("never indexed", encoding="utf-8")
    return root


def test_each_reader_and_each_bad_input(corpus: Path) -> None:
    report = ingest(CorpusConfig(paths=[str(corpus)]))
    docs = {d.doc_id: d for d in report.documents}
    assert set(docs) == {"a.md", "sub/b.txt", "sub/deeper/c.pdf", "d.docx", "e.html"}
    assert "L'élève été à Lyon." in docs["a.md"].text
    assert docs["sub/b.txt"].text.startswith("机动车所有人")
    pdf = docs["sub/deeper/c.pdf"]
    assert "Hello page one" in pdf.text and "Second page text" in pdf.text
    # Page 2 starts where its text starts.
    assert len(pdf.page_offsets) == 2 and pdf.page_offsets[0] == 0
    assert pdf.text[pdf.page_offsets[1] :].startswith("Second page text")
    assert docs["d.docx"].text == "## Company profile\n\nThe headquarters are in Berlin."
    html = docs["e.html"].text
    assert "net profit of 12.5 million" in html and "Menu Home About" not in html

    reasons = {p.source: p.reason for p in report.problems}
    assert set(reasons) == {
        "broken.pdf",
        "broken.docx",
        "empty.md",
        "blank.txt",
        "image.md",
        "latin1.txt",
        "table.xlsx",
        "dangling.md",
    }
    assert reasons["broken.pdf"].startswith("corrupt PDF")
    assert reasons["broken.docx"].startswith("corrupt DOCX")
    assert reasons["empty.md"] == "empty file" and reasons["blank.txt"] == "empty file"
    assert reasons["image.md"].startswith("binary data")
    assert reasons["latin1.txt"] == "invalid UTF-8 at byte 3"  # 'é' is 0xE9 in latin-1
    assert reasons["table.xlsx"] == "unsupported extension '.xlsx'"
    assert reasons["dangling.md"].startswith("unreadable")
    assert all("\n" not in r for r in reasons.values())


def test_strict_and_missing_path(corpus: Path, tmp_path: Path) -> None:
    with pytest.raises(IngestError, match="strict ingest: 8 bad file"):
        ingest(CorpusConfig(paths=[str(corpus)], strict=True))
    with pytest.raises(IngestError, match="does not exist"):
        ingest(CorpusConfig(paths=[str(tmp_path / "nope")]))


def test_ids_do_not_depend_on_where_the_corpus_lives(corpus: Path, tmp_path: Path) -> None:
    import shutil

    other = tmp_path / "elsewhere" / "copy"
    shutil.copytree(corpus, other, symlinks=True)
    a = ingest(CorpusConfig(paths=[str(corpus)]))
    b = ingest(CorpusConfig(paths=[str(other)]))
    assert a.documents == b.documents


def test_real_regulation() -> None:
    root = shared_data("traffic-law")
    report = ingest(CorpusConfig(paths=[str(root)]))
    assert report.problems == ()
    assert len(report.documents) == len(list(root.glob("*.md")))
    reg = {d.doc_id: d for d in report.documents}["road-traffic-safety-law-implementing-regulations-2017.md"]
    assert "第五条 初次申领机动车号牌、行驶证的，应当向机动车所有人住所地的公安机关交通管理部门申请注册登记。" in reg.text


def test_mineru_backend_used_when_its_cli_is_on_path(tmp_path: Path, monkeypatch) -> None:
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "scan.pdf").write_bytes(make_pdf(["pypdf text"]))
    # Without the CLI, pdf_parser=mineru is a per-file problem, auto falls back to pypdf.
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    report = ingest(CorpusConfig(paths=[str(kb)], pdf_parser="mineru"))
    assert report.problems[0].reason == "pdf_parser=mineru but the `mineru` CLI is not on PATH"
    assert "pypdf text" in ingest(CorpusConfig(paths=[str(kb)])).documents[0].text
    # A stand-in CLI with MinerU's interface: `mineru -p PDF -o OUT` -> OUT/<stem>/auto/<stem>.md.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "mineru").write_text(
        f"#!{sys.executable}\nimport sys, pathlib\na = sys.argv\npdf = pathlib.Path(a[a.index('-p') + 1])\n"
        "out = pathlib.Path(a[a.index('-o') + 1]) / pdf.stem / 'auto'\nout.mkdir(parents=True)\n"
        "(out / (pdf.stem + '.md')).write_text('## Layout-aware\\n\\nMinerU text', encoding='utf-8')\n"
    )
    (bin_dir / "mineru").chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    doc = ingest(CorpusConfig(paths=[str(kb)])).documents[0]
    assert doc.text == "## Layout-aware\n\nMinerU text" and doc.page_offsets == ()


@pytest.mark.timeout(120)  # a FIFO that were opened would block the ingest for ever
def test_special_files_are_listed_never_opened(tmp_path: Path) -> None:
    import socket

    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "a.md").write_text("Some text.", encoding="utf-8")
    os.mkfifo(kb / "pipe.md")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(kb / "sock.txt"))
    try:
        report = ingest(CorpusConfig(paths=[str(kb)]))
        direct = ingest(CorpusConfig(paths=[str(kb / "a.md"), str(kb / "pipe.md")]))
    finally:
        sock.close()
    assert [d.doc_id for d in report.documents] == ["a.md"]
    assert {p.source: p.reason for p in report.problems} == {
        "pipe.md": "not a regular file (a FIFO): never opened",
        "sock.txt": "not a regular file (a socket): never opened",
    }
    assert [p.reason for p in direct.problems] == ["not a regular file (a FIFO): never opened"]


def test_symlinks_out_of_the_corpus_are_refused_unless_allowed(tmp_path: Path) -> None:
    outside = tmp_path / "secret.txt"
    outside.write_text("root:x:0:0", encoding="utf-8")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "far.md").write_text("Far away text.", encoding="utf-8")
    kb = tmp_path / "kb"
    (kb / "sub").mkdir(parents=True)
    (kb / "sub" / "b.md").write_text("Inner text.", encoding="utf-8")
    os.symlink(outside, kb / "passwd.txt")
    os.symlink(tmp_path / "elsewhere", kb / "linked")
    os.symlink(kb / "sub" / "b.md", kb / "alias.md")  # inside: read like any file
    os.symlink(kb / "sub", kb / "again")  # a folder inside: its files are read where they are
    report = ingest(CorpusConfig(paths=[str(kb)]))
    assert [d.doc_id for d in report.documents] == ["alias.md", "sub/b.md"]
    reasons = {p.source: p.reason for p in report.problems}
    assert reasons == {
        "passwd.txt": f"symlink to {outside}, outside the corpus paths (set corpus.follow_symlinks_outside: "
        "true to index it)",
        "linked": f"symlink to {tmp_path / 'elsewhere'}, outside the corpus paths (set "
        "corpus.follow_symlinks_outside: true to index it)",
        "again/": "symlinked folder not followed (inside the corpus, or already walked)",
    }
    assert not any("root:x" in d.text for d in report.documents)
    allowed = ingest(CorpusConfig(paths=[str(kb)], follow_symlinks_outside=True))
    assert [d.doc_id for d in allowed.documents] == ["alias.md", "linked/far.md", "passwd.txt", "sub/b.md"]


def test_utf16_headings_only_and_unreadable_folders_get_a_reason(tmp_path: Path, monkeypatch) -> None:
    import lorarag.rag.ingest.walk as walk

    kb = tmp_path / "kb"
    (kb / "locked").mkdir(parents=True)
    (kb / "locked" / "x.md").write_text("hidden by permissions", encoding="utf-8")
    (kb / "le.txt").write_bytes("\ufeffBonjour à tous".encode("utf-16-le"))
    (kb / "be.md").write_bytes("\ufeff机动车登记".encode("utf-16-be"))
    (kb / "u32.txt").write_bytes("\ufeffhello".encode("utf-32-le"))
    (kb / "nobom.txt").write_bytes("hello".encode("utf-16-le"))
    (kb / "torn.txt").write_bytes(b"\xff\xfeh\x00i")  # mark (0-1), "h" (2-3), half a unit at byte 4
    (kb / "titles.md").write_text("# Title\n\n## Section\n\n### Sub\n", encoding="utf-8")
    real = walk._list_dir

    def refuse(folder):
        if folder.name == "locked":
            raise PermissionError(13, "Permission denied")
        return real(folder)

    monkeypatch.setattr(walk, "_list_dir", refuse)
    report = ingest(CorpusConfig(paths=[str(kb)]))
    docs = {d.doc_id: d.text for d in report.documents}
    assert docs == {"le.txt": "Bonjour à tous", "be.md": "机动车登记", "u32.txt": "hello"}
    assert {p.source: p.reason for p in report.problems} == {
        "locked/": "unreadable folder (Permission denied): its files are left out",
        "nobom.txt": "binary data, not text (named .txt; UTF-16 needs a byte-order mark)",
        "torn.txt": "invalid UTF-16 at byte 4 (it starts with a UTF-16 byte-order mark)",
        "titles.md": "only headings, no text to index",
    }
