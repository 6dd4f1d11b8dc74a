"""State that proves what produced it (issue 26): an adapter is reused only for the SFT rows, base
model and recipe it was trained from; eval stamps and gate.json name the adapter by content; a
merge checks every shard against the merging config; garbled or truncated adapter files are one
line. Unit level, on files written here (or the shared tiny `lora`), no training."""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

import pytest
import yaml

from lorarag.core.errors import ConfigError, UserError
from lorarag.core.runinfo import start_run
from lorarag.eval.records import save_results
from lorarag.eval.runner import STAMP_FILE, run_eval
from lorarag.eval.shards import Shard, ShardError, merge_shards, select, shard_dir, write_stamp
from lorarag.fallback.gate import (
    FIT,
    GATE_FILE,
    GateCalibration,
    adapter_sha256,
    dev_sha256,
    gate_mismatch,
    generator_id,
    reusable_gate,
)
from lorarag.study.evaluate import system_stamp
from lorarag.study.training import train_or_reuse
from lorarag.train import runs, swift

from .eval_fixtures import make_item
from .test_run_e2e import _in_tmp

ROWS_A = '{"messages": [{"role": "user", "content": "Q: who leads Vesova?"}, {"role": "assistant", "content": "A"}]}\n'
ROWS_B = '{"messages": [{"role": "user", "content": "Q: who leads Orlen?"}, {"role": "assistant", "content": "B"}]}\n'


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _finished_run(tmp: Path, rows: str = ROWS_A):
    """A run config under `tmp` and a finished training run of it, as `swift.train` leaves one
    (config.yaml, a checkpoint, adapter.json with `trained_on`), trained on `rows`."""
    cfg = _in_tmp(tmp)
    base = Path(cfg.train.model)
    base.mkdir(parents=True)
    (base / "config.json").write_text('{"hidden_size": 8}')
    (base / "model.safetensors").write_bytes(b"weights-v1")
    Path(cfg.train.dataset).parent.mkdir(parents=True)
    Path(cfg.train.dataset).write_text(rows)
    Path(cfg.train.val_dataset).write_text(ROWS_B)
    rd = start_run(runs.run_dir(cfg.train), cfg.train)
    ad = rd / "output/checkpoint-2"
    ad.mkdir(parents=True)
    (ad / "adapter_config.json").write_text("{}")
    (ad / "adapter_model.safetensors").write_bytes(b"x")
    pointer = {"adapter": str(ad), "base_model": cfg.train.model, "trained_on": runs.training_record(cfg.train)}
    (rd / "adapter.json").write_text(json.dumps(pointer))
    return cfg, ad


def _write_rows(cfg, rows: str) -> None:
    """Stage 3 of a run: the SFT rows written before stage 4 looks for an adapter to reuse."""
    Path(cfg.train.dataset).write_text(rows)


def test_same_rows_base_and_recipe_reuse_the_adapter(tmp_path):
    cfg, ad = _finished_run(tmp_path)
    said: list[str] = []
    _write_rows(cfg, ROWS_A)
    assert train_or_reuse(cfg, fresh=False, echo=said.append) == ad
    assert any("reusing adapter" in s for s in said)


def test_other_sft_rows_are_refused_naming_both_hashes(tmp_path):
    """Issue 26.1: another split seed gives other rows; the old adapter is not reused for them."""
    cfg, ad = _finished_run(tmp_path)
    said: list[str] = []
    _write_rows(cfg, ROWS_B)
    with pytest.raises(ConfigError) as exc:
        train_or_reuse(cfg, fresh=False, echo=said.append)
    msg = str(exc.value)
    assert f"SFT rows (train: sha {_sha(ROWS_A)[:12]} vs {_sha(ROWS_B)[:12]})" in msg
    assert "--fresh" in msg and "\n" not in msg
    assert not any("reusing" in s for s in said)
    assert (ad / "adapter_model.safetensors").read_bytes() == b"x"  # nothing replaced unasked


def test_changed_validation_rows_and_base_are_refused(tmp_path):
    cfg, _ = _finished_run(tmp_path)
    Path(cfg.train.val_dataset).write_text(ROWS_A)
    (Path(cfg.train.model) / "model.safetensors").write_bytes(b"weights-v2")
    _write_rows(cfg, ROWS_A)
    with pytest.raises(ConfigError, match=r"SFT rows \(val: sha .*; base model \(model\.safetensors\)"):
        train_or_reuse(cfg, fresh=False, echo=lambda _: None)


def test_an_adapter_without_a_record_of_its_rows_is_not_reused(tmp_path):
    cfg, ad = _finished_run(tmp_path)
    (runs.run_dir(cfg.train) / "adapter.json").write_text(json.dumps({"adapter": str(ad)}))
    _write_rows(cfg, ROWS_A)
    with pytest.raises(ConfigError, match="records neither"):
        train_or_reuse(cfg, fresh=False, echo=lambda _: None)


