"""A knowledge base from the formats people have: a folder of documents, a BEIR `corpus.jsonl`,
a Hugging Face dataset, the contexts of a SQuAD file, or ConflictNQ's real passages.

Every kind ends as Documents cut by the run's chunker (rag/ingest/chunk.py), so chunk ids are the
same stable hashes `lorarag index` gives. A document with a title holds `title + blank line +
text`; `KBCorpus.body_offset` records where the set's own text starts, so a set's answer
offsets (into its text) still point at the answer. ConflictNQ passages keep no title: its
fabricated passages have none, and a perturbed chunk must look like the real one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from lorarag.core.errors import RecordError
from lorarag.core.inputs import check_input_file
from lorarag.rag.config import ChunkerConfig, CorpusConfig
from lorarag.rag.ingest.chunk import make_chunker
from lorarag.rag.ingest.parse import ingest
from lorarag.rag.records import Document
from lorarag.scenarios.config import CorpusSource
from lorarag.scenarios.kb_records import KBCorpus, existing, field, jsonl_objects, read_json

Docs = tuple[list[Document], dict[str, int]]  # documents, doc id -> body offset


class _Collector:
    """Documents in reading order; a repeated id is an error naming both places."""

    def __init__(self) -> None:
        self.docs: list[Document] = []
        self.offset: dict[str, int] = {}
        self.where: dict[str, str] = {}

    def add(self, doc_id: str, text: str, title: str | None, where: str) -> None:
        if doc_id in self.where:
            raise RecordError(f"{where}: document id {doc_id!r} repeats ({self.where[doc_id]})")
        self.where[doc_id] = where
        title = (title or "").strip()
        full = f"{title}\n\n{text}" if title else text
        self.offset[doc_id] = len(title) + 2 if title else 0
        self.docs.append(Document(doc_id=doc_id, source=title or doc_id, text=full))

    def result(self, path: str) -> Docs:
        if not self.docs:
            raise RecordError(f"{path}: no documents")
        return self.docs, self.offset


def _folder(src: CorpusSource) -> tuple[list[Document], dict[str, int], tuple[str, ...]]:
    report = ingest(CorpusConfig(paths=[src.path], pdf_parser=src.pdf_parser, strict=src.strict))
    if not report.documents:
        raise RecordError(f"{src.path}: no usable document ({report.summary()})")
    return (
        list(report.documents),
        {d.doc_id: 0 for d in report.documents},
        tuple(f"{p.source}: {p.reason}" for p in report.problems),
    )


def _rows(out: _Collector, rows: Iterable[tuple[str, dict]], id_key: str, text_key: str, title_key: str | None) -> None:
    for where, obj in rows:
        doc_id = field(obj, id_key, str, where)
        text = field(obj, text_key, str, where)
        title = field(obj, title_key, str, where, required=False, empty=True) if title_key else None
        out.add(doc_id, text, title, where)


def _beir(src: CorpusSource) -> Docs:
    path = existing(src.path, "BEIR corpus")
    file = path / "corpus.jsonl" if path.is_dir() else path
    out = _Collector()
    _rows(out, jsonl_objects(file, "BEIR corpus"), "_id", "text", "title")
    return out.result(str(file))


def _hf_rows(src: CorpusSource) -> Iterable[tuple[str, dict]]:
    path = existing(src.path, "Hugging Face dataset")
    if path.is_dir():
        import datasets

        try:
            ds: Any = datasets.load_from_disk(str(path))
        except (FileNotFoundError, ValueError) as exc:
            raise RecordError(f"{path}: not a datasets.save_to_disk folder ({exc})") from None
        if isinstance(ds, datasets.DatasetDict):
            if src.split is None or src.split not in ds:
                raise RecordError(
                    f"{path}: split: {'required' if src.split is None else repr(src.split) + ' absent'}"
                    f" (splits: {', '.join(ds)})"
                )
            ds = ds[src.split]
        elif src.split is not None:
            raise RecordError(f"{path}: split: {src.split!r} given but the folder holds one dataset")
        return ((f"{path} row {i}", r) for i, r in enumerate(ds))
    if path.suffix == ".parquet":
        return _parquet_rows(path)
    if path.suffix in (".jsonl", ".json"):
        return jsonl_objects(path, "Hugging Face dataset")
    raise RecordError(f"{path}: a Hugging Face dataset is a save_to_disk folder, a .parquet or a .jsonl file")


def _parquet_rows(path: Path) -> Iterable[tuple[str, dict]]:
    """(`file row i`, row) of a parquet file; a truncated or non-parquet file is one RecordError."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    check_input_file(path, "parquet file")
    try:
        rows = pq.read_table(path).to_pylist()
    except (pa.ArrowException, OSError) as exc:
        msg = " ".join(str(exc).split())
        raise RecordError(f"{path}: not a readable parquet file ({msg})") from None
    return ((f"{path} row {i}", r) for i, r in enumerate(rows))


