"""The dense part of an index in Milvus: an embedded Milvus Lite file or a Milvus server.

`index.dense.kind: milvus`. The index folder keeps everything else (chunks.jsonl, BM25, the
manifest) and `dense.milvus.json`, which names the collection holding this build's vectors. The
collection has one row per chunk: `row` (the chunk's row in chunks.jsonl, primary key),
`chunk_id`, `doc_id`, `source` (provenance, so Milvus alone can say what a hit is) and the unit
vector; the metric is inner product (= cosine on unit vectors), so scores match FAISS's.

A rebuild never touches the collection in use: it inserts into a new collection (`<alias>__<n>`,
batched, with progress) and only `publish` - called after the index folder that names it is in
place - moves the alias `<alias>` to it and drops the collection the alias named before. A rebuild
killed midway leaves the old folder, collection and alias serving; its orphan collection is dropped
by the next build. Hybrid retrieval fuses this part with bm25s by RRF, as with FAISS.

Server: `milvus_uri: http://host:19530` and `milvus_token_env: NAME` (the token is read from that
environment variable, never from the config). Default: a Milvus Lite file beside the index folder.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from lorarag.core.errors import ConfigError
from lorarag.rag.config import DenseIndexConfig
from lorarag.rag.index.folder import IndexMismatch, index_path
from lorarag.rag.records import Chunk

log = logging.getLogger(__name__)

FILE = "dense.milvus.json"
INSERT_BATCH = 2048  # rows per insert call
_INDEX_PARAMS = {"FLAT": {}, "HNSW": {"M": 32, "efConstruction": 200}, "IVF_FLAT": {"nlist": 128}}


class MilvusUnavailable(ConfigError):
    """The Milvus server (or Lite file) cannot be reached or refuses the request."""


def milvus_uri(cfg: DenseIndexConfig, index_dir: str | Path) -> str:
    """The configured URI, or the Lite file `<index dir>.milvus.db` beside the index folder (outside it:
    the folder is swapped whole on a rebuild, the open database file must stay where it is)."""
    if cfg.milvus_uri:
        return cfg.milvus_uri
    folder = Path(index_dir)
    return str(folder.with_name(folder.name + ".milvus.db"))


@contextmanager
def _milvus_logs():
    """Collect Milvus Lite's and pymilvus's log records (tracebacks included) instead of printing
    them: our one-line error carries their cause; on success they go to this module's DEBUG log."""
    records: list[logging.LogRecord] = []

    class _Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    keep, loggers = _Keep(), [logging.getLogger(n) for n in ("milvus_lite", "pymilvus")]
    before = [lg.propagate for lg in loggers]
    for lg in loggers:
        lg.addHandler(keep)
        lg.propagate = False
    try:
        yield records
        for r in records:  # reached only when the call succeeded
            log.debug("%s: %s", r.name, r.getMessage())
    finally:
        for lg, prop in zip(loggers, before):
            lg.removeHandler(keep)
            lg.propagate = prop


def _cause(exc: BaseException, records: list[logging.LogRecord]) -> str:
    """One line: the error Milvus Lite logged (e.g. "another process holds the lock on ..."), else `exc`'s."""
    for r in reversed(records):
        if r.levelno >= logging.ERROR and r.exc_info and r.exc_info[1] is not None:
            inner = r.exc_info[1]
            return (str(inner).strip().splitlines() or [type(inner).__name__])[0][:300]
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]


def _is_lite(uri: str) -> bool:
    return not uri.startswith(("http://", "https://", "tcp://", "unix:"))


def check_lite(db: Path) -> None:
    """MilvusUnavailable unless every collection manifest in the Milvus Lite folder `db` is readable
    and lists only files that are there. Milvus Lite falls back to `manifest.json.prev` when
    `manifest.json` is unreadable and then deletes, as orphans, the segments and index files the
    older manifest does not list: such a folder must never reach it."""
    if not db.exists():
        return
    if not db.is_dir():
        raise MilvusUnavailable(f"{db}: is a file, not a Milvus Lite database folder; point milvus_uri elsewhere")
    for coll in sorted([*db.glob("collections/*"), *db.glob("databases/*/collections/*")]):
        if coll.is_dir():
            problem = _manifest_problem(coll)
            if problem:
                raise MilvusUnavailable(
                    f"{coll / 'manifest.json'}: {problem}; not opened (Milvus Lite would delete "
                    f"the files it no longer lists): restore it, or move {db} away and "
                    "rebuild with `lorarag index`"
                )


