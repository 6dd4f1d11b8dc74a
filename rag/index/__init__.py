"""Indexes: one index folder holds the chunks, a BM25 index (bm25s) and dense vectors (FAISS or Milvus).

- `store.py`: build an index folder from a corpus or from chunks, open it, check it is fresh;
- `folder.py`: the folder as a thing lorarag owns (its manifest, atomic replacement);
- `bm25_faiss.py`: the BM25 and FAISS parts; `milvus.py`: the dense part in Milvus (Lite or a server);
- `textsplit.py`: BM25 tokenisation for Chinese, French and English.
"""

from lorarag.rag.index.folder import IndexMismatch, index_path
from lorarag.rag.index.store import Index, IndexManifest, build_from_chunks, build_index, open_index, read_manifest

__all__ = [
    "Index",
    "IndexManifest",
    "IndexMismatch",
    "build_from_chunks",
    "build_index",
    "index_path",
    "open_index",
    "read_manifest",
]
