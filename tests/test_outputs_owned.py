"""Outputs never overwrite what lorarag did not write (issue 26): every CLI output path that holds a
user's file is a one-line `error:` (exit 2) with the file byte-identical afterwards; `--force`
replaces it; a file we wrote and nobody edited is rewritten without it; an input of the command
(its config, its results) is never an output, not even with `--force`. Milvus Lite: a corrupt
collection manifest never reaches Milvus, and its own tracebacks stay out of the terminal."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lorarag.core import outputs
from lorarag.eval.records import save_results
from tests.eval_fixtures import make_item

from .conftest import REPO
from .test_bad_input import one_line_error

USER = b"#!/bin/bash\n# my own job script\nsbatch real-work.sh\n"
TRAIN = REPO / "configs/train/tiny.yaml"
EVAL = REPO / "configs/eval/cpu-demo-base-rag.yaml"


@pytest.fixture
def configs(tmp_path):
    """Copies of a train and an eval config (the tests may try to write over them)."""
    t, e = tmp_path / "train.yaml", tmp_path / "eval.yaml"
    shutil.copy(TRAIN, t)
    shutil.copy(EVAL, e)
    return t, e


def _slurm_cmds(configs, target: Path) -> list[list]:
    t, e = configs
    return [["train", t, "--slurm", target], ["eval", e, "--slurm", target, "--shards", "2"]]


@pytest.mark.parametrize("which", [0, 1], ids=["train", "eval"])
def test_slurm_over_a_users_file_is_refused_and_force_replaces_it(tmp_path, cli, configs, which):
    target = tmp_path / "job.sh"
    target.write_bytes(USER)
    cmd = _slurm_cmds(configs, target)[which]
    one_line_error(*cli(*cmd)[::2], str(target), "--force")
    assert target.read_bytes() == USER
    code, _, err = cli(*cmd, "--force")
    assert code == 0, err
    assert target.read_bytes().startswith(b"#!/bin/bash\n#SBATCH") and b"real-work" not in target.read_bytes()


@pytest.mark.parametrize("which", [0, 1], ids=["train", "eval"])
def test_a_script_we_wrote_is_rewritten_but_not_once_edited(tmp_path, cli, configs, which):
    target = tmp_path / "job.sh"
    cmd = _slurm_cmds(configs, target)[which]
    assert cli(*cmd)[0] == 0
    first = target.read_bytes()
    assert cli(*cmd)[0] == 0  # ours, unchanged: no --force needed
    assert target.read_bytes() == first
    edited = first + b"# tuned by hand\n"
    target.write_bytes(edited)
    one_line_error(*cli(*cmd)[::2], str(target), "edited")
    assert target.read_bytes() == edited


@pytest.mark.parametrize("which", [0, 1], ids=["train", "eval"])
@pytest.mark.parametrize("force", [[], ["--force"]], ids=["plain", "force"])
def test_slurm_never_writes_over_its_own_config(cli, configs, which, force):
    config = configs[which]
    before = config.read_bytes()
    cmd = _slurm_cmds(configs, config)[which]
    one_line_error(*cli(*cmd, *force)[::2], "is an input of this command")
    assert config.read_bytes() == before


def test_eval_slurm_for_a_missing_config_writes_nothing(tmp_path, cli):
    target = tmp_path / "s.sh"
    one_line_error(
        *cli("eval", tmp_path / "nonexistent.yaml", "--slurm", target, "--shards", "2")[::2],
        "nonexistent.yaml",
        "no such config file",
    )
    assert not target.exists()


def _runs(tmp_path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / "a", tmp_path / "b"
    save_results(a / "results.jsonl", [make_item(system="base", qid=f"q{i}") for i in range(3)])
    save_results(b / "results.jsonl", [make_item(system="lora", qid=f"q{i}", answer="no") for i in range(3)])
    return a, b


@pytest.mark.parametrize("name", ["report.md", "metrics.json"])
def test_report_out_keeps_a_users_report(tmp_path, cli, name):
    a, b = _runs(tmp_path)
    rep = tmp_path / "rep"
    rep.mkdir()
    mine = rep / name
    mine.write_bytes(b"my own notes\n")
    one_line_error(*cli("report", a, b, "--out", rep, "--resamples", 1000)[::2], str(mine), "--force")
    assert mine.read_bytes() == b"my own notes\n"
    assert sorted(p.name for p in rep.iterdir()) == [name]  # refused before anything was written
    code, _, err = cli("report", a, b, "--out", rep, "--resamples", 1000, "--force")
    assert code == 0, err
    assert mine.read_bytes() != b"my own notes\n" and (rep / "report.html").is_file()
    code, _, err = cli("report", a, b, "--out", rep, "--resamples", 1000)  # all ours now
    assert code == 0, err


def test_report_into_a_run_dir_never_touches_its_results(tmp_path, cli):
    a, _ = _runs(tmp_path)
    (a / "report.md").write_text("notes")
    before = (a / "results.jsonl").read_bytes()
    one_line_error(*cli("report", a, "--out", a, "--resamples", 1000)[::2], "report.md")
    assert (a / "report.md").read_text() == "notes"
    # results.jsonl is not among the report's files, so --force replaces report.md and nothing it reads
    assert cli("report", a, "--out", a, "--resamples", 1000, "--force")[0] == 0
    assert (a / "results.jsonl").read_bytes() == before


@pytest.mark.parametrize("name", ["compare.md", "compare.json"])
def test_compare_out_keeps_a_users_file(tmp_path, cli, name):
    a, b = _runs(tmp_path)
    out = tmp_path / "cmp"
    out.mkdir()
    (out / name).write_bytes(b"mine")
    one_line_error(*cli("compare", a, b, "--out", out, "--resamples", 1000)[::2], name, "--force")
    assert (out / name).read_bytes() == b"mine"
    assert cli("compare", a, b, "--out", out, "--resamples", 1000, "--force")[0] == 0
    assert (out / name).read_bytes() != b"mine"
    assert cli("compare", a, b, "--out", out, "--resamples", 1000)[0] == 0  # ours now


def _conflictnq(tmp_path: Path) -> Path:
    row = {
        "id": 7,
        "question": "Who wrote it?",
        "real_passages": [{"passage": "Ann wrote it."}],
        "fake_passages": [{"passage": "Bob wrote it."}],
        "real_short_answer": "Ann",
        "fake_short_answer": "Bob",
    }
    (tmp_path / "data" / "conflictnq").mkdir(parents=True)
    (tmp_path / "data" / "conflictnq" / "test.jsonl").write_text(json.dumps(row) + "\n")
    return tmp_path / "data"


@pytest.mark.parametrize("which", ["o.jsonl", "o.chunks.jsonl"])
def test_import_conflicts_out_keeps_a_users_file(tmp_path, cli, which):
    data, out = _conflictnq(tmp_path), tmp_path / "o.jsonl"
    (tmp_path / which).write_bytes(b"mine\n")
    one_line_error(*cli("import-conflicts", "conflictnq", "--data", data, "--out", out)[::2], which, "--force")
    assert (tmp_path / which).read_bytes() == b"mine\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", which]
    assert cli("import-conflicts", "conflictnq", "--data", data, "--out", out, "--force")[0] == 0
    assert len(out.read_text().splitlines()) == 2  # consistent + one factual_error
    assert cli("import-conflicts", "conflictnq", "--data", data, "--out", out)[0] == 0  # ours now


def test_import_conflicts_never_writes_over_its_data(tmp_path, cli):
    data = _conflictnq(tmp_path)
    src = data / "conflictnq" / "test.jsonl"
    before = src.read_bytes()
    one_line_error(
        *cli("import-conflicts", "conflictnq", "--data", data, "--out", src, "--force")[::2], "is an input of this command"
    )
    assert src.read_bytes() == before


def test_ownership_is_by_content_hash(tmp_path):
    p = outputs.write_text(tmp_path / "x.txt", "ours\n")
    assert outputs.is_ours(p)
    recorded = json.loads((tmp_path / outputs.MANIFEST).read_text())["files"]["x.txt"]
    assert recorded == hashlib.sha256(b"ours\n").hexdigest()
    p.write_text("ours\n\n")
    assert not outputs.is_ours(p)
    p.write_text("ours\n")  # back to the bytes we wrote: ours again
    assert outputs.is_ours(p)


def test_index_dir_in_an_unwritable_folder_is_one_line(tmp_path, cli):
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "a.md").write_text("Some text about the sea.")
    if os.geteuid() == 0:  # root writes anywhere a mode bit forbids: use a folder no one can create in
        index = Path("/proc/lorarag-no-such/idx")
    else:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        index = ro / "idx"
    cfg = tmp_path / "rag.yaml"
    cfg.write_text(f"corpus: {{paths: [{kb}]}}\nindex: {{dir: {index}, bm25: {{tokenizer: word}}}}\n")
    one_line_error(*cli("index", cfg)[::2], f"index.dir {index}")
    assert not index.exists()


# --------------------------------------------------------------------------------------
# Milvus Lite: one small real collection, built once for the module.
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def milvus_index(tiny_models, tmp_path_factory):
    pytest.importorskip("pymilvus", reason="pymilvus[milvus_lite] is not installed (make install)")
    root = tmp_path_factory.mktemp("milvus")
    kb = root / "kb"
    kb.mkdir()
    for i in range(6):
        (kb / f"d{i}.md").write_text(f"Organisation {i} is based in city {i}.", encoding="utf-8")
    cfg = root / "rag.yaml"
    cfg.write_text(
        f"corpus: {{paths: [{kb}]}}\nindex: {{dir: {root / 'idx'}, dense: {{kind: milvus}}}}\n"
        f"embedder: {{kind: transformers, model: {tiny_models['embedder']}, query_instruction: null}}\n"
        "retrieval: {mode: hybrid, top_n: 3, top_k: 2}\n"
    )
    done = _lorarag("index", cfg)
    assert done.returncode == 0, done.stderr[-1500:]
    return root, cfg


def _lorarag(*args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "lorarag.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        check=False,
        **kw,
    )


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _assert_one_line(done: subprocess.CompletedProcess, *needles: str) -> str:
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and all(n in last for n in needles), last
    return last


def test_milvus_corrupt_collection_manifest_never_reaches_milvus(milvus_index, tmp_path):
    root, cfg = milvus_index
    db = root / "idx.milvus.db"
    keep = tmp_path / "db"
    shutil.copytree(db, keep)  # the module's database is restored afterwards
    try:
        (manifest,) = db.glob("collections/*/manifest.json")
        manifest.write_text('{"broken')
        before = _files(db)
        assert any(k.endswith(".parquet") for k in before) and any(k.endswith(".idx") for k in before)
        done = _lorarag("search", "city 3", "--config", cfg)
        _assert_one_line(done, "manifest.json", "unreadable", "not opened")
        assert _files(db) == before  # nothing deleted, nothing rewritten
    finally:
        shutil.rmtree(db)
        shutil.copytree(keep, db)
    assert _lorarag("search", "city 3", "--config", cfg).returncode == 0


def test_milvus_lock_held_by_another_process_is_named_without_traceback(milvus_index):
    root, cfg = milvus_index
    db = root / "idx.milvus.db"
    holder = (
        "import time\nfrom pymilvus import MilvusClient\n"
        f"c = MilvusClient(uri={str(db)!r})\nprint('held', flush=True)\ntime.sleep(120)"
    )
    hold = subprocess.Popen([sys.executable, "-c", holder], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert hold.stdout.readline().strip() == "held"
        done = _lorarag("search", "city 3", "--config", cfg)
        _assert_one_line(done, "another process holds the lock")
        assert "milvus_lite" not in done.stderr  # Milvus Lite's own log lines stay out of the terminal
    finally:
        hold.kill()
        hold.wait()
    time.sleep(0.5)
    assert _lorarag("search", "city 3", "--config", cfg).returncode == 0


def test_milvus_record_naming_another_database_is_refused(milvus_index, tmp_path):
    root, cfg = milvus_index
    meta = root / "idx" / "dense.milvus.json"
    original = meta.read_bytes()
    user_db = tmp_path / "mine.db"
    user_db.write_bytes(b"user data")
    try:
        data = json.loads(original)
        meta.write_text(json.dumps({**data, "uri": str(user_db)}))
        _assert_one_line(_lorarag("search", "city 3", "--config", cfg), "names Milvus at", "rebuild")
        assert user_db.read_bytes() == b"user data"
    finally:
        meta.write_bytes(original)


def test_world_out_keeps_a_users_file_and_rewrites_its_own(tmp_path, cli):
    out = tmp_path / "world"
    out.mkdir()
    (out / "corpus.jsonl").write_bytes(b"my corpus\n")
    one_line_error(*cli("world", "--out", out, "--n-orgs", 4)[::2], "corpus.jsonl", "--force")
    assert sorted(p.name for p in out.iterdir()) == ["corpus.jsonl"]  # refused before anything is written
    assert (out / "corpus.jsonl").read_bytes() == b"my corpus\n"
    assert cli("world", "--out", out, "--n-orgs", 4, "--force")[0] == 0
    assert cli("world", "--out", out, "--n-orgs", 4)[0] == 0  # ours now
    assert (out / "corpus.jsonl").read_bytes() != b"my corpus\n"
    assert {p.name for p in out.iterdir()} >= {"corpus.jsonl", "questions.jsonl", "older.jsonl"}
