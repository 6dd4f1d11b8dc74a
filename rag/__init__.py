"""Retrieval and generation: documents, chunks, indexes (FAISS, BM25, Milvus), rerankers, generators."""

# Installed as lorarag.rag (pyproject's package-dir): a bare `import rag` from the checkout root
# would load a second copy of every module, with its own registries and records.
if __name__ != "lorarag.rag":
    raise ImportError(f"import lorarag.rag, not {__name__}: the folder rag/ is installed as lorarag.rag")
