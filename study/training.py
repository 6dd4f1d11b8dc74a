"""Stage 4 of a run: the base model folder, the SFT mix, and the LoRA (trained, resumed or reused).

When a system of kind `rag_sft` is listed, the stage trains (or reuses) a second adapter, RAG-SFT:
the same base, recipe, seed and step count as the LoRA, on train/rag_sft.py's transform of the
LoRA's own rows (every conflict-aware row re-posed as a grounded base-RAG row). It has its own
run dir, `<train.runs_dir>/<run_name>-rag-sft/`, whose adapter.json records the sha256 of its own
rows, so its reuse is proven as the LoRA's is (`train_or_reuse`), and its own rows, written beside
the LoRA's: `<folder of train.dataset>/rag-sft/<file name>` (val likewise).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from lorarag.core import outputs
from lorarag.core.errors import ConfigError
from lorarag.rag.prompt import PromptBuilder
from lorarag.rag.records import Chunk
from lorarag.study.run_folder import Echo
from lorarag.testing.tiny import build_causal_lm
from lorarag.train import rag_sft, runs, swift
from lorarag.train.sft import SFTRow, write_sft
from lorarag.train.smollm2 import ensure_smollm2
from lorarag.trained.adapters import check_same_recipe, needs_rag_sft, rag_sft_config, train_dir, trained_adapter
from lorarag.trained.config import RunConfig


def _smollm2(folder: str) -> None:
    ensure_smollm2(folder)


def _tiny_qwen3(folder: str) -> None:
    if not (Path(folder) / "config.json").is_file():
        build_causal_lm(folder)


# `prepare_base:` kinds: how a fresh machine gets the base model folder (no hub downloads).
BASE_PREPARERS: dict[str, Callable[[str], None]] = {"smollm2_gguf": _smollm2, "tiny_qwen3": _tiny_qwen3}


def write_rag_sft(
    cfg: RunConfig,
    rows: list[SFTRow],
    val: list[SFTRow],
    chunks: list[Chunk],
    check: Callable[[list[SFTRow]], None],
    echo: Echo,
) -> None:
    """The RAG-SFT rows of the LoRA's (train and val) rows, leak-checked by `check` as the LoRA's
    train rows are, written where `rag_sft_config` trains from; nothing when no system needs them."""
    if not needs_rag_sft(cfg):
        return
    prompts, by_id = PromptBuilder(cfg.rag.prompt), {c.chunk_id: c for c in chunks}
    t = rag_sft_config(cfg).train
    rs = rag_sft.rag_sft_rows(rows, prompts, by_id)
    check(rs)
    write_sft(rs, t.dataset)
    if t.val_dataset:
        write_sft(rag_sft.rag_sft_rows(val, prompts, by_id), t.val_dataset)
    echo(f"          RAG-SFT: {len(rs)} rows {rag_sft.summary(rs)}")


def train_or_reuse(cfg: RunConfig, fresh: bool, echo: Echo) -> Path:
    """The adapter folder: an earlier finished run of `train.run_name`, or a new training on the
    SFT rows stage 3 wrote to `train.dataset` (study/kb.build_kb_sft).

    An adapter is reused only when it was trained from exactly these rows, base and recipe: the
    rows were written (and leak-checked) first so their sha256 can be compared with the one saved
    in adapter.json (`runs.provenance_changes`). Any difference is refused with a ConfigError
    naming the part that differs and pointing to `--fresh` (which retrains in that run dir) or a
    new run name: the old run dir may be another config's, so it is never replaced unasked. On a
    match the rows on disk are the ones the adapter trained on, so the leak check that ran on them
    holds for the adapter too.
    """
    if not fresh:
        check_same_recipe(cfg)
        found = trained_adapter(cfg)
        if found is not None:
            changed = runs.provenance_changes(cfg.train)
            if changed:
                raise ConfigError(
                    f"train run '{cfg.train.run_name}' was trained from other data (differs in "
                    f"{'; '.join(changed)}): rerun with `lorarag run --fresh` or name the run anew"
                )
            echo(f"          reusing adapter {found} (same SFT rows, base and recipe; --fresh retrains)")
            return found
    out = train_dir(cfg)
    if fresh:
        outputs.remove_run_folder(out, "training run folder")  # only one lorarag started (core/outputs.py)
    return Path(swift.train(cfg.train))  # ms-swift (GPU) or the CPU peft loop, as `train.kind` says


def train_rag_sft(cfg: RunConfig, fresh: bool, echo: Echo) -> Path | None:
    """The RAG-SFT adapter folder (trained, resumed or reused as `train_or_reuse` does), or None
    when no system needs it. Its rows were written with the LoRA's (`write_rag_sft`)."""
    if not needs_rag_sft(cfg):
        return None
    echo(f"          RAG-SFT adapter, run '{rag_sft_config(cfg).train.run_name}' (same recipe, seed and steps)")
    return train_or_reuse(rag_sft_config(cfg), fresh, echo)


def describe_training(cfg: RunConfig, fresh: bool) -> str:
    """What stage 4 will do, with the exact training commands (for --dry-run)."""
    reuse = "" if fresh else f"reuse the adapter of run '{cfg.train.run_name}' if finished, else "
    out = f"{reuse}build SFT ({cfg.train.dataset}) then: {swift.train(cfg.train, dry_run=True)}"
    if needs_rag_sft(cfg):
        t = rag_sft_config(cfg).train
        reuse = "" if fresh else f"reuse the adapter of run '{t.run_name}' if finished, else "
        out += f"; RAG-SFT: {reuse}re-pose the SFT rows grounded ({t.dataset}) then: {swift.train(t, dry_run=True)}"
    return out
