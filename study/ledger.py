"""The test-split ledger: how often a test split was read, and under how many recipes.

A test split stops being held out once decisions are taken on it. Every evaluation of a split
named test appends one line to the ledger, so a run's headline can say how spent its test split
is ("test split read N times under M recipes"), and a read under a recipe other than the one the
split was first read under is refused without `--reread-test`.

Where: `<runs_dir>/.test-ledger.jsonl` for `lorarag run` and `lorarag seeds` (the runs folder of
the config), `<out_dir>/../.test-ledger.jsonl` for `lorarag eval` (the folder that holds its run
folder). Never beside the data itself: a questions file or data set folder may be the user's,
and lorarag writes nothing there. One JSON object a line, appended:
  {"data": content hash of the split, "split": what it is, "recipe": config hash,
   "git_sha": the code's commit, "time": ISO time, "run": the run folder, "command": run or eval}.

What a split is, and its key (a content hash, so a copy or a move of the data keeps its count):
- a run's test split: the facts of the known and never-learned test groups (study/kb.py's
  `known` and `unseen`: each question's id, text and answers), whatever `eval.max_per_cell`
  draws from them, so reading fewer items of the same facts is the same split;
- an extra set read with `split: test` beside a run (ConflictNQ's test.jsonl): the file's bytes;
- `lorarag eval` on a scenario file whose name has the word test in it (test.jsonl,
  conflictnq-test.jsonl): the file's bytes.
The recipe is the sha256 of the config with its output paths and names, and every seed (the
training, bootstrap and data seeds: a data seed changes the split itself, so its key) left out:
the seeds of `lorarag seeds` are one recipe, a changed setting is another.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from lorarag.core.errors import UserError
from lorarag.core.hashing import sha256_file
from lorarag.eval.config import EvalConfig
from lorarag.trained.config import RunConfig

LEDGER = ".test-ledger.jsonl"
# Config keys that say where things go or what they are called, not what is done: not the recipe.
OUTPUT_KEYS = frozenset(
    {"runs_dir", "out_dir", "output_dir", "dataset", "val_dataset", "run_name", "dir", "engine_dir", "closed_book_run"}
)


def _strip(x: Any, top: Iterable[str] = ()) -> Any:
    if isinstance(x, dict):
        return {k: _strip(v) for k, v in x.items() if k not in OUTPUT_KEYS and not k.endswith("seed") and k not in top}
    if isinstance(x, list):
        return [_strip(v) for v in x]
    return x


def recipe_hash(cfg: BaseModel, drop: Iterable[str] = ("name",)) -> str:
    """sha256 (16 hex) of the config without output paths, names and seeds (module docstring); `drop`:
    top-level keys left out too (the run's name; an eval's scenario file, whose content is the key)."""
    data = _strip(cfg.model_dump(mode="json"), top=tuple(drop))
    return hashlib.sha256(json.dumps(data, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:16]


def split_hash(groups: Mapping[str, Sequence[Any]], names: Iterable[str] = ("known", "unseen")) -> str:
    """sha256 (16 hex) of the test facts of a run's split: each QA item's id, question and answers as
    the set gives them (not the wordings a run may generate: `data.paraphrase` is the recipe's)."""
    lines = sorted(
        json.dumps([it.qid, it.question, sorted(it.answers)], ensure_ascii=False) for g in names for it in groups.get(g, ())
    )
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


def file_hash(path: str | Path) -> str:
    """sha256 (16 hex) of a file's bytes."""
    return sha256_file(path)[:16]


def is_test_file(path: str | Path) -> bool:
    """Whether a scenario file is named as a test split: the word `test` in its name."""
    return "test" in re.split(r"[^a-z0-9]+", Path(path).stem.lower())


@dataclass(frozen=True)
class Split:
    """One test split a command reads: its content key and what it is, in words."""

    key: str
    what: str


@dataclass(frozen=True)
class Reads:
    """The ledger's record of one split: how many reads, under how many recipes."""

    what: str
    reads: int
    recipes: int

    def text(self) -> str:
        return (
            f"{self.what}: test split read {self.reads} time{'s' * (self.reads != 1)} under "
            f"{self.recipes} recipe{'s' * (self.recipes != 1)}"
        )


@dataclass
class SplitLedger:
    """The ledger at `path`, for the splits one command reads under one recipe (module docstring)."""

    path: Path
    recipe: str
    splits: list[Split] = field(default_factory=list)
    command: str = "run"

    def entries(self) -> list[dict]:
        if not self.path.is_file():
            return []
        out = []
        for n, line in enumerate(self.path.read_text(encoding="utf-8").splitlines(), 1):
            if line.strip():
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    raise UserError(
                        f"{self.path}:{n}: not a JSON line; the test ledger is lorarag's record of "
                        "test reads: restore the line or remove it"
                    ) from None
        return out

    def check(self, reread: bool = False) -> None:
        """UserError when a split was first read under another recipe and `reread` is not given."""
        entries = self.entries()
        for s in self.splits:
            first = next((e for e in entries if e.get("data") == s.key), None)
            if first is not None and first.get("recipe") != self.recipe and not reread:
                raise UserError(
                    f"{s.what} was first read under another recipe (run {first.get('run')}, "
                    f"{first.get('time')}; ledger {self.path}): reading it under this one spends it "
                    "on a decision, pass --reread-test to do so knowingly"
                )

    def record(self, run: str | Path) -> list[Reads]:
        """Append one line per split (this read), then each split's counts, this read included. The same
        run folder read again under the same recipe (a resume, a report written again) is the same read:
        it adds no line."""
        from lorarag.core.runinfo import git_sha

        self.path.parent.mkdir(parents=True, exist_ok=True)
        now, sha = time.strftime("%Y-%m-%dT%H:%M:%S%z"), git_sha()
        seen = {(e.get("data"), e.get("recipe"), e.get("run")) for e in self.entries()}
        lines = "".join(
            json.dumps(
                {
                    "data": s.key,
                    "split": s.what,
                    "recipe": self.recipe,
                    "git_sha": sha,
                    "time": now,
                    "run": str(run),
                    "command": self.command,
                },
                ensure_ascii=False,
            )
            + "\n"
            for s in self.splits
            if (s.key, self.recipe, str(run)) not in seen
        )
        with self.path.open("a", encoding="utf-8") as f:
            f.write(lines)
        return self.counts()

    def counts(self) -> list[Reads]:
        entries = self.entries()
        out = []
        for s in self.splits:
            mine = [e for e in entries if e.get("data") == s.key]
            out.append(Reads(s.what, len(mine), len({e.get("recipe") for e in mine})))
        return out


def run_ledger(cfg: RunConfig, groups: Mapping[str, Sequence[Any]], extra: Iterable[tuple[str, Path]] = ()) -> SplitLedger:
    """The ledger of a `lorarag run`: its KB's test facts and the extra sets it reads with split test
    (`extra`: (kind, file) pairs)."""
    splits = [Split(split_hash(groups), "the KB's test facts")]
    splits += [Split(file_hash(f), f"{kind} {Path(f).name}") for kind, f in extra]
    return SplitLedger(Path(cfg.runs_dir) / LEDGER, recipe_hash(cfg), splits, "run")


def eval_ledger(cfg: EvalConfig) -> SplitLedger | None:
    """The ledger of a `lorarag eval`, None when its scenario file is not named as a test split."""
    if not is_test_file(cfg.scenarios):
        return None
    return SplitLedger(
        Path(cfg.out_dir).parent / LEDGER,
        recipe_hash(cfg, ("scenarios",)),
        [Split(file_hash(cfg.scenarios), f"scenarios {Path(cfg.scenarios).name}")],
        "eval",
    )


def reads_text(summary: Mapping[str, Any]) -> str:
    """How often the run's test splits were read, as the summary's `test_reads` holds it ("" without)."""
    return "; ".join(Reads(**r).text() for r in summary.get("test_reads") or ())


def reads_note(summary: Mapping[str, Any]) -> list[str]:
    """The headline's note on how often the run's test splits were read (the summary's `test_reads`)."""
    text = reads_text(summary)
    return [text + " (the test ledger, study/ledger.py)."] if text else []


def note_reads(root: Path, reads: Sequence[Reads]) -> None:
    """Keep the counts in the run's data summary (`<run>/data/summary.json`, study/kb.py), where the
    headline reads its notes on the data (`reads_note`)."""
    from lorarag.study.kb import SUMMARY, read_summary

    summary = read_summary(root)
    if summary:
        summary["test_reads"] = [vars(r) for r in reads]
        (root / "data" / SUMMARY).write_text(json.dumps(summary, indent=1, ensure_ascii=False), encoding="utf-8")
