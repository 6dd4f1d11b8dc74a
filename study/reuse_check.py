"""Stage 4's refusal, decided before a run writes anything.

A run that finds a finished adapter under `train.run_name` reuses it only for exactly the SFT rows,
base model and recipe it was trained from (study/training.py). The recipe and the base are known
from the config; the rows are not until stages 1-3 have built them, and those stages write the
run's config.yaml, run.json, scenarios and the SFT rows beside the old adapter. So when anything
that could change the rows differs from the run on disk (its config, an input file, the code), the
rows are built first in a scratch folder, compared with the adapter's record, and a refusal comes
before the run folder is touched: nothing is left half rewritten (an adapter scored on the new
split's scenarios it was partly trained on).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from lorarag.core.config import dump_config
from lorarag.core.errors import ConfigError
from lorarag.core.runinfo import git_sha, hash_paths
from lorarag.study.kb_source import KBSource
from lorarag.study.paraphrase import FILE as PARAPHRASES
from lorarag.study.paraphrase import STAMP as PARAPHRASES_STAMP
from lorarag.study.prepare import index_chunks
from lorarag.study.run_folder import Echo, Paths
from lorarag.train import runs
from lorarag.trained.adapters import check_same_recipe, needs_rag_sft, rag_sft_config, trained_adapter
from lorarag.trained.config import RunConfig


def _unchanged(cfg: RunConfig, root: Path) -> bool:
    """True when the run on disk was made by this very config, code and input files (so stages 1-3
    write the same rows again); False on any doubt."""
    try:
        info = json.loads((root / "run.json").read_text(encoding="utf-8"))
        same_cfg = (root / "config.yaml").read_text(encoding="utf-8") == dump_config(cfg)
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    sha = git_sha()
    if (
        not same_cfg
        or not isinstance(info, dict)
        or info.get("git_sha") != sha
        or sha.endswith("+dirty")
        or sha == "unknown"
    ):
        return False
    saved = info.get("data_hashes") or {}
    inputs = {p: h for p, h in saved.items() if root.resolve() not in Path(p).resolve().parents}
    return hash_paths(inputs) == inputs  # none: every input is made from the config (the demo world)


def _scratch(cfg: RunConfig, folder: Path) -> RunConfig:
    """`cfg` writing stages 1-3 under `folder`: run folder, SFT rows and index (the training run's
    folder, which holds the adapter and its record, stays where it is)."""
    sft = folder / "sft"
    train = cfg.train.model_copy(
        update={
            "dataset": str(sft / "train.jsonl"),
            "val_dataset": str(sft / "val.jsonl") if cfg.train.val_dataset else None,
        }
    )
    rag = cfg.rag.model_copy(update={"index": cfg.rag.index.model_copy(update={"dir": str(folder / "index")})})
    return cfg.model_copy(update={"runs_dir": str(folder / "runs"), "train": train, "rag": rag})


def refuse_before_writing(cfg: RunConfig, root: Path, echo: Echo) -> None:
    """ConfigError now, before anything is written, when stage 4 would refuse the training run of
    `train.run_name` (or of its RAG-SFT run): another recipe (finished or only checkpointed), or a
    finished adapter's other base model or SFT rows. The rows are not checked when no finished adapter
    is there (a new training writes its own record)."""
    check_same_recipe(cfg)  # another recipe: ConfigError, a finished run or only its checkpoints
    if needs_rag_sft(cfg):
        check_same_recipe(rag_sft_config(cfg))
    found = trained_adapter(cfg)
    rag_sft = trained_adapter(rag_sft_config(cfg)) if needs_rag_sft(cfg) else None
    if found is None and rag_sft is None:
        return
    for done, trained in ((found, cfg), (rag_sft, rag_sft_config(cfg))):  # the base is known without the rows
        base = [c for c in runs.provenance_changes(trained.train) if c.startswith("base model")] if done else []
        if base:
            raise ConfigError(
                f"train run '{trained.train.run_name}' was trained from other data (differs in "
                f"{'; '.join(base)}): rerun with `lorarag run --fresh` or name the run anew "
                f"(nothing was written)"
            )
    if _unchanged(cfg, root):
        return
    echo("          a trained adapter is there: building the SFT rows aside first, to check it is theirs")
    with tempfile.TemporaryDirectory(prefix="lorarag-reuse-check-") as tmp:
        scratch = _scratch(cfg, Path(tmp))
        spaths = Paths(Path(scratch.runs_dir) / cfg.name)
        for name in (PARAPHRASES, PARAPHRASES_STAMP):  # generated wordings are read back, not regenerated
            if (root / "data" / name).is_file():
                (spaths.root / "data").mkdir(parents=True, exist_ok=True)
                shutil.copy2(root / "data" / name, spaths.root / "data" / name)
        src = KBSource(scratch, spaths)
        retriever = None
        if cfg.data.distractors == "retrieval":  # the distractors come from the run's own retriever
            retriever = index_chunks(scratch, src.chunks, src.n_documents, scratch.rag.index)
        src.scenarios(lambda _: None, retriever)
        for done, trained in ((found, scratch), (rag_sft, rag_sft_config(scratch))):
            changed = runs.provenance_changes(trained.train) if done is not None else []
            if changed:
                raise ConfigError(
                    f"train run '{trained.train.run_name}' was trained from other data (differs in "
                    f"{'; '.join(changed)}): rerun with `lorarag run --fresh` or name the run anew "
                    f"(nothing was written)"
                )
