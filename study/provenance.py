"""What a run's results were made from: the parts of each result row's stamp.

`row_parts` gives the parts of a result row's stamp shared by every item of one system
(eval/stamps.py): the index it reads, the prompt settings, and the model by content (the base
model's files as `lorarag run` fingerprints them before reusing an adapter, train/runs.py, and the
adapters' files). Whether an adapter still fits the base now at its path is trained/adapters.py's
`check_base`.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from lorarag.core.runinfo import hash_paths
from lorarag.eval.stamps import chunks_sha256, part_sha256
from lorarag.fallback.gate import adapter_sha256
from lorarag.rag.records import Chunk
from lorarag.train import runs
from lorarag.trained.config import RunConfig, SystemConfig

_FILE_SHA: dict[tuple[str, int, int], str] = {}  # a one-file model (GGUF): hashed once per process


def model_fingerprint(model: str) -> dict[str, str]:
    """The base model by content: {file: sha256} of a model folder (`runs.base_fingerprint`, the
    hash an adapter records at training), a one-file model's sha256, or a hub/server name as it is."""
    p = Path(model)
    if not p.is_file():
        return runs.base_fingerprint(model)
    st = p.stat()
    key = (str(p.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _FILE_SHA:
        _FILE_SHA[key] = hash_paths([p])[str(p)]
    return {p.name: _FILE_SHA[key]}


def reads_index(sc: SystemConfig) -> bool:
    """Whether a system's answers depend on the KB's index: it retrieves, or reads the gold chunk
    from the KB (`oracle`); a closed-book system reads no source."""
    return sc.kind != "closed_book" and (sc.context == "retrieved" or sc.kind == "oracle")


def row_parts(
    cfg: RunConfig, sc: SystemConfig, chunks: Iterable[Chunk], adapter: Path | None, rag_sft: Path | None = None
) -> dict[str, str]:
    """The index, prompt and model parts of the stamp of every row `sc` writes (eval/stamps.py).
    `adapter`: the system's own adapter (the RAG-SFT one for kind `rag_sft`), as `system_stamp` takes it."""
    model: dict = {"base": model_fingerprint(cfg.rag.generator.model)}
    if sc.uses_adapter:
        model["adapter"] = adapter_sha256(adapter) if adapter is not None else None
    if sc.uses_rag_sft and sc.kind != "rag_sft":
        model["rag_sft"] = adapter_sha256(rag_sft) if rag_sft is not None else None
    parts = {"prompt": part_sha256(cfg.rag.prompt.model_dump(mode="json")), "model": part_sha256(model)}
    if reads_index(sc):
        rag = cfg.rag
        parts["index"] = chunks_sha256(
            chunks,
            {
                "embedder": rag.embedder.model_dump(mode="json") if rag.embedder else None,
                "reranker": rag.reranker.model_dump(mode="json") if rag.reranker else None,
            },
        )
    return parts
