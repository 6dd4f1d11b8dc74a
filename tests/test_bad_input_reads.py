"""Bad input on the read side (issue 63): every read of a user's file is bounded before it starts,
every error is one line (a folder the machine will not let us write, JSON nested past the reader,
a file name that is not UTF-8, Ctrl-C), the server bounds request heads and says where it listens,
and a run or eval folder has one writer at a time. One test per class; nothing of the user's is
touched."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest

from lorarag.core.errors import RecordError
from lorarag.eval.records import save_results
from tests.eval_fixtures import make_item
from tests.servers import free_port
from tests.test_bad_input import _eval_setup, kb, one_line_error, rag_config, snapshot

from .conftest import REPO

DEEP = "[" * 100_000 + "]" * 100_000  # far past any JSON or YAML reader's recursion


def _sparse(path: Path, size: int) -> Path:
    """A file of `size` bytes that takes no disk (and would take `size` of memory if read)."""
    with path.open("wb") as fh:
        fh.truncate(size)
    return path


# --- 1. bounded reads: caps and special files, checked before anything is read ----------------------


def test_a_corpus_file_over_the_document_cap_is_left_out_by_size_before_any_read(tmp_path, cli):
    corpus = kb(tmp_path)
    _sparse(corpus / "huge.md", 2200 * 1024**2)  # 2.1 GiB: read whole, it took 7 GB of memory
    code, out, err = cli("index", rag_config(tmp_path, corpus, tmp_path / "index"))
    assert code == 0, err
    assert "left out  huge.md: 2.1 GiB, over the 256.0 MiB limit for one corpus file: never opened" in out
    assert "2 document(s) read, 1 file(s) left out" in out


def test_a_docx_that_unpacks_past_the_cap_is_refused_from_its_zip_directory(tmp_path, monkeypatch):
    import docx

    from lorarag.core import inputs
    from lorarag.rag.config import CorpusConfig
    from lorarag.rag.ingest.parse import ingest

    corpus = tmp_path / "kb"
    corpus.mkdir()
    d = docx.Document()
    d.add_paragraph("The speed limit is fifty.")
    d.save(corpus / "plain.docx")
    shutil.copy(corpus / "plain.docx", corpus / "bomb.docx")
    with zipfile.ZipFile(corpus / "bomb.docx", "a", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("word/media/zeros.bin", bytes(3 * 1024**2))  # 3 MiB of zeros: a few KiB packed
    assert (corpus / "bomb.docx").stat().st_size < 1024**2
    monkeypatch.setattr(inputs, "MAX_DOCUMENT_BYTES", 2 * 1024**2)  # the cap, scaled down to the test
    report = ingest(CorpusConfig(paths=[str(corpus)]))
    assert [d.doc_id for d in report.documents] == ["plain.docx"]
    [(source, reason)] = [(p.source, p.reason) for p in report.problems]
    assert source == "bomb.docx" and reason.startswith("DOCX unpacks to 3.") and "over the 2.0 MiB input limit" in reason


def test_a_config_naming_a_device_a_fifo_or_a_huge_file_is_refused_before_any_read(tmp_path, cli):
    corpus = kb(tmp_path)
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)  # opened, it would block for ever
    big = tmp_path / "big.yaml"
    big.write_text("#" * (2 * 1024**2), encoding="utf-8")
    for base, needle in (
        ("/dev/zero", "/dev/zero: config file is a character device"),
        (fifo, "pipe.yaml: config file is a FIFO (named pipe)"),
        (big, "big.yaml: config file is 2.0 MiB, over the 1.0 MiB input limit"),
    ):
        cfg = rag_config(tmp_path, corpus, tmp_path / "index", f"base: {base}\n")
        one_line_error(*cli("index", cfg)[::2], needle)
    assert not (tmp_path / "index").exists()


def test_json_and_yaml_nested_past_the_reader_are_one_line(tmp_path, cli):
    from lorarag.scenarios.kb_corpus import squad_articles
    from lorarag.scenarios.kb_records import jsonl_objects
    from lorarag.scenarios.records import load_scenarios

    lines = tmp_path / "corpus.jsonl"
    lines.write_text('{"_id": "d1", "text": "ok"}\n' + DEEP + "\n", encoding="utf-8")
    with pytest.raises(RecordError, match=r"corpus.jsonl:2: JSON nested too deeply"):
        list(jsonl_objects(lines, "BEIR corpus"))
    squad = tmp_path / "squad.json"
    squad.write_text('{"data": ' + DEEP + "}", encoding="utf-8")
    with pytest.raises(RecordError, match=r"squad.json: JSON nested too deeply"):
        squad_articles(squad)
    scenarios = tmp_path / "scenarios.jsonl"
    scenarios.write_text(DEEP + "\n", encoding="utf-8")
    with pytest.raises(RecordError, match=r"scenarios.jsonl:1: JSON nested too deeply"):
        load_scenarios(scenarios)  # the scenarios and results reader (rag/records.py)
    cfg = rag_config(tmp_path, kb(tmp_path), tmp_path / "index", f"x: {DEEP}\n")
    one_line_error(*cli("index", cfg)[::2], "rag.yaml: nested too deeply")


# --- 2. every error one line -------------------------------------------------------------------------


def test_a_corpus_file_named_with_a_latin1_byte_is_listed_with_its_byte_escaped(tmp_path, cli):
    corpus = kb(tmp_path)
    with open(os.fsencode(corpus) + b"/caf\xe9.md", "w", encoding="utf-8") as fh:  # a name from a latin-1 system
        fh.write("The cafe opens at nine.")
    code, out, err = cli("index", rag_config(tmp_path, corpus, tmp_path / "index"))
    assert code == 0 and "Traceback" not in err, err
    assert "left out  caf\\xe9.md: name is not UTF-8 (rename it): never opened" in out
    assert "2 document(s) read, 1 file(s) left out" in out


@contextlib.contextmanager
def _unwritable(folder: Path):
    """`folder` made unwritable: mode 0o555, or for root (whom modes do not stop) the immutable flag."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            yield
        finally:
            folder.chmod(0o755)
        return
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode != 0:
        pytest.skip("root without chattr +i here: no way to make a folder unwritable")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=True)