def test_the_base_hash_is_cached_but_follows_a_rewrite(tmp_path):
    base = tmp_path / "base"
    base.mkdir()
    (base / "model.safetensors").write_bytes(b"one")
    (base / "README.md").write_text("not hashed")
    assert runs.base_fingerprint(str(base)) == {"model.safetensors": hashlib.sha256(b"one").hexdigest()}
    (base / "model.safetensors").write_bytes(b"two!")  # another size: never the cached hash
    assert runs.base_fingerprint(str(base)) == {"model.safetensors": hashlib.sha256(b"two!").hexdigest()}


def test_eval_stamp_names_the_adapter_by_content_not_path(tmp_path):
    """Issue 26.2: a retrained adapter at the same path must not resume the old one's results."""
    cfg, ad = _finished_run(tmp_path)
    sc = next(s for s in cfg.systems if s.uses_adapter)
    before = system_stamp(cfg, sc, [], ad, 0.5)
    want = hashlib.sha256(
        (
            "adapter_config.json:" + hashlib.sha256(b"{}").hexdigest() + "\n"
            "adapter_model.safetensors:" + hashlib.sha256(b"x").hexdigest() + "\n"
        ).encode()
    )
    assert before["adapter"] == want.hexdigest()
    assert system_stamp(cfg, sc, [], ad, 0.5) == before
    (ad / "adapter_model.safetensors").write_bytes(b"y")  # same path, same size, other bytes
    assert system_stamp(cfg, sc, [], ad, 0.5)["adapter"] != before["adapter"]


def test_gate_calibration_is_kept_only_for_its_adapter_and_dev_questions(tmp_path):
    cfg, ad = _finished_run(tmp_path)
    g, gen = cfg.fallback.gate, cfg.rag.generator
    dev = dev_sha256(["k1", "k2"], ["u1", "u2"])
    cal = GateCalibration(
        1.5,
        g.rule,
        2,
        2,
        1.0,
        1.0,
        0.9,
        generator=generator_id(gen),
        adapter=adapter_sha256(ad),
        dev=dev,
        fit=FIT,
        override=g.override,
    )
    assert reusable_gate(cal, g, gen, 2, 2, adapter=adapter_sha256(ad), dev=dev)
    # same sizes, another dev question: read again
    assert not reusable_gate(cal, g, gen, 2, 2, adapter=adapter_sha256(ad), dev=dev_sha256(["k1", "k3"], ["u1", "u2"]))
    assert dev_sha256(["k1"], ["k2"]) != dev_sha256(["k1", "k2"], [])  # the split line counts
    (ad / "adapter_model.safetensors").write_bytes(b"retrained")
    other = adapter_sha256(ad)
    assert not reusable_gate(cal, g, gen, 2, 2, adapter=other, dev=dev)
    assert gate_mismatch(cal, g, gen, other) == [f"adapter {cal.adapter[:12]} (in use: {other[:12]})"]


def test_calibrate_gate_reuses_a_matching_gate_json_without_reading_dev(tmp_path):
    """The reuse path: nothing is generated (no parts), the saved calibration comes back."""
    from lorarag.study.calibration import calibrate_gate

    cfg, ad = _finished_run(tmp_path)
    cal = GateCalibration(
        1.5,
        cfg.fallback.gate.rule,
        0,
        0,
        1.0,
        1.0,
        0.9,
        generator=generator_id(cfg.rag.generator),
        adapter=adapter_sha256(ad),
        dev=dev_sha256([], []),
        fit=FIT,
        override=cfg.fallback.gate.override,
    )
    cal.save(ad)
    said: list[str] = []
    got = calibrate_gate(cfg, None, ad, [], [], said.append)
    assert got.calibration == cal and any("reusing gate calibration" in s for s in said)
    (ad / "adapter_model.safetensors").write_bytes(b"retrained")
    with pytest.raises(AttributeError):  # not reused: it goes on to read the dev split with the (absent) model
        calibrate_gate(cfg, None, ad, [], [], said.append)


ITEMS = [make_item(qid=f"org{i:03d}/ceo/p3/consistent") for i in range(12)]
QIDS = [r.qid for r in ITEMS]


