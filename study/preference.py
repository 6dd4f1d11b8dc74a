"""Stage 4b of a run (`train.preference.enabled`): preference pairs from the SFT rows, and the
preference-trained adapter (trained after SFT, or reused).

The pairs come from the SFT training rows on disk (train/preference.py), paired only for TRAINING
facts: the KB's `known` and `context_only` items (not `known_dev`: the gate calibrates on it). They
are leak-checked like the SFT rows (held-out questions and chunks, test passages), and
the overlap check (study/leaks.py) reads them beside the SFT rows before preference training runs.
Reuse is proven like the SFT adapter's: adapter.json records the pairs' sha256 and the recipe,
and any difference is refused with the one-line error that points to --fresh.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from lorarag.core.errors import ConfigError
from lorarag.scenarios.kb_splits import HELD_OUT
from lorarag.scenarios.records import Scenario
from lorarag.study.kb_source import KBSource
from lorarag.study.run_folder import Echo
from lorarag.train.preference import FactInfo, build_pairs, kb_facts, pair_summary, pairs_path, write_pairs
from lorarag.train.rlhf import describe_preference, preference_changes, train_preference
from lorarag.train.sft import leak_check, read_sft
from lorarag.trained.config import RunConfig


def pairs_file(cfg: RunConfig) -> Path:
    """Where a run's pairs go (beside the SFT rows)."""
    return pairs_path(cfg.train.dataset)


def training_facts(src: KBSource) -> dict[str, FactInfo]:
    """Question wording -> training fact of the KB."""
    return kb_facts(src.kb.groups)


def write_preference_pairs(cfg: RunConfig, src: KBSource, test: Sequence[Scenario], echo: Echo) -> Path | None:
    """Build, leak-check and write the pairs (None when preference training is off); `test`: the
    run's test scenarios, whose substituted passages no pair may show."""
    if not cfg.train.preference.enabled:
        return None
    pairs = build_pairs(read_sft(cfg.train.dataset), training_facts(src), cfg.train.preference)
    if not pairs:
        raise ConfigError(
            f"train.preference: no preference pair in {cfg.train.dataset} (no conflict-aware row "
            "of a training fact with a wrong source, or with a right source of an untaught fact)"
        )
    rows = [q.to_swift() for q in pairs]
    held = [it for g in HELD_OUT for it in src.kb.groups[g]]
    passages = [p.text for s in test for p in s.presented if p.replaces]
    leak_check(rows, held, {c.chunk_id: c for c in src.kb.chunks}, passages)
    path = write_pairs(pairs, pairs_file(cfg))
    echo(f"          preference pairs: {len(pairs)} {pair_summary(pairs)} -> {path}")
    return path


def prefer_or_reuse(cfg: RunConfig, adapter: Path, fresh: bool, echo: Echo) -> Path:
    """The adapter LoRA-RAG evaluates: `adapter` (SFT) when preference training is off, else the
    preference adapter, reused when its record matches the pairs and recipe, trained otherwise."""
    pairs = pairs_file(cfg)
    changed = preference_changes(cfg.train, pairs)
    if not cfg.train.preference.enabled:
        if changed:
            raise ConfigError(
                f"train run '{cfg.train.run_name}' was trained with other data (differs in "
                f"{'; '.join(changed)}): rerun with `lorarag run --fresh` or name the run anew"
            )
        return adapter
    sft_only = changed == ["preference training (the config has it, the adapter does not)"]
    if changed and not sft_only and not fresh:
        raise ConfigError(
            f"train run '{cfg.train.run_name}' was trained from other data (differs in "
            f"{'; '.join(changed)}): rerun with `lorarag run --fresh` or name the run anew"
        )
    if not changed:
        echo(f"          reusing preference adapter {adapter} (same pairs and recipe; --fresh retrains)")
        return adapter
    echo(f"          {cfg.train.preference.type} on {pairs} from the SFT adapter")
    return train_preference(cfg.train, pairs)


def describe(cfg: RunConfig) -> str:
    """The preference step's command for --dry-run ('' when off)."""
    return describe_preference(cfg.train, pairs_file(cfg))