def _hf(src: CorpusSource) -> Docs:
    out = _Collector()
    _rows(out, _hf_rows(src), src.id_field, src.text_field, src.title_field)
    return out.result(src.path)


def squad_articles(path: str | Path) -> list[tuple[str, dict]]:
    """(`file: data[i].paragraphs[j]`, paragraph object) of a SQuAD v1.1/v2.0 file, checked."""
    data = read_json(path, "SQuAD file")
    if not isinstance(data, dict):
        raise RecordError(f"{path}: expected a SQuAD object with `data`")
    articles = field(data, "data", list, str(path))
    out = []
    for i, art in enumerate(articles):
        where = f"{path}: data[{i}]"
        if not isinstance(art, dict):
            raise RecordError(f"{where}: expected an object")
        field(art, "title", str, where)
        for j, par in enumerate(field(art, "paragraphs", list, where)):
            if not isinstance(par, dict):
                raise RecordError(f"{where}.paragraphs[{j}]: expected an object")
            out.append((f"{where}.paragraphs[{j}]", {**par, "_title": art["title"], "_doc": f"{art['title']}/{j}"}))
    return out


def _squad(src: CorpusSource) -> Docs:
    out = _Collector()
    for where, par in squad_articles(src.path):
        out.add(par["_doc"], field(par, "context", str, where), par["_title"].replace("_", " "), where)
    return out.result(src.path)


def conflictnq_rows(path: str | Path) -> list[tuple[str, dict]]:
    """(`file:line`, row) of a ConflictNQ file with its passages checked (lists of `{passage}`)."""
    rows = []
    for where, r in jsonl_objects(path, "ConflictNQ file"):
        field(r, "id", str, where)
        for key in ("real_passages", "fake_passages"):
            for k, p in enumerate(field(r, key, list, where)):
                if not isinstance(p, dict):
                    raise RecordError(f"{where}: {key}[{k}]: expected an object")
                field(p, "passage", str, f"{where}: {key}[{k}]")
        rows.append((where, r))
    return rows


def _conflictnq(src: CorpusSource) -> Docs:
    out = _Collector()
    for where, r in conflictnq_rows(src.path):
        for k, p in enumerate(r["real_passages"]):
            out.add(f"{r['id']}/real{k}", p["passage"], None, where)
    return out.result(src.path)


READERS: dict[str, Callable[[CorpusSource], Docs]] = {"beir": _beir, "hf": _hf, "squad": _squad, "conflictnq": _conflictnq}


def load_corpus(src: CorpusSource, chunker: ChunkerConfig) -> KBCorpus:
    """Read the corpus named by `src` and cut it with `chunker`; a document that gives no chunk
    (blank, or a heading alone) is simply not retrievable, and a label on it is an error later."""
    if src.kind == "folder":
        docs, offsets, problems = _folder(src)
    else:
        (docs, offsets), problems = READERS[src.kind](src), ()
    chunks = make_chunker(chunker).chunk_all(docs)
    if not chunks:
        raise RecordError(f"{src.path}: the corpus gives no chunk")
    return KBCorpus(tuple(docs), tuple(chunks), offsets, problems)
