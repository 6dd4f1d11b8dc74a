"""lorarag: retrieval-augmented generation with a LoRA-fine-tuned fallback.

`lorarag.load_run(RUN_DIR)` builds the trained AdvancedRAGSystem of a `lorarag run` dir
(trained/load.py); `lorarag.load_results(RUN_DIR)` returns its results as a pandas DataFrame, one
row per (system, item) with `correct` and the attribution class (eval/tables.py). Both are imported
on first use so that `import lorarag` stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["load_results", "load_run"]

if TYPE_CHECKING:
    from lorarag.eval.tables import load_results
    from lorarag.trained.load import load_run


def __getattr__(name: str) -> Any:
    if name == "load_run":
        from lorarag.trained.load import load_run

        return load_run
    if name == "load_results":
        from lorarag.eval.tables import load_results

        return load_results
    raise AttributeError(f"module 'lorarag' has no attribute {name!r}")
