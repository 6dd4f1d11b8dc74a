"""Sharded evaluation: the partition by qid, the checked merge, the Slurm array script."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lorarag.core.errors import ConfigError, UserError
from lorarag.eval.records import load_results, save_results
from lorarag.eval.shards import Shard, ShardError, merge_shards, select, shard_dir, shard_of, slurm_array, write_stamp

from .eval_fixtures import make_item

ITEMS = [make_item(qid=f"org{i:03d}/ceo/p3/{s}") for i in range(40) for s in ("consistent", "factual_error")]
QIDS = [r.qid for r in ITEMS]


def test_the_partition_covers_every_item_once_and_is_balanced():
    for n in (1, 2, 3, 7):
        parts = [select(ITEMS, Shard(i, n)) for i in range(n)]
        assert sorted(r.qid for p in parts for r in p) == sorted(QIDS)
        assert all(len(p) > len(ITEMS) / n / 3 for p in parts)  # 80 items: no shard starved
        assert all([r.qid for r in p] == [q for q in QIDS if q in {r.qid for r in p}] for p in parts)  # order kept


def test_the_partition_is_the_same_in_another_process_with_another_hash_seed():
    code = f"from lorarag.eval.shards import shard_of; print([shard_of(q, 5) for q in {QIDS[:20]!r}])"
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert out.stdout.strip() == str([shard_of(q, 5) for q in QIDS[:20]])


def _write_shards(out: Path, n: int, stamp: dict | None = None, rows=ITEMS) -> None:
    for i in range(n):
        folder = shard_dir(out, Shard(i, n))
        save_results(folder / "results.jsonl", select(rows, Shard(i, n)))
        write_stamp(folder, stamp or {"system": "lora_rag", "adapter": "a1"})


def test_merge_gives_the_rows_in_the_set_order(tmp_path):
    _write_shards(tmp_path, 3)
    merged = merge_shards(tmp_path, 3, QIDS)
    assert merged == ITEMS and load_results(tmp_path) == ITEMS
    with pytest.raises(ShardError, match="never overwrites"):
        merge_shards(tmp_path, 3, QIDS)


@pytest.mark.parametrize(
    "spoil,message",
    [
        ("missing", "shard 1/3 missing"),
        ("duplicate", "duplicate result for qid"),  # the results reader refuses it, a line named
        ("stamp", "different stamps"),
        ("absent", r"1 item\(s\) missing"),
        ("foreign", "not in the scenario set"),
        ("wrong-shard", "belongs to shard"),
    ],
)
def test_merge_refuses_what_one_process_would_not_have_written(tmp_path, spoil, message):
    _write_shards(tmp_path, 3)
    s0, s1 = shard_dir(tmp_path, Shard(0, 3)), shard_dir(tmp_path, Shard(1, 3))
    qids = QIDS
    if spoil == "missing":
        (s1 / "results.jsonl").unlink()
    elif spoil == "duplicate":
        rows = load_results(s0)
        save_results(s0 / "results.jsonl", rows + rows[:1])
    elif spoil == "stamp":
        write_stamp(s1, {"system": "lora_rag", "adapter": "a2"})
    elif spoil == "absent":
        qids = QIDS + ["never/evaluated"]
    elif spoil == "foreign":
        qids = [q for q in QIDS if q != load_results(s0)[0].qid]
    elif spoil == "wrong-shard":
        save_results(s0 / "results.jsonl", load_results(s0) + load_results(s1)[:1])
    with pytest.raises(UserError, match=message):
        merge_shards(tmp_path, 3, qids)
    assert not (tmp_path / "results.jsonl").exists()


def test_bad_shard_specs_are_one_line_errors():
    assert Shard.parse("2/4") == Shard(2, 4)
    for bad in ("4/4", "-1/3", "1", "a/b", "0/0"):
        with pytest.raises(ConfigError, match="--shard"):
            Shard.parse(bad)


def test_slurm_array_script_runs_one_shard_per_task(tmp_path):
    path = slurm_array("configs/eval/x.yaml", 8, tmp_path / "eval.sbatch", partition="gpu")
    text = path.read_text()
    assert "#SBATCH --array=0-7" in text and "#SBATCH --partition=gpu" in text
    assert 'eval configs/eval/x.yaml --shard "$SLURM_ARRAY_TASK_ID/8"' in text and "--merge 8" in text
    assert subprocess.run(["bash", "-n", str(path)]).returncode == 0  # valid shell
    with pytest.raises(ConfigError, match="is a folder"):
        slurm_array("c.yaml", 2, tmp_path)