@pytest.mark.parametrize("command", ["report", "compare"])
def test_writing_into_a_folder_the_machine_refuses_is_one_line(tmp_path, cli, command):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        save_results(tmp_path / name / "results.jsonl", [make_item(system=name, qid="q1")])
    locked = tmp_path / "locked"
    locked.mkdir()
    args = (
        [command, tmp_path / "a", "--out", locked / "out", "--resamples", "1000"]
        if command == "report"
        else [command, tmp_path / "a", tmp_path / "b", "--out", locked / "out"]
    )
    with _unwritable(locked):
        line = one_line_error(*cli(*args)[::2], str(locked / "out"))
    assert line.endswith(("Permission denied", "Operation not permitted")), line
    assert list(locked.iterdir()) == []


def test_ctrl_c_is_one_line_interrupted_and_exit_130(tmp_path, cli, monkeypatch):
    import lorarag.cli as cli_module

    def interrupted(*_args, **_kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_module, "load_config", interrupted)  # Ctrl-C inside a command (typer's exit 130)
    code, _, err = cli("validate", REPO / "configs/rag/cpu.yaml")
    assert (code, err.strip().splitlines()) == (130, ["interrupted"])
    monkeypatch.setattr(cli_module, "app", interrupted)  # Ctrl-C outside any command
    code, _, err = cli("validate")
    assert (code, err.strip().splitlines()) == (130, ["interrupted"])


