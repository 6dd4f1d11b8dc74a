"""What a run's results and adapters were made from, checked where they are used.

`row_parts` gives the parts of a result row's stamp shared by every item of one system
(eval/stamps.py): the index it reads, the prompt settings, and the model by content (the base
model's files as `lorarag run` fingerprints them before reusing an adapter, train/runs.py, and the
adapters' files). `check_base` refuses an adapter trained on another base model than the one now
at its path: `load_run` (`ask --run`, `serve`), `lorarag eval` and `--merge` call it before any
model loads, so a base swapped at the same path is never answered with an adapter made for the old one.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Iterable

from lorarag.core.errors import ConfigError
from lorarag.core.runinfo import hash_paths
from lorarag.eval.stamps import chunks_sha256, part_sha256
from lorarag.fallback.gate import adapter_sha256
from lorarag.rag.records import Chunk
from lorarag.study.config import RunConfig, SystemConfig
from lorarag.train import runs
from lorarag.train.config import TrainConfig

log = logging.getLogger(__name__)

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


def row_parts(cfg: RunConfig, sc: SystemConfig, chunks: Iterable[Chunk], adapter: Path | None,
              rag_sft: Path | None = None) -> dict[str, str]:
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
        parts["index"] = chunks_sha256(chunks, {
            "embedder": rag.embedder.model_dump(mode="json") if rag.embedder else None,
            "reranker": rag.reranker.model_dump(mode="json") if rag.reranker else None})
    return parts


def check_base(train: TrainConfig, adapter: Path, generator_model: str) -> None:
    """ConfigError (one line) when the adapter of run `train.run_name` was trained on another base
    model than the one it is about to be loaded onto (`generator_model` when it is a folder, else
    the base path adapter.json records): same path, other files. An adapter.json without the
    record (an older lorarag) cannot be checked: a warning."""
    pointer_file = runs.run_dir(train) / "adapter.json"
    if not pointer_file.is_file():
        return
    pointer = runs.read_pointer(pointer_file)
    record = pointer.get("trained_on")
    saved = record.get("base") if isinstance(record, dict) else None
    if not isinstance(saved, dict) or not saved:
        log.warning("%s: records no base model fingerprint (an older lorarag): the base cannot be checked",
                    pointer_file)
        return
    base = generator_model if Path(generator_model).is_dir() else str(pointer.get("base_model") or train.model)
    now = runs.base_fingerprint(base)
    if ("(name)" in saved) != ("(name)" in now):  # a hub name on one side, files on the other: not comparable
        return
    files = sorted(k for k in set(saved) | set(now) if saved.get(k) != now.get(k))
    if files:
        raise ConfigError(f"{adapter}: trained on another base model than the one now at {base} "
                          f"({', '.join(files[:4])}{' ...' if len(files) > 4 else ''} differ): "
                          "put its base back, or retrain with `lorarag run --fresh`")