def test_merge_is_refused_under_another_config(tmp_path):
    """Issue 26.3: shards run with max_new_tokens 8 are not written as the results of a config with 4."""
    ran = {"generator": {"max_new_tokens": 8}, "system": "lora_rag"}
    for i in range(3):
        folder = shard_dir(tmp_path, Shard(i, 3))
        save_results(folder / "results.jsonl", select(ITEMS, Shard(i, 3)))
        write_stamp(folder, ran)
    with pytest.raises(ShardError, match=r"shard 0/3 .* \(generator\.max_new_tokens differ\)"):
        merge_shards(tmp_path, 3, QIDS, stamp={"generator": {"max_new_tokens": 4}, "system": "lora_rag"})
    assert not (tmp_path / "results.jsonl").exists()
    assert merge_shards(tmp_path, 3, QIDS, stamp=ran) == ITEMS
    assert json.loads((tmp_path / STAMP_FILE).read_text()) == ran


class _Never:
    """A system the runner never has to ask (its shard has no items)."""

    name = "lora_rag"

    def answer_scenarios(self, items: list) -> list:
        raise AssertionError("an empty shard asks nothing")


def test_an_empty_shard_writes_empty_results_that_merge(tmp_path):
    items = ITEMS[:2]  # 2 items over 3 shards: at least one shard selects nothing
    stamp = {"system": "lora_rag"}
    empty = [i for i in range(3) if not select(items, Shard(i, 3))]
    assert empty
    for i in range(3):
        folder = shard_dir(tmp_path, Shard(i, 3))
        if i in empty:
            assert run_eval(_Never(), [], folder, stamp=stamp, progress=False) == []
            assert (folder / "results.jsonl").read_text() == ""
        else:
            save_results(folder / "results.jsonl", select(items, Shard(i, 3)))
            write_stamp(folder, stamp)
    assert merge_shards(tmp_path, 3, [r.qid for r in items], stamp=stamp) == items


# --- unreadable adapter files: one line naming the file --------------------------------------------


def _run_dir(tmp: Path):
    """A `lorarag run` dir (config.yaml) whose training run points at a copy of the tiny lora."""
    cfg = _in_tmp(tmp)
    root = Path(cfg.runs_dir) / cfg.name
    root.mkdir(parents=True)
    (root / "config.yaml").write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    rd = runs.run_dir(cfg.train)
    rd.mkdir(parents=True)
    return cfg, root, rd


def _ask(run: Path) -> tuple[int, str]:
    import subprocess

    out = subprocess.run(
        [sys.executable, "-m", "lorarag.cli", "ask", "Who leads Vesova?", "--run", str(run)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return out.returncode, out.stderr


@pytest.mark.parametrize("spoil", ["run_config", "pointer", "adapter_config", "truncated", "gate"])
def test_garbled_adapter_files_are_one_line_errors(tmp_path, lora, spoil):
    from lorarag.trained.load import read_run

    _, root, rd = _run_dir(tmp_path)
    ad = rd / "output/checkpoint-1"
    shutil.copytree(lora, ad)
    (rd / "adapter.json").write_text(json.dumps({"adapter": str(ad)}))
    weights = ad / "adapter_model.safetensors"
    runs.check_adapter(ad)  # the intact adapter passes
    if spoil == "run_config":
        bad = root / "config.yaml"
        bad.write_text("name: [unclosed\n")
    elif spoil == "pointer":
        bad = rd / "adapter.json"
        bad.write_text('{"adapter": ')
    elif spoil == "adapter_config":
        bad = ad / "adapter_config.json"
        bad.write_text("{not json")
    elif spoil == "truncated":
        bad = weights
        bad.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    else:
        bad = ad / GATE_FILE
        bad.write_text('{"threshold": 1.')
    with pytest.raises(UserError) as exc:
        read_run(root)
    assert str(bad) in str(exc.value) and "\n" not in str(exc.value)
    if spoil == "truncated":  # the same through the CLI: `error: ...`, exit 2, no traceback
        code, err = _ask(root)
        assert code == 2 and err.strip().startswith("error: ") and "Traceback" not in err
        assert "truncated" in err


def test_checkpoints_are_not_resumed_on_other_rows(tmp_path):
    """An unfinished run (checkpoints, no adapter.json yet) continues only on the rows it started on."""
    cfg, _ = _finished_run(tmp_path)
    rd = runs.run_dir(cfg.train)
    (rd / "adapter.json").unlink()
    ck = rd / "output/checkpoint-2"
    (ck / "trainer_state.pt").write_bytes(b"s")  # a complete checkpoint
    start_run(rd, cfg.train, data=[cfg.train.dataset, cfg.train.val_dataset])
    assert runs.resume_changes(cfg.train, [cfg.train.dataset, cfg.train.val_dataset]) == []
    Path(cfg.train.dataset).write_text(ROWS_B)
    with pytest.raises(swift.TrainError, match=r"other SFT rows \(.*train\.jsonl changed\); rerun with --fresh"):
        swift.train(cfg.train)
    assert (ck / "adapter_model.safetensors").read_bytes() == b"x"