def test_ctrl_c_while_the_trainer_child_starts_leaves_no_traceback(tmp_path):
    """The terminal sends Ctrl-C to the whole process group: the training child (here one still
    starting, as when it imports torch) must leave it to `lorarag`, which stops it and says so."""
    child = "import time; print('child ready', flush=True); time.sleep(60)"
    # the parent takes Ctrl-C as a terminal's `lorarag` does, also when this suite runs as a background job
    # (which starts its children with SIGINT ignored)
    parent = (
        "import os, signal, sys\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "from lorarag.train.swift import run_child\ntry:\n"
        f"    run_child([sys.executable, '-c', {child!r}], dict(os.environ))\n"
        "except KeyboardInterrupt:\n    print('parent interrupted', flush=True)\n    sys.exit(130)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", parent],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout.readline().strip() == "child ready"
        time.sleep(1.0)  # the parent back from starting the child (under load the child can print first)
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        out, err = proc.communicate(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130 and out.strip() == "parent interrupted"
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err


# --- 3. the server: bounded request heads, a stated host ------------------------------------------


class _Idle:
    """An answering system that is never asked (the requests here are refused or go to /health)."""

    def answer(self, questions):
        raise AssertionError("not called")

    def close(self) -> None:
        pass


def _exchange(port: int, head: bytes) -> bytes:
    """Send a raw request head; the status line the server answers (b"" when it just closed)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        with contextlib.suppress(ConnectionError):
            s.sendall(head)
        data = b""
        with contextlib.suppress(ConnectionError):
            while b"\r\n" not in data:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
    return data.split(b"\r\n", 1)[0]


def test_serve_answers_431_to_a_request_head_over_its_size_or_field_count(tmp_path):
    import uvicorn

    from lorarag.serve.app import ServeSettings, create_app, server_config

    settings = ServeSettings(max_header_bytes=8192, max_headers=20)
    port = free_port()
    server = uvicorn.Server(server_config(create_app(_Idle(), settings), settings, port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        for _ in range(300):
            if server.started:
                break
            time.sleep(0.1)
        ok = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
        assert _exchange(port, ok) == b"HTTP/1.1 200 OK"
        long_line = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n"
        assert _exchange(port, long_line) == b"HTTP/1.1 431 Request Header Fields Too Large"
        huge = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 4 * 1024**2  # never ends: cut at the limit
        assert _exchange(port, huge) == b"HTTP/1.1 431 Request Header Fields Too Large"
        many = b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(25)) + b"\r\n"
        assert _exchange(port, many) == b"HTTP/1.1 431 Request Header Fields Too Large"
        at_limit = b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(19)) + b"\r\n"
        assert _exchange(port, at_limit) == b"HTTP/1.1 200 OK"
    finally:
        server.should_exit = True
        thread.join(timeout=60)


def test_serve_refuses_an_empty_host_and_warns_when_others_can_reach_it(tmp_path, cli):
    empty_run = tmp_path / "run"
    empty_run.mkdir()
    one_line_error(*cli("serve", "--run", empty_run, "--host", "")[::2], "--host: empty")
    code, _, err = cli("serve", "--run", empty_run, "--host", "0.0.0.0")
    assert "warning: --host 0.0.0.0: the server is reachable from other machines" in err
    one_line_error(code, err)  # then the empty run folder is refused, before anything listens
    code, _, err = cli("serve", "--run", empty_run, "--host", "127.0.0.1")
    assert "warning" not in err
    one_line_error(code, err)


# --- 4. one writer per run or eval folder ------------------------------------------------------------


def _holder(folder: Path) -> subprocess.Popen:
    """Another process holding `folder`'s lock until its stdin closes."""
    code = (
        "import sys\nfrom lorarag.core.lock import hold\nhold(sys.argv[1], 'eval folder')\n"
        "print('held', flush=True)\nsys.stdin.read()\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(folder), "--as-a-test"],
        cwd=REPO,
        text=True,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_writer_of_a_folder_is_refused_naming_the_holder_and_a_dead_ones_lock_is_taken_over(tmp_path, cli):
    from lorarag.core import lock

    cfg = _eval_setup(tmp_path, 8)
    out = tmp_path / "out"
    save_results(out / "results.jsonl", [make_item(system="base", qid="q1")])  # another writer's first rows
    holder = _holder(out)
    try:
        before = snapshot(out)
        line = one_line_error(
            *cli("eval", cfg, "--fresh")[::2], f"{out}: this eval folder is being written by pid {holder.pid}", "--as-a-test"
        )
        assert "wait for it to finish" in line
        assert snapshot(out) == before  # --fresh removed nothing under a live writer
        with pytest.raises(lock.FolderLocked, match=f"pid {holder.pid}"):
            lock.hold(out)
        run_root = tmp_path / "runs" / "ci-tiny"  # the run config beside the eval config: its run folder
        run_holder = _holder(run_root)
        try:
            one_line_error(
                *cli("run", tmp_path / "run.yaml")[::2],
                f"{run_root}: this run folder is being written by pid {run_holder.pid}",
            )
        finally:
            run_holder.kill()
            run_holder.wait()
    finally:
        holder.kill()  # dies holding it: its lock file stays behind, naming a dead process
        holder.wait()
    assert f'"pid": {holder.pid}' in (out / lock.LOCK_FILE).read_text(encoding="utf-8")
    lock.hold(out, "eval folder")  # taken over
    try:
        assert f'"pid": {os.getpid()}' in (out / lock.LOCK_FILE).read_text(encoding="utf-8")
        lock.hold(out)  # the same process again: nested, not refused
        lock.release(out)
        assert (out / lock.LOCK_FILE).exists()
    finally:
        lock.release(out)
    assert not (out / lock.LOCK_FILE).exists()  # the last release removes it