def _manifest_problem(coll: Path) -> str | None:
    """Why Milvus Lite would not read collection folder `coll`'s manifest as it is, or None."""
    try:
        data = json.loads((coll / "manifest.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        return "missing" if (coll / "partitions").exists() else None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return f"unreadable ({str(exc).splitlines()[0][:120]})"
    parts = data.get("partitions") if isinstance(data, dict) else None
    if not isinstance(parts, dict):
        return "malformed (no partitions object)"
    for name, part in parts.items():
        files = [f for k in ("data_files", "delta_files") for f in (part.get(k) if isinstance(part, dict) else None) or []]
        if not isinstance(part, dict) or not all(isinstance(f, str) for f in files):
            return f"malformed (partition {name!r})"
        gone = [f for f in files if not (coll / "partitions" / name / f).is_file()]
        if gone:
            return f"lists {gone[0]}, which is not there"
    return None


def connect(uri: str, token_env: str | None) -> Any:
    """A MilvusClient for `uri`; MilvusUnavailable (one line) when it cannot connect. A Milvus Lite
    folder is checked first (`check_lite`)."""
    try:
        from pymilvus import MilvusClient
    except ImportError:
        raise ConfigError("index.dense.kind: milvus needs pymilvus (pip install 'pymilvus[milvus_lite]')") from None
    if uri.endswith(".db"):  # Milvus Lite runs its gRPC server in this process and logs, as an ERROR with a
        # traceback, each client call it does not implement (AllocTimestamp): noise, not a failure
        logging.getLogger("grpc._server").setLevel(logging.CRITICAL)
    token = ""
    if token_env:
        token = os.environ.get(token_env, "")
        if not token:
            raise ConfigError(f"index.dense.milvus_token_env: environment variable {token_env} is not set")
    if _is_lite(uri):
        check_lite(Path(uri))
    with _milvus_logs() as records:
        try:
            return MilvusClient(uri=uri, token=token, timeout=30)
        except Exception as exc:  # noqa: BLE001 -- pymilvus raises its own and grpc errors; the user gets one line
            raise MilvusUnavailable(f"cannot connect to Milvus at {uri}: {_cause(exc, records)}") from None


def _call(what: str, uri: str, fn, *args, **kwargs):
    with _milvus_logs() as records:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 -- a server error mid-request: one line naming the operation
            raise MilvusUnavailable(f"Milvus at {uri}: {what} failed: {_cause(exc, records)}") from None


class MilvusPart:
    """Dense search in one Milvus collection (see the module docstring)."""

    FILE = FILE

    def __init__(self, client: Any, uri: str, collection: str, alias: str, dimension: int, n: int, index_type: str) -> None:
        self.client, self.uri, self.collection, self.alias = client, uri, collection, alias
        self.dimension, self.ntotal, self.index_type = dimension, n, index_type

    @classmethod
    def build(
        cls, vectors: np.ndarray, cfg: DenseIndexConfig, *, chunks: Sequence[Chunk], index_dir: str | Path
    ) -> MilvusPart:
        """Insert unit vectors [n, d] with the chunks' ids and provenance into a new collection."""
        from pymilvus import DataType, MilvusClient
        from tqdm import tqdm

        uri = milvus_uri(cfg, index_dir)
        client = connect(uri, cfg.milvus_token_env)
        alias = cfg.milvus_collection
        n, d = vectors.shape
        in_use = _aliased(client, uri, alias)
        name = f"{alias}__{time.time_ns()}"
        for old in _call("list collections", uri, client.list_collections):  # killed builds' leftovers
            if old.startswith(f"{alias}__") and old != in_use:
                log.info("dropping orphan Milvus collection %s", old)
                _call("drop collection", uri, client.drop_collection, old)
        schema = MilvusClient.create_schema(auto_id=False)
        schema.add_field("row", DataType.INT64, is_primary=True)
        schema.add_field("chunk_id", DataType.VARCHAR, max_length=4096)
        schema.add_field("doc_id", DataType.VARCHAR, max_length=4096)
        schema.add_field("source", DataType.VARCHAR, max_length=4096)
        schema.add_field("vector", DataType.FLOAT_VECTOR, dim=d)
        params = client.prepare_index_params()
        params.add_index(
            field_name="vector", index_type=cfg.milvus_index, metric_type="IP", params=_INDEX_PARAMS[cfg.milvus_index]
        )
        _call("create collection", uri, client.create_collection, name, schema=schema, index_params=params)
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        for s in tqdm(range(0, n, INSERT_BATCH), desc="milvus insert", unit="batch", disable=n <= INSERT_BATCH):
            rows = [
                {
                    "row": i,
                    "chunk_id": c.chunk_id[:4096],
                    "doc_id": c.doc_id[:4096],
                    "source": c.source[:4096],
                    "vector": vectors[i].tolist(),
                }
                for i, c in zip(range(s, min(s + INSERT_BATCH, n)), chunks[s:])
            ]
            _call("insert", uri, client.insert, name, rows)
        _call("flush", uri, client.flush, name)
        return cls(client, uri, name, alias, d, n, cfg.milvus_index)

    def save(self, path: Path) -> None:
        """Write the JSON that names this build's collection (path: `<folder>/dense.milvus.json`)."""
        path.write_text(
            json.dumps(
                {
                    "uri": self.uri,
                    "collection": self.collection,
                    "alias": self.alias,
                    "dimension": self.dimension,
                    "n": self.ntotal,
                    "index_type": self.index_type,
                },
                indent=1,
            ),
            encoding="utf-8",
        )

    def publish(self) -> None:
        """Point the alias at this build's collection and drop the one it named before."""
        before = _aliased(self.client, self.uri, self.alias)
        if before is None:
            _call("create alias", self.uri, self.client.create_alias, self.collection, self.alias)
        else:
            _call("alter alias", self.uri, self.client.alter_alias, self.collection, self.alias)
        if before is not None and before != self.collection:
            _call("drop collection", self.uri, self.client.drop_collection, before)

    @classmethod
    def load(cls, path: Path, cfg: DenseIndexConfig) -> MilvusPart:
        """Open the collection `path` names; MilvusUnavailable when it is gone or unreachable,
        IndexMismatch when `path` is unreadable or names another database than the config's."""
        meta = _read_meta(path)
        want = milvus_uri(cfg, index_path(path.parent))  # as `build` named it
        if meta["uri"] != want:
            raise IndexMismatch(
                f"{path}: names Milvus at {meta['uri']}, the config's is {want}; rebuild with `lorarag index`"
            )
        client = connect(meta["uri"], cfg.milvus_token_env)
        if not _call("has collection", meta["uri"], client.has_collection, meta["collection"]):
            raise MilvusUnavailable(
                f"{path}: Milvus collection {meta['collection']} is gone from {meta['uri']} (rebuild with `lorarag index`)"
            )
        _call("load collection", meta["uri"], client.load_collection, meta["collection"])
        n = int(_call("collection stats", meta["uri"], client.get_collection_stats, meta["collection"])["row_count"])
        return cls(client, meta["uri"], meta["collection"], meta["alias"], int(meta["dimension"]), n, meta["index_type"])

    def search(self, vectors: np.ndarray, depth: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per query vector: (chunk rows, inner-product scores), best first, ties by lower row."""
        depth = min(depth, self.ntotal)
        if depth <= 0:
            return [(np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)) for _ in vectors]
        params = {"metric_type": "IP", "params": {"ef": max(64, depth)} if self.index_type == "HNSW" else {}}
        hits = _call(
            "search",
            self.uri,
            self.client.search,
            self.collection,
            data=np.asarray(vectors, dtype=np.float32).tolist(),
            limit=depth,
            output_fields=["row"],
            search_params=params,
        )
        out = []
        for q in hits:
            i = np.array([h["row"] for h in q], dtype=np.int64)
            s = np.array([h["distance"] for h in q], dtype=np.float32)
            order = np.lexsort((i, -s))
            out.append((i[order], s[order]))
        return out


_META = {"uri": str, "collection": str, "alias": str, "dimension": int, "n": int, "index_type": str}


def _read_meta(path: Path) -> dict:
    """dense.milvus.json as written by `save`; IndexMismatch (one line) when it is anything else."""
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise IndexMismatch(f"{path}: missing; rebuild with `lorarag index`") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise IndexMismatch(f"{path}: unreadable ({str(exc).splitlines()[0][:120]}); rebuild with `lorarag index`") from None
    if not isinstance(meta, dict) or any(not isinstance(meta.get(k), t) for k, t in _META.items()):
        raise IndexMismatch(f"{path}: not a Milvus index record (needs {', '.join(_META)}); rebuild with `lorarag index`")
    return meta


def _aliased(client: Any, uri: str, alias: str) -> str | None:
    """The collection `alias` names, or None."""
    if alias not in _call("list aliases", uri, client.list_aliases).get("aliases", []):
        return None
    return _call("describe alias", uri, client.describe_alias, alias)["collection_name"]
