"""Bad inputs through the real CLI entry point: each ends in one `error: ...` line with exit 2, or in
correct behaviour; nothing of the user's is touched. One test per case of issue 21, and more in its
spirit. The unit tests beside each mechanism live in the test file of its module."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lorarag.eval.records import save_results
from lorarag.rag.config import BM25Config, IndexConfig
from lorarag.rag.index.store import build_from_chunks
from lorarag.rag.records import Chunk, write_jsonl
from lorarag.scenarios.records import PresentedChunk, Scenario, save_scenarios
from tests.eval_fixtures import make_item
from tests.servers import free_port

from .conftest import REPO


def one_line_error(code: int, err: str, *needles: str) -> str:
    """The error line, checked: exit 2, last stderr line `error: ...` holding every needle, no traceback."""
    assert code == 2, err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: "), err
    for n in needles:
        assert n in last, last
    return last


def rag_config(tmp_path: Path, corpus: Path, index: Path, extra: str = "") -> Path:
    cfg = tmp_path / "rag.yaml"
    cfg.write_text(
        f"corpus: {{paths: [{corpus}]}}\nindex: {{dir: {index}, bm25: {{tokenizer: word}}}}\n{extra}", encoding="utf-8"
    )
    return cfg


def kb(tmp_path: Path, files: dict[str, str] | None = None) -> Path:
    root = tmp_path / "kb"
    root.mkdir(exist_ok=True)
    for name, text in (files or {"a.md": "The speed limit is fifty.", "b.md": "Parking is free."}).items():
        (root / name).write_text(text, encoding="utf-8")
    return root


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# --- 1. data loss: the index never replaces what is not its own ------------------------------------


@pytest.mark.parametrize("command", ["index", "search"])
def test_index_and_search_refuse_a_folder_of_the_users_files(tmp_path, cli, command):
    corpus = kb(tmp_path)
    mine = tmp_path / "papers"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work", encoding="utf-8")
    cfg = rag_config(tmp_path, corpus, mine)
    args = ["index", cfg] if command == "index" else ["search", "limit", "--config", cfg]
    one_line_error(*cli(*args)[::2], "is not an index", "refusing to replace it")
    assert snapshot(mine) == {"thesis.tex": b"years of work"}


def test_the_corpus_itself_or_a_file_is_never_an_index(tmp_path, cli):
    corpus = kb(tmp_path)
    before = snapshot(corpus)
    one_line_error(*cli("index", rag_config(tmp_path, corpus, corpus))[::2], "overlap")
    assert snapshot(corpus) == before
    afile = tmp_path / "notes.txt"
    afile.write_text("keep", encoding="utf-8")
    one_line_error(*cli("search", "limit", "--config", rag_config(tmp_path, corpus, afile))[::2], "is a file")
    assert afile.read_text(encoding="utf-8") == "keep" and sorted(p.name for p in tmp_path.iterdir()) == [
        "kb",
        "notes.txt",
        "rag.yaml",
    ]  # not renamed away, nothing left beside it


def test_a_killed_rebuild_leaves_nothing_behind_after_the_next(tmp_path):
    """SIGKILL mid-build (a real child process), then a rebuild: the `.building-*` folder is gone."""
    corpus = kb(tmp_path)
    child = (
        f"import os, signal, sys\nsys.path.insert(0, {str(REPO)!r})\n"
        "from lorarag.rag.index import store as index\n"
        "index.BM25Part.save = lambda self, folder: os.kill(os.getpid(), signal.SIGKILL)\n"
        "from lorarag.rag.config import *\n"
        f"index.build_index(CorpusConfig(paths=[{str(corpus)!r}]), ChunkerConfig(), "
        f"IndexConfig(dir={str(tmp_path / 'idx')!r}))\n"
    )
    p = subprocess.run([sys.executable, "-c", child], capture_output=True, timeout=120)
    assert p.returncode == -9
    assert [x.name for x in tmp_path.glob(".idx.building-*")]  # what the kill left
    cfg = rag_config(tmp_path, corpus, tmp_path / "idx")
    assert (
        subprocess.run(
            [sys.executable, "-m", "lorarag.cli", "index", str(cfg)], cwd=REPO, capture_output=True, timeout=300
        ).returncode
        == 0
    )
    assert sorted(x.name for x in tmp_path.iterdir()) == ["idx", "kb", "rag.yaml"]


# --- 2. mixed results: `lorarag eval` refuses to resume onto another config -----------------------


def _eval_setup(tmp_path: Path, max_new_tokens: int, relevant: str = "kb1") -> Path:
    run = tmp_path / "run.yaml"
    run.write_text(
        f"base: {REPO / 'configs/run/ci-tiny.yaml'}\nruns_dir: {tmp_path / 'runs'}\n"
        f"train: {{runs_dir: {tmp_path / 'train'}}}\nrag: {{index: {{dir: {tmp_path / 'index'}}}}}\n",
        encoding="utf-8",
    )
    save_scenarios(
        tmp_path / "scen.jsonl",
        [
            Scenario(
                "q1", "f1", "Limit?", ("50",), (relevant,), "consistent", (PresentedChunk("kb1", "The limit is 50."),), "50"
            )
        ],
    )
    cfg = tmp_path / f"eval-{max_new_tokens}.yaml"
    cfg.write_text(
        f"scenarios: {tmp_path / 'scen.jsonl'}\ncomponents: {run}\nout_dir: {tmp_path / 'out'}\n"
        f"system: {{kind: base_rag, name: base, max_new_tokens: {max_new_tokens}}}\n",
        encoding="utf-8",
    )
    return cfg


def test_eval_refuses_to_resume_onto_another_config_and_fresh_starts_over(tmp_path, cli):
    from lorarag.core.config import load_config
    from lorarag.eval.config import EvalConfig
    from lorarag.eval.runner import claim_run_dir
    from lorarag.scenarios.records import load_scenarios
    from lorarag.study.eval_system import eval_stamp

    a, b = _eval_setup(tmp_path, 8), _eval_setup(tmp_path, 16)
    out = tmp_path / "out"
    claim_run_dir(out, eval_stamp(load_config(a, EvalConfig), load_scenarios(tmp_path / "scen.jsonl")))
    save_results(out / "results.jsonl", [make_item(system="base", qid="q1")])  # a run of config a
    before = snapshot(out)
    one_line_error(*cli("eval", b)[::2], "holds results made with another config", "system.max_new_tokens", "--fresh")
    assert snapshot(out) == before
    code, _, err = cli("eval", b, "--fresh")  # starts over: then needs what the run wrote, which it never did
    one_line_error(code, err, "runs/ci-tiny/data/chunks.jsonl: not found: run `lorarag run ")
    removed = err.split("--fresh: removed ", 1)[1].split(" from ", 1)[0].split(", ")
    assert "results.jsonl" in removed and not (out / "results.jsonl").exists()  # and the stamp, lorarag's too
    one_line_error(*cli("eval", b, "--limit", "0")[::2], "with --limit", "limit must be >= 1")


def test_eval_refuses_scenario_chunk_ids_that_are_not_in_the_index(tmp_path, cli):
    cfg = _eval_setup(tmp_path, 8, relevant="not-in-kb")
    chunks = [Chunk("kb1", "a.md", "a.md", "The limit is 50.", 0, 16)]
    write_jsonl(tmp_path / "runs/ci-tiny/data/chunks.jsonl", chunks)  # the KB's chunks, as `lorarag run` leaves them
    build_from_chunks(chunks, IndexConfig(dir=str(tmp_path / "index"), bm25=BM25Config()))
    one_line_error(*cli("eval", cfg)[::2], "1 scenario(s) name chunk ids not in the knowledge base: q1: not-in-kb")


def test_eval_with_an_openai_generator_names_the_tokenizer_key(tmp_path, cli):
    cfg = _eval_setup(tmp_path, 8)
    (tmp_path / "run.yaml").write_text(
        f"base: {REPO / 'configs/run/ci-tiny.yaml'}\nrag:\n  index: {{dir: {tmp_path / 'index'}}}\n"
        "  generator: {kind: openai, model: served, base_url: 'http://127.0.0.1:1/v1'}\n",
        encoding="utf-8",
    )
    one_line_error(*cli("eval", cfg)[::2], "rag.generator.kind=openai", "fallback.detector.tokenizer")


# --- 3. silent wrong metrics: strict records, duplicates, other systems ----------------------------


def test_a_string_gold_answer_is_refused_with_file_line_and_field(tmp_path, cli):
    cfg = _eval_setup(tmp_path, 8)
    row = json.loads((tmp_path / "scen.jsonl").read_text())
    (tmp_path / "scen.jsonl").write_text(json.dumps({**row, "gold_answers": "Paris"}) + "\n")
    one_line_error(*cli("eval", cfg)[::2], "scen.jsonl:1: gold_answers: expected a list of strings, got a string")


def test_report_and_compare_refuse_duplicates_and_other_systems(tmp_path, cli):
    a, b = tmp_path / "a", tmp_path / "b"
    save_results(a / "results.jsonl", [make_item(system="base", qid="q1"), make_item(system="base", qid="q1")])
    save_results(b / "results.jsonl", [make_item(system="lora", qid="q1"), make_item(system="base", qid="q2")])
    one_line_error(*cli("report", a, "--out", tmp_path / "rep")[::2], "results.jsonl:2: duplicate result for qid 'q1'")
    one_line_error(*cli("compare", a, b)[::2], "duplicate result for qid 'q1'")
    one_line_error(
        *cli("report", b, "--out", tmp_path / "rep")[::2], "results.jsonl:2: a result of system 'base' in a file of 'lora'"
    )
    assert not (tmp_path / "rep").exists()


def test_report_out_naming_a_file_is_refused(tmp_path, cli):
    save_results(tmp_path / "a" / "results.jsonl", [make_item(system="base", qid="q1")])
    taken = tmp_path / "summary.html"
    taken.write_text("mine")
    one_line_error(*cli("report", tmp_path / "a", "--out", taken)[::2], "is a file")
    assert taken.read_text() == "mine"


@pytest.mark.parametrize(
    "content,needle",
    [
        (b"", "no rows (empty file)"),
        ('{"id": 1, "question": "caf\xe9"}\n'.encode("latin-1"), "not UTF-8"),
        (b'{"id": 1}\n{"id": 1}\n', "ConflictNQ row without"),
    ],
)
def test_import_conflicts_bad_upstream_files(tmp_path, cli, content, needle):
    (tmp_path / "conflictnq").mkdir()
    (tmp_path / "conflictnq" / "test.jsonl").write_bytes(content)
    one_line_error(*cli("import-conflicts", "conflictnq", "--data", tmp_path, "--out", tmp_path / "o.jsonl")[::2], needle)
    assert not (tmp_path / "o.jsonl").exists()


def test_import_conflicts_duplicate_upstream_rows(tmp_path, cli):
    row = {
        "id": 7,
        "question": "q?",
        "real_passages": [{"passage": "p"}],
        "fake_passages": [],
        "real_short_answer": "a",
        "fake_short_answer": "b",
    }
    (tmp_path / "conflictnq").mkdir()
    (tmp_path / "conflictnq" / "test.jsonl").write_text(json.dumps(row) + "\n" + json.dumps(row) + "\n")
    one_line_error(
        *cli("import-conflicts", "conflictnq", "--data", tmp_path, "--out", tmp_path / "o.jsonl")[::2],
        "test.jsonl:2: duplicate id '7' (first at line 1)",
    )


# --- 4-5. security and hangs in the corpus ---------------------------------------------------------


@pytest.mark.timeout(300)  # an opened FIFO would block for ever
def test_fifo_and_outside_symlink_are_listed_and_not_indexed(tmp_path, cli):
    corpus = kb(tmp_path)
    os.mkfifo(corpus / "pipe.md")
    secret = tmp_path / "passwd"
    secret.write_text("root:x:0:0:root", encoding="utf-8")
    os.symlink(secret, corpus / "passwd.md")
    code, out, err = cli("index", rag_config(tmp_path, corpus, tmp_path / "idx"))
    assert code == 0, err
    assert "left out  pipe.md: not a regular file (a FIFO): never opened" in out
    assert f"left out  passwd.md: symlink to {secret}, outside the corpus paths" in out
    code, out, _ = cli("search", "root", "--config", tmp_path / "rag.yaml")
    assert code == 0 and "root:x" not in out


# --- 6. tracebacks turned into one-line errors ------------------------------------------------------


def test_retrieval_settings_and_flags_are_validated(tmp_path, cli):
    corpus = kb(tmp_path)
    cfg = rag_config(tmp_path, corpus, tmp_path / "idx", "retrieval: {top_k: 0}\n")
    one_line_error(*cli("search", "limit", "--config", cfg)[::2], "retrieval.top_k", "greater than or equal to 1")
    cfg = rag_config(tmp_path, corpus, tmp_path / "idx")
    one_line_error(*cli("search", "limit", "--config", cfg, "-k", "0")[::2], "with --k 0", "retrieval.top_k")
    one_line_error(
        *cli("search", "limit", "--config", cfg, "--mode", "dense")[::2], "with --mode dense", "needs an `embedder`"
    )
    one_line_error(*cli("search", "limit", "--config", cfg, "--mode", "bogus")[::2], "retrieval.mode")
    code, out, _ = cli("search", "limit", "--config", cfg, "-k", "1")
    assert code == 0 and out.startswith("#1") and "#2" not in out


def test_a_corrupt_bm25_vocabulary_and_a_stale_corpus(tmp_path, cli):
    corpus = kb(tmp_path)
    cfg = rag_config(tmp_path, corpus, tmp_path / "idx")
    assert cli("index", cfg)[0] == 0
    (corpus / "a.md").write_text("The speed limit is now thirty.", encoding="utf-8")
    one_line_error(*cli("search", "limit", "--config", cfg)[::2], "stale index", "1 changed", "e.g. a.md")
    assert cli("index", cfg)[0] == 0
    assert cli("search", "limit", "--config", cfg)[0] == 0
    (tmp_path / "idx" / "bm25" / "vocab.index.json").write_text("{broken", encoding="utf-8")
    one_line_error(*cli("search", "limit", "--config", cfg)[::2], "unreadable BM25 index", "rebuild")


def test_ask_with_a_missing_model_or_a_server_that_is_down(tmp_path, cli):
    corpus = kb(tmp_path)
    gen = f"generator: {{kind: transformers, model: {tmp_path / 'no-model'}}}\n"
    cfg = rag_config(tmp_path, corpus, tmp_path / "idx", gen)
    assert cli("index", cfg)[0] == 0
    one_line_error(
        *cli("ask", "limit?", "--config", cfg, "--trace", tmp_path / "t.jsonl")[::2],
        "generator.model:",
        "no-model: no such folder",
    )
    url = f"http://127.0.0.1:{free_port()}/v1"
    cfg = rag_config(
        tmp_path,
        corpus,
        tmp_path / "idx",
        f"generator: {{kind: openai, model: m, base_url: '{url}', max_retries: 1, timeout_s: 5}}\n",
    )
    code, _, err = cli("ask", "limit?", "--config", cfg, "--trace", tmp_path / "t.jsonl")
    one_line_error(code, err, url, "cannot connect", "after 2 attempt(s)")


# --- 8-9. unclear or silent, and outside make -------------------------------------------------------


def test_duplicate_yaml_keys_are_one_line_errors(tmp_path, cli):
    cfg = tmp_path / "rag" / "dup.yaml"
    cfg.parent.mkdir()
    cfg.write_text("corpus: {paths: [kb]}\nindex: {dir: a}\nindex: {dir: b}\n")
    code, out, _ = cli("validate", cfg)
    assert code == 1 and "duplicate key 'index'" in out
    one_line_error(*cli("index", cfg)[::2], "line 3: duplicate key 'index'")


def test_a_run_config_with_both_the_demo_world_and_a_corpus_is_one_line(tmp_path, cli):
    """`data.world` writes the corpus, questions and older versions itself: a config that also names a
    corpus is refused by `validate` and by `run` before anything is written, in one line each."""
    cfg = tmp_path / "run" / "both.yaml"
    cfg.parent.mkdir()
    cfg.write_text(
        f"base: {REPO / 'configs/run/ci-tiny.yaml'}\nruns_dir: {tmp_path / 'runs'}\n"
        "data:\n  corpus: {kind: beir, path: kb/corpus.jsonl}\n  questions: {kind: jsonl, path: kb/q.jsonl}\n",
        encoding="utf-8",
    )
    code, out, _ = cli("validate", cfg)
    assert code == 1 and out.splitlines()[-1] == "0 valid, 1 invalid"
    (line,) = [ln for ln in out.splitlines() if ln.startswith("error ")]
    assert "data:" in line and "give either world or corpus + questions (+ outdated), not both" in line
    one_line_error(*cli("run", cfg, "--dry-run")[::2], "data:", "give either world or corpus + questions", "not both")
    assert not (tmp_path / "runs").exists()


def test_validate_accepts_every_shipped_run_config(cli):
    """Every configs/run/*.yaml (the demo world's and the users' KBs alike) and configs/experiments/*.yaml
    (run configs of the study's experiments) parses with no unknown key."""
    folders = [REPO / "configs/run", REPO / "configs/experiments"]
    files = [f for d in folders for f in sorted(d.glob("*.yaml"))]
    code, out, _ = cli("validate", *folders)
    assert code == 0, out
    assert [ln.split(maxsplit=1) for ln in out.splitlines()[:-1]] == [["ok", str(f)] for f in files]
    assert out.splitlines()[-1] == f"{len(files)} valid, 0 invalid" and len(files) >= 25


def test_slurm_followed_by_an_option_writes_no_file(tmp_path, cli, monkeypatch):
    monkeypatch.chdir(tmp_path)
    one_line_error(
        *cli("train", REPO / "configs/train/tiny.yaml", "--slurm", "--dry-run")[::2],
        "--slurm needs the path of the sbatch script",
    )
    assert list(tmp_path.iterdir()) == []


def test_the_cli_sets_the_vllm_defaults_itself():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "HF_HUB", "MODELSCOPE"))}
    code = (
        "import os, lorarag.cli as c; print(repr(os.environ['VLLM_PLUGINS']), "
        "os.environ['VLLM_ENABLE_V1_MULTIPROCESSING'], os.environ['HF_HUB_OFFLINE'])"
    )
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert p.stdout.split() == ["''", "0", "1"], p.stderr
    p = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env={**env, "VLLM_PLUGINS": "x"}, capture_output=True, text=True, timeout=120
    )
    assert p.stdout.split()[0] == "'x'"  # the environment still wins
