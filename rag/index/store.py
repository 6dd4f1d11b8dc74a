"""The index directory: chunks.jsonl + bm25s index + FAISS index + manifest.json.

Layout of `IndexConfig.dir`:
    manifest.json      IndexManifest (corpus hash, chunker params, tokenizer, embedder, versions)
    chunks.jsonl       one Chunk per line; row i is BM25 document i and FAISS vector i
    ingest-report.json files left out of the corpus and why
    bm25/              bm25s.BM25.save() output
    dense.faiss        faiss.write_index() output (always a CPU index), or
    dense.milvus.json  the Milvus collection holding the vectors (rag/index/milvus.py)

Writes are atomic: everything is built in a hidden sibling folder which replaces the old
index by rename once complete, so an interrupted build leaves the previous index (or none),
never a half-written one. Only a folder of ours is ever replaced (rag/index/folder.py: absent,
empty, or holding our manifest); anything else `index.dir` names is a one-line refusal. Loading
checks the manifest against the config: another embedder, dimension or tokenizer is a one-line
`IndexMismatch`, and so is a corpus that changed since it was indexed (`check_corpus`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import time
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path

import numpy as np

from lorarag.core.errors import ConfigError
from lorarag.rag.config import ChunkerConfig, CorpusConfig, EmbedderConfig, IndexConfig
from lorarag.rag.embed import make_embedder
from lorarag.rag.index.bm25_faiss import BM25Part, DensePart
from lorarag.rag.index.folder import IndexMismatch, building_dir, check_apart, check_replaceable, index_path, swap_in
from lorarag.rag.index.milvus import MilvusPart
from lorarag.rag.ingest.chunk import make_chunker
from lorarag.rag.ingest.parse import IngestError, IngestReport, Problem, corpus_fingerprint, ingest
from lorarag.rag.records import Chunk, Document, from_dict, read_jsonl, to_dict, write_jsonl

log = logging.getLogger(__name__)

FORMAT_VERSION = 1


@dataclass(frozen=True)
class IndexManifest:
    """What an index was built from and with; checked on load."""

    format_version: int
    corpus_hash: str  # sha256 over sorted (doc_id, sha256(text))
    n_documents: int
    n_chunks: int
    n_skipped_files: int
    chunker: tuple[tuple[str, str], ...]  # sorted (param, JSON value)
    bm25_tokenizer: str | None
    bm25_k1: float | None
    bm25_b: float | None
    dense_kind: str | None
    embedder_kind: str | None
    embedder_model: str | None
    embedder_query_instruction: str | None
    dimension: int | None
    versions: tuple[tuple[str, str], ...]
    build_seconds: float = 0.0
    # (file id, sha256 of its bytes) of every corpus file read: a changed corpus is a stale index.
    # Empty for an index built from chunks (no corpus files) or by an older version.
    sources: tuple[tuple[str, str], ...] = ()


def corpus_hash(docs: list[Document] | tuple[Document, ...]) -> str:
    """Order-independent hash of the parsed corpus (ids and texts)."""
    h = hashlib.sha256()
    for doc_id, text_hash in sorted((d.doc_id, hashlib.sha256(d.text.encode()).hexdigest()) for d in docs):
        h.update(f"{doc_id}\0{text_hash}\n".encode())
    return h.hexdigest()


def _versions() -> tuple[tuple[str, str], ...]:
    out = []
    for pkg in ("lorarag", "bm25s", "faiss-cpu", "faiss-gpu-cu12", "torch", "transformers"):
        try:
            out.append((pkg, metadata.version(pkg)))
        except metadata.PackageNotFoundError:
            continue
    return tuple(out)


# ---------------------------------------------------------------------------------------
# BM25 (bm25s) and FAISS parts
# ---------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------
# The index directory
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Index:
    """A loaded index: chunks (row order), manifest, and its BM25 and/or dense parts."""

    manifest: IndexManifest
    chunks: tuple[Chunk, ...]
    bm25: BM25Part | None
    dense: DensePart | MilvusPart | None


def build_from_chunks(
    chunks: list[Chunk],
    index_cfg: IndexConfig,
    *,
    embedder=None,
    embedder_cfg: EmbedderConfig | None = None,
    chash: str = "",
    n_documents: int = 0,
    chunker_params: dict | None = None,
    report: IngestReport | None = None,
) -> IndexManifest:
    """Write an index of `chunks` to `index_cfg.dir` atomically; return its manifest."""
    if not chunks:
        raise IngestError("nothing to index: no chunks")
    seen: set[str] = set()
    for c in chunks:  # ids are what qrels and traces refer to: they must be unique
        if c.chunk_id in seen:
            raise IngestError(f"duplicate chunk id {c.chunk_id!r} ({c.source})")
        seen.add(c.chunk_id)
    if not chash:  # chunks that came without documents: hash what is indexed
        h = hashlib.sha256()
        for c in chunks:
            h.update(f"{c.chunk_id}\0{hashlib.sha256(c.text.encode()).hexdigest()}\n".encode())
        chash = h.hexdigest()
    if index_cfg.dense is not None and embedder is None:
        raise ConfigError("index.dense needs an embedder")
    t0 = time.perf_counter()
    final = index_path(index_cfg.dir)
    check_replaceable(final)
    tmp = building_dir(final)
    try:
        write_jsonl(tmp / "chunks.jsonl", chunks)
        texts = [c.text for c in chunks]
        if index_cfg.bm25 is not None:
            BM25Part.build(texts, index_cfg.bm25).save(tmp / "bm25")
        dim, dense = None, None
        if index_cfg.dense is not None:
            vectors = _embed_with_progress(embedder, texts)
            dim = int(vectors.shape[1])
            if index_cfg.dense.kind == "milvus":
                dense = MilvusPart.build(vectors, index_cfg.dense, chunks=chunks, index_dir=final)
            else:
                dense = DensePart.build(vectors, index_cfg.dense)
            dense.save(tmp / dense.FILE)
        problems = [to_dict(p) for p in report.problems] if report else []
        (tmp / "ingest-report.json").write_text(
            json.dumps({"problems": problems}, ensure_ascii=False, indent=1), encoding="utf-8"
        )
        bm = index_cfg.bm25
        ec = (embedder_cfg or getattr(embedder, "cfg", None)) if index_cfg.dense is not None else None
        manifest = IndexManifest(
            format_version=FORMAT_VERSION,
            corpus_hash=chash,
            n_documents=n_documents,
            n_chunks=len(chunks),
            n_skipped_files=len(problems),
            chunker=tuple(sorted((k, json.dumps(v)) for k, v in (chunker_params or {}).items())),
            bm25_tokenizer=bm.tokenizer if bm else None,
            bm25_k1=bm.k1 if bm else None,
            bm25_b=bm.b if bm else None,
            dense_kind=index_cfg.dense.kind if index_cfg.dense else None,
            embedder_kind=ec.kind if ec else None,
            embedder_model=ec.model if ec else None,
            embedder_query_instruction=ec.query_instruction if ec else None,
            dimension=dim,
            versions=_versions(),
            build_seconds=round(time.perf_counter() - t0, 3),
            sources=report.sources if report else (),
        )
        # The manifest is written last: a folder without it is never loaded.
        (tmp / "manifest.json").write_text(json.dumps(to_dict(manifest), ensure_ascii=False, indent=1), encoding="utf-8")
        swap_in(tmp, final)
        if dense is not None:  # the folder that names the new vectors is in place: switch to them
            dense.publish()
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return manifest


def _embed_with_progress(embedder, texts: list[str]) -> np.ndarray:
    """Embed documents in slices of a few batches, with a progress bar."""
    from tqdm import tqdm

    step = max(1, embedder.cfg.batch_size * 8)
    parts = [
        embedder.embed_documents(texts[i : i + step])
        for i in tqdm(range(0, len(texts), step), desc="embedding", unit="slice", disable=len(texts) <= step)
    ]
    return np.concatenate(parts)


def check_target(corpus_cfg: CorpusConfig, index_cfg: IndexConfig) -> None:
    """IndexDirError unless `index.dir` may become this corpus's index: apart from the corpus, and
    absent, empty or an index of ours. Cheap: call it before the corpus is read."""
    final = index_path(index_cfg.dir)
    check_apart(final, corpus_cfg.paths)
    check_replaceable(final)


def build_index(
    corpus_cfg: CorpusConfig,
    chunker_cfg: ChunkerConfig,
    index_cfg: IndexConfig,
    embedder_cfg: EmbedderConfig | None = None,
    *,
    report: IngestReport | None = None,
    embedder=None,
) -> IndexManifest:
    """Ingest (unless `report` is given), chunk, and write the index; return its manifest."""
    check_target(corpus_cfg, index_cfg)
    report = report if report is not None else ingest(corpus_cfg)
    if not report.documents:
        raise IngestError(f"nothing could be indexed: {report.summary()}")
    if index_cfg.dense is not None and embedder is None:
        if embedder_cfg is None:
            raise ConfigError("index.dense needs an `embedder` config")

        embedder = make_embedder(embedder_cfg)
    chunker = make_chunker(chunker_cfg)
    chunks = chunker.chunk_all(report.documents)
    cut = {c.doc_id for c in chunks}
    empty = [
        Problem(d.doc_id, "no chunk: nothing left to index after chunking") for d in report.documents if d.doc_id not in cut
    ]
    for p in empty:  # the ingest report lists them; the manifest counts them
        log.warning("left out %s: %s", p.source, p.reason)
    if empty:
        report = replace(report, problems=report.problems + tuple(empty))
    return build_from_chunks(
        chunks,
        index_cfg,
        embedder=embedder,
        embedder_cfg=embedder_cfg,
        chash=corpus_hash(report.documents),
        n_documents=len(report.documents),
        chunker_params=chunker.params,
        report=report,
    )


def read_manifest(folder: str | Path) -> IndexManifest:
    """The manifest of an index folder; IndexMismatch if there is no complete index."""
    path = Path(folder) / "manifest.json"
    if not path.exists():
        raise IndexMismatch(f"no index at {folder} (run `lorarag index <config>` first)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise IndexMismatch(f"{path}: unreadable manifest ({exc})") from None
    manifest = from_dict(IndexManifest, data)
    if manifest.format_version != FORMAT_VERSION:
        raise IndexMismatch(
            f"{folder}: index format {manifest.format_version}, this code reads "
            f"{FORMAT_VERSION}; rebuild with `lorarag index`"
        )
    return manifest


def check_compatible(m: IndexManifest, index_cfg: IndexConfig, embedder_cfg: EmbedderConfig | None, where: str) -> None:
    """IndexMismatch (one line) if the config asks for something the index was not built with."""
    hint = "; rebuild with `lorarag index <config>`"
    bm = index_cfg.bm25
    if bm is not None:
        if m.bm25_tokenizer is None:
            raise IndexMismatch(f"{where}: index has no BM25 part{hint}")
        if (bm.tokenizer, bm.k1, bm.b) != (m.bm25_tokenizer, m.bm25_k1, m.bm25_b):
            raise IndexMismatch(
                f"{where}: BM25 built with tokenizer={m.bm25_tokenizer} k1={m.bm25_k1}"
                f" b={m.bm25_b}, config says tokenizer={bm.tokenizer} k1={bm.k1} "
                f"b={bm.b}{hint}"
            )
    if index_cfg.dense is not None:
        if m.dimension is None:
            raise IndexMismatch(f"{where}: index has no dense part{hint}")
        if embedder_cfg is None:
            raise IndexMismatch(
                f"{where}: the dense index needs the embedder it was built with "
                f"({m.embedder_kind}:{m.embedder_model}, dim {m.dimension})"
            )
        if (embedder_cfg.kind, embedder_cfg.model) != (m.embedder_kind, m.embedder_model):
            raise IndexMismatch(
                f"{where}: built with embedder {m.embedder_kind}:{m.embedder_model} "
                f"(dim {m.dimension}), config says {embedder_cfg.kind}:"
                f"{embedder_cfg.model}{hint}"
            )


def check_chunker(m: IndexManifest, chunker_cfg: ChunkerConfig, where: str) -> None:
    """IndexMismatch if the index was cut with other chunker parameters than the config's."""
    want = tuple(sorted((k, json.dumps(v)) for k, v in chunker_cfg.model_dump(mode="json").items()))
    if m.chunker and m.chunker != want:
        built = ", ".join(f"{k}={json.loads(v)}" for k, v in m.chunker)
        raise IndexMismatch(f"{where}: index chunked with {built}, config differs; rebuild with `lorarag index <config>`")


