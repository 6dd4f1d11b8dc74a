"""What training showed against what the test asks: contexts (between stages 4 and 5) and wordings.

No flawed test context may be one the SFT rows showed.

The rows are read back from disk (train and val, as the adapter was or will be trained on them;
the RAG-SFT adapter's too when the run trains one: the same passages, re-posed),
every test item's context is looked up in them (train/overlap.py), and the table goes into
run.json (`test_context_overlap`) and `data/overlap.json`, from where the headline prints it. A
factual-error, outdated or irrelevant test context that training showed, verbatim or as an edited
twin (an edit of the same knowledge-base chunk, at any length and in any script), or whose wrong
value a training row of the same fact labels flawed in another passage, stops the run with a
one-line error naming the item: its cell would measure memory of a label, not detection. The SFT
rows are built so that this cannot happen (train/sft.build_rows leaves out every flawed row that
edits a chunk a flawed test context edits); the check proves it on the rows as written.

No known item's held-out test wording (scenarios/kb_wordings.py) may be asked by an SFT row as
written (train and val, read back from disk) or by a question of the gate's dev split: the test
would measure a remembered sentence, and the gate would be calibrated on the test's questions.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path

from lorarag.core.errors import ConfigError
from lorarag.fallback.format import inert_question
from lorarag.scenarios.records import Scenario
from lorarag.study.run_folder import Echo, Paths
from lorarag.train.overlap import FLAWED, CellOverlap, TrainingSources, leaking, overlap_table
from lorarag.train.preference import pairs_path
from lorarag.train.sft import LeakError, asked, leak_check, read_sft, wording_keys
from lorarag.trained.adapters import needs_rag_sft, rag_sft_config
from lorarag.trained.config import RunConfig

OVERLAP_FILE = "overlap.json"


def _key(question: str) -> str:
    return " ".join(inert_question(question).split())


def check_test_contexts(
    cfg: RunConfig,
    paths: Paths,
    test: Sequence[Scenario],
    owners: Mapping[str, tuple[str, str]],
    kb_texts: Mapping[str, str],
    echo: Echo,
) -> list[CellOverlap]:
    """The overlap table of `test` against the SFT rows on disk; ConfigError on a flawed leak.
    `owners`: every question training may ask -> (fact, cluster)."""
    trains = [cfg.train] + ([rag_sft_config(cfg).train] if needs_rag_sft(cfg) else [])
    files = [Path(f) for t in trains for f in (t.dataset, t.val_dataset) if f]
    if cfg.train.preference.enabled:  # the preference pairs' prompts (train/preference.py) are training too
        files.append(pairs_path(cfg.train.dataset))
    rows = [r for f in files if f.is_file() for r in read_sft(f)]
    index = {_key(q): o for q, o in owners.items()}
    sources = TrainingSources(rows, lambda q: index.get(" ".join(q.split()), (None, None)))
    table = overlap_table(test, sources, kb_texts)
    record = [asdict(c) for c in table]
    (paths.root / "data").mkdir(parents=True, exist_ok=True)
    (paths.root / "data" / OVERLAP_FILE).write_text(json.dumps(record, indent=1), encoding="utf-8")
    run_json = paths.root / "run.json"
    if run_json.is_file():
        info = json.loads(run_json.read_text(encoding="utf-8"))
        info["test_context_overlap"] = record
        tmp = run_json.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(info, indent=1, sort_keys=True), encoding="utf-8")
        tmp.replace(run_json)
    bad = leaking(table)
    shown = sum(c.edited for c in table if c.scenario == "consistent")
    echo(
        f"          test contexts in the SFT rows ({len(rows)} rows): consistent {shown} (the KB itself), "
        f"flawed: verbatim {sum(c.verbatim for c in table if c.scenario in FLAWED)}, edited twins "
        f"{sum(c.edited for c in table if c.scenario in FLAWED)}; flawed test values a training row labels: "
        f"{sum(c.claim for c in table if c.scenario in FLAWED)}"
    )
    if bad:
        c = bad[0]
        if not c.edited:
            raise ConfigError(
                f"test item {c.first}: the wrong value its {c.scenario} context asserts is one an SFT row "
                f"of the same fact labels {'outdated' if c.scenario == 'outdated' else 'conflicting'} "
                f"({c.claim} of {c.n} {c.scenario} ({c.knowledge}) items): the cell would measure a "
                f"remembered label; see {paths.root / 'data' / OVERLAP_FILE}"
            )
        raise ConfigError(
            f"test item {c.first}: its {c.scenario} context is one the SFT rows show, verbatim or as "
            f"an edited twin ({c.edited} of {c.n} {c.scenario} ({c.knowledge}) items; verbatim "
            f"{c.verbatim}): the cell would "
            f"measure a remembered label; see {paths.root / 'data' / OVERLAP_FILE}"
        )
    return table


def check_written_wordings(cfg: RunConfig, wordings: Mapping[str, str]) -> None:
    """LeakError naming the file, row and item when an SFT row on disk (train or val) asks a held-out
    test wording (`wordings`: wording -> qid)."""
    for f in [Path(cfg.train.dataset)] + ([Path(cfg.train.val_dataset)] if cfg.train.val_dataset else []):
        try:
            leak_check(read_sft(f), (), {}, (), wordings)
        except LeakError as exc:
            raise LeakError(f"{f}: {exc}") from None


def check_dev_wordings(dev: Sequence[Scenario], wordings: Mapping[str, str]) -> None:
    """LeakError naming the item when a question of the gate's dev split is a held-out test wording."""
    keys = wording_keys(wordings)
    bad = [(s.qid, keys[asked(s.question)]) for s in dev if asked(s.question) in keys]
    if bad:
        raise LeakError(
            f"{len(bad)} gate dev question(s) ask a held-out test wording: dev item {bad[0][0]} asks {bad[0][1]}"
        )


def read_overlap(root: Path) -> list[CellOverlap]:
    """The table a run wrote (empty when it has none)."""
    f = root / "data" / OVERLAP_FILE
    if not f.is_file():
        return []
    return [CellOverlap.from_record(r) for r in json.loads(f.read_text(encoding="utf-8"))]
