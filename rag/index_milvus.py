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
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from lorarag.core.errors import ConfigError
from lorarag.rag.config import DenseIndexConfig
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


def connect(uri: str, token_env: str | None) -> Any:
    """A MilvusClient for `uri`; MilvusUnavailable (one line) when it cannot connect."""
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
    try:
        return MilvusClient(uri=uri, token=token, timeout=30)
    except Exception as exc:  # pymilvus raises its own and grpc errors; the user gets one line
        raise MilvusUnavailable(f"cannot connect to Milvus at {uri}: {str(exc).splitlines()[0][:200]}") from None


def _call(what: str, uri: str, fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # a server error mid-request: one line naming the operation
        raise MilvusUnavailable(f"Milvus at {uri}: {what} failed: {str(exc).splitlines()[0][:200]}") from None


class MilvusPart:
    """Dense search in one Milvus collection (see the module docstring)."""

    FILE = FILE

    def __init__(self, client: Any, uri: str, collection: str, alias: str, dimension: int, n: int,
                 index_type: str) -> None:
        self.client, self.uri, self.collection, self.alias = client, uri, collection, alias
        self.dimension, self.ntotal, self.index_type = dimension, n, index_type

    @classmethod
    def build(cls, vectors: np.ndarray, cfg: DenseIndexConfig, *, chunks: Sequence[Chunk],
              index_dir: str | Path) -> "MilvusPart":
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
        params.add_index(field_name="vector", index_type=cfg.milvus_index, metric_type="IP",
                         params=_INDEX_PARAMS[cfg.milvus_index])
        _call("create collection", uri, client.create_collection, name, schema=schema, index_params=params)
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        for s in tqdm(range(0, n, INSERT_BATCH), desc="milvus insert", unit="batch", disable=n <= INSERT_BATCH):
            rows = [{"row": i, "chunk_id": c.chunk_id[:4096], "doc_id": c.doc_id[:4096], "source": c.source[:4096],
                     "vector": vectors[i].tolist()} for i, c in zip(range(s, min(s + INSERT_BATCH, n)), chunks[s:])]
            _call("insert", uri, client.insert, name, rows)
        _call("flush", uri, client.flush, name)
        return cls(client, uri, name, alias, d, n, cfg.milvus_index)

    def save(self, path: Path) -> None:
        """Write the JSON that names this build's collection (path: `<folder>/dense.milvus.json`)."""
        path.write_text(json.dumps({"uri": self.uri, "collection": self.collection, "alias": self.alias,
                                    "dimension": self.dimension, "n": self.ntotal,
                                    "index_type": self.index_type}, indent=1), encoding="utf-8")

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
    def load(cls, path: Path, cfg: DenseIndexConfig) -> "MilvusPart":
        """Open the collection `path` names; MilvusUnavailable when it is gone or unreachable."""
        meta = json.loads(path.read_text(encoding="utf-8"))
        client = connect(meta["uri"], cfg.milvus_token_env)
        if not _call("has collection", meta["uri"], client.has_collection, meta["collection"]):
            raise MilvusUnavailable(f"{path}: Milvus collection {meta['collection']} is gone from {meta['uri']} "
                                    "(rebuild with `lorarag index`)")
        _call("load collection", meta["uri"], client.load_collection, meta["collection"])
        n = int(_call("collection stats", meta["uri"], client.get_collection_stats, meta["collection"])["row_count"])
        return cls(client, meta["uri"], meta["collection"], meta["alias"], int(meta["dimension"]), n,
                   meta["index_type"])

    def search(self, vectors: np.ndarray, depth: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per query vector: (chunk rows, inner-product scores), best first, ties by lower row."""
        depth = min(depth, self.ntotal)
        if depth <= 0:
            return [(np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)) for _ in vectors]
        params = {"metric_type": "IP", "params": {"ef": max(64, depth)} if self.index_type == "HNSW" else {}}
        hits = _call("search", self.uri, self.client.search, self.collection,
                     data=np.asarray(vectors, dtype=np.float32).tolist(), limit=depth,
                     output_fields=["row"], search_params=params)
        out = []
        for q in hits:
            i = np.array([h["row"] for h in q], dtype=np.int64)
            s = np.array([h["distance"] for h in q], dtype=np.float32)
            order = np.lexsort((i, -s))
            out.append((i[order], s[order]))
        return out


def _aliased(client: Any, uri: str, alias: str) -> str | None:
    """The collection `alias` names, or None."""
    if alias not in _call("list aliases", uri, client.list_aliases).get("aliases", []):
        return None
    return _call("describe alias", uri, client.describe_alias, alias)["collection_name"]