def check_corpus(m: IndexManifest, corpus_cfg: CorpusConfig, where: str) -> None:
    """IndexMismatch (one line) when the corpus files differ from those the index was built from."""
    if not m.sources:
        return  # built from chunks, or by a version that did not record its files
    try:
        now = dict(corpus_fingerprint(corpus_cfg))
    except IngestError as exc:
        raise IndexMismatch(f"{where}: stale index: {exc}") from None
    then = dict(m.sources)
    added = sorted(set(now) - set(then))
    removed = sorted(set(then) - set(now))
    changed = sorted(k for k in set(now) & set(then) if now[k] != then[k])
    if added or removed or changed:
        example = (changed or added or removed)[0]
        raise IndexMismatch(
            f"{where}: stale index: the corpus changed since it was indexed ({len(changed)} "
            f"changed, {len(added)} added, {len(removed)} removed, e.g. {example}); "
            "rebuild with `lorarag index <config>`"
        )


def check_fresh(corpus_cfg: CorpusConfig, chunker_cfg: ChunkerConfig, index_cfg: IndexConfig) -> IndexManifest:
    """The manifest of the index, checked against the corpus and chunker it should reflect."""
    manifest = read_manifest(index_cfg.dir)
    check_chunker(manifest, chunker_cfg, index_cfg.dir)
    check_corpus(manifest, corpus_cfg, index_cfg.dir)
    return manifest


def open_index(index_cfg: IndexConfig, embedder_cfg: EmbedderConfig | None = None) -> Index:
    """Load the index folder of `index_cfg`, checked against the config."""
    folder = Path(index_cfg.dir)
    manifest = read_manifest(folder)
    check_compatible(manifest, index_cfg, embedder_cfg, str(folder))
    chunks = tuple(read_jsonl(folder / "chunks.jsonl", Chunk))
    if len(chunks) != manifest.n_chunks:
        raise IndexMismatch(f"{folder}: {len(chunks)} chunks, manifest says {manifest.n_chunks}")
    bm25 = BM25Part.load(folder / "bm25", index_cfg.bm25) if index_cfg.bm25 else None
    dense = None
    if index_cfg.dense is not None:
        part = MilvusPart if index_cfg.dense.kind == "milvus" else DensePart
        dense = part.load(folder / part.FILE, index_cfg.dense)
        if dense.ntotal != len(chunks) or dense.dimension != manifest.dimension:
            raise IndexMismatch(
                f"{folder}: dense index has {dense.ntotal} x {dense.dimension}"
                f" vectors, manifest says {len(chunks)} x {manifest.dimension}"
            )
    return Index(manifest, chunks, bm25, dense)
