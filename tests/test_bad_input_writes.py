"""Nothing lost on the write side (issue 63): a name that becomes a folder is one plain name, every
write stays inside its folder, the inputs of a command are never its outputs (not even with
`--force`), `--fresh` removes only what lorarag listed as its own, and `validate` refuses numbers
no run could use. Each case: a one-line error (exit 2, or `validate`'s `error` line and exit 1),
and the user's files byte-identical afterwards."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from lorarag.core import outputs
from lorarag.core.errors import ConfigError
from lorarag.eval.records import save_results
from tests.eval_fixtures import make_item

from .conftest import REPO
from .test_bad_input import _eval_setup, kb, one_line_error, rag_config
from .test_bad_input import snapshot as _snapshot

RUN = REPO / "configs/run/ci-tiny.yaml"
KB_RUN = REPO / "configs/run/ci-kb-tiny.yaml"
TRAIN = REPO / "configs/train/tiny.yaml"
MINE = b"# my own notes: lorarag must never touch this\n"


def snapshot(folder: Path) -> dict[str, bytes]:
    """The folder's files, less a writer's lock (the lock helper's business, not an output)."""
    return {k: v for k, v in _snapshot(folder).items() if k != ".lorarag.lock"}


def _validate(cli, tmp_path: Path, kind: str, text: str) -> str:
    """`lorarag validate` on a config of `kind` (its folder picks the schema): the one error line."""
    folder = tmp_path / kind
    folder.mkdir(exist_ok=True)
    path = folder / "bad.yaml"
    path.write_text(text, encoding="utf-8")
    code, out, err = cli("validate", path)
    assert code == 1, out + err
    assert "Traceback" not in out + err
    bad = [line for line in out.splitlines() if line.startswith("error ")]
    assert len(bad) == 1 and "0 valid, 1 invalid" in out, out
    return bad[0]


# --- names that become paths ----------------------------------------------------------------------


@pytest.mark.parametrize("name", [".", "..", "", "a/b", "../escape", "lora_rag/../../x", "a\\b", " x"])
@pytest.mark.parametrize("key", ["name", "train.run_name", "system"])
def test_validate_refuses_a_run_train_or_system_name_that_is_a_path(tmp_path, cli, name, key):
    value = json.dumps(name)
    text = {
        "name": f"base: {RUN}\nname: {value}\n",
        "train.run_name": f"base: {RUN}\ntrain: {{run_name: {value}}}\n",
        "system": f"base: {RUN}\nsystems:\n  - {{name: {value}, kind: base_rag}}\n",
    }[key]
    line = _validate(cli, tmp_path, "run", text)
    assert ("run_name" if key == "train.run_name" else "name") in line
    assert "folder" in line or "path" in line, line


def test_plain_names_still_validate(tmp_path, cli):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "ok.yaml").write_text(f"base: {RUN}\nname: my-run.v2\ntrain: {{run_name: x_1}}\n", encoding="utf-8")
    code, out, _ = cli("validate", folder / "ok.yaml")
    assert code == 0 and "1 valid, 0 invalid" in out, out


def test_child_refuses_a_name_or_a_link_that_leaves_its_folder(tmp_path):
    from lorarag.core.paths import child

    runs, elsewhere = tmp_path / "runs", tmp_path / "elsewhere"
    runs.mkdir()
    elsewhere.mkdir()
    assert child(runs, "demo") == runs / "demo"
    (runs / "linked").symlink_to(elsewhere, target_is_directory=True)
    for name in (".", "..", "a/../../b", "linked"):
        with pytest.raises(ConfigError) as exc:
            child(runs, name, "name")
        assert "\n" not in str(exc.value)


def test_a_train_run_dir_is_refused_when_it_would_land_outside_runs_dir(tmp_path):
    from lorarag.train.config import TrainConfig
    from lorarag.train.runs import run_dir

    runs, elsewhere = tmp_path / "runs", tmp_path / "other-run"
    runs.mkdir()
    elsewhere.mkdir()
    (elsewhere / "adapter.json").write_bytes(MINE)
    (runs / "x").symlink_to(elsewhere, target_is_directory=True)
    cfg = TrainConfig(run_name="x", model="m", dataset="d.jsonl", runs_dir=str(runs))
    with pytest.raises(ConfigError, match="outside"):
        run_dir(cfg)
    assert (elsewhere / "adapter.json").read_bytes() == MINE


# --- validate refuses numbers no run could use ---------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "delta", "needle"),
    [
        ("train", "swift: {learning_rate: .nan}", "learning_rate"),
        ("train", "swift: {learning_rate: .inf}", "learning_rate"),
        ("train", "swift: {learning_rate: nan}", "learning_rate"),  # YAML text: ms-swift would parse it
        ("train", "swift: {max_steps: -5}", "max_steps"),
        ("train", "swift: {max_steps: 0}", "max_steps"),
        ("train", "swift: {lora_rank: 0}", "lora_rank"),
        ("train", "swift: {lora_alpha: -16}", "lora_alpha"),
        ("train", "swift: {torch_dtype: float64x}", "torch_dtype"),
        ("train", "preference: {max_steps: -5}", "max_steps"),
        ("train", "preference: {learning_rate: .nan}", "learning_rate"),
        ("run", "eval: {max_per_cell: 0}", "max_per_cell"),
        ("run", "calibration: {max_items: 0}", "max_items"),
        ("run", "fallback: {gate: {threshold: .nan}}", "threshold"),
    ],
)
def test_validate_refuses_nan_inf_bad_steps_zero_ranks_and_cells_and_unknown_dtypes(tmp_path, cli, kind, delta, needle):
    base = TRAIN if kind == "train" else RUN
    assert needle in _validate(cli, tmp_path, kind, f"base: {base}\n{delta}\n")


@pytest.mark.parametrize(
    "delta", ["swift: {max_steps: -1}", "swift: {learning_rate: 1e-3}", "swift: {torch_dtype: bfloat16}"]
)
def test_the_documented_values_still_validate(tmp_path, cli, delta):
    folder = tmp_path / "train"
    folder.mkdir()
    (folder / "ok.yaml").write_text(f"base: {TRAIN}\n{delta}\n", encoding="utf-8")
    code, out, _ = cli("validate", folder / "ok.yaml")
    assert code == 0, out


# --- inputs are never outputs --------------------------------------------------------------------


@pytest.mark.parametrize("key", ["dataset", "val_dataset"])
def test_the_sft_rows_never_land_on_the_knowledge_base(tmp_path, cli, key):
    """`lorarag sft` writes train.dataset: the labelled questions there would be overwritten."""
    questions = "../shared/data/conflictnq/val.jsonl"  # ci-kb-tiny's data.questions.path (and corpus)
    line = _validate(cli, tmp_path, "run", f"base: {KB_RUN}\ntrain: {{{key}: {questions}}}\n")
    assert f"train.{key}" in line and "data." in line
    corpus_dir = tmp_path / "docs"
    line = _validate(
        cli,
        tmp_path,
        "run",
        f"base: {KB_RUN}\ndata: {{corpus: {{kind: folder, path: {corpus_dir}}}}}\n"
        f"train: {{{key}: {corpus_dir / 'sft.jsonl'}}}\n",
    )
    assert "inside data.corpus.path" in line
    line = _validate(cli, tmp_path, "run", f"base: {KB_RUN}\ntrain: {{dataset: rows.jsonl, val_dataset: ./rows.jsonl}}\n")
    assert "train.val_dataset" in line


def test_train_slurm_never_writes_onto_the_configs_base_even_with_force(tmp_path, cli):
    parent, child = tmp_path / "parent.yaml", tmp_path / "child.yaml"
    shutil.copy(TRAIN, parent)
    child.write_text("base: parent.yaml\nrun_name: child\n", encoding="utf-8")
    before = parent.read_bytes()
    for extra in ((), ("--force",)):
        one_line_error(*cli("train", child, "--slurm", parent, *extra)[::2], "is an input of this command")
    assert parent.read_bytes() == before


def test_eval_slurm_never_writes_onto_its_scenarios_even_with_force(tmp_path, cli):
    cfg = _eval_setup(tmp_path, 8)
    scen = tmp_path / "scen.jsonl"
    before = scen.read_bytes()
    one_line_error(*cli("eval", cfg, "--slurm", scen, "--shards", "2", "--force")[::2], "is an input")
    assert scen.read_bytes() == before


def test_search_trace_never_writes_onto_its_config_and_asks_before_replacing_a_users_file(tmp_path, cli):
    cfg = rag_config(tmp_path, kb(tmp_path), tmp_path / "idx")
    before = cfg.read_bytes()
    for extra in ((), ("--force",)):
        one_line_error(*cli("search", "speed limit", "-c", cfg, "--trace", cfg, *extra)[::2], "is an input")
    assert cfg.read_bytes() == before
    notes = tmp_path / "notes.txt"
    notes.write_bytes(MINE)
    one_line_error(*cli("search", "speed limit", "-c", cfg, "--trace", notes)[::2], "not written by lorarag", "--force")
    assert notes.read_bytes() == MINE
    trace = tmp_path / "trace.json"
    code, _, err = cli("search", "speed limit", "-c", cfg, "--trace", trace)
    assert code == 0, err
    assert json.loads(trace.read_text(encoding="utf-8"))["question"] == "speed limit"
    code, _, err = cli("search", "parking", "-c", cfg, "--trace", trace)  # ours: replaced without --force
    assert code == 0 and json.loads(trace.read_text(encoding="utf-8"))["question"] == "parking", err


def test_ask_trace_never_appends_to_its_config_nor_to_a_users_file(tmp_path, cli):
    cfg = rag_config(tmp_path, kb(tmp_path), tmp_path / "idx")
    assert cli("index", cfg)[0] == 0
    before = cfg.read_bytes()
    for extra in ((), ("--force",)):
        one_line_error(*cli("ask", "speed limit?", "--config", cfg, "--trace", cfg, *extra)[::2], "is an input")
    assert cfg.read_bytes() == before
    notes = tmp_path / "notes.jsonl"
    notes.write_bytes(MINE)
    one_line_error(*cli("ask", "speed limit?", "--config", cfg, "--trace", notes)[::2], "not written by lorarag")
    assert notes.read_bytes() == MINE


def test_report_never_writes_through_a_link_out_of_its_folder_even_with_force(tmp_path, cli):
    run = tmp_path / "run"
    save_results(run / "results.jsonl", [make_item(system="base", qid=f"q{i}") for i in range(4)])
    out, outside = tmp_path / "report", tmp_path / "outside.md"
    out.mkdir()
    outside.write_bytes(MINE)
    (out / "report.md").symlink_to(outside)
    for extra in ((), ("--force",)):
        one_line_error(*cli("report", run, "--out", out, "--resamples", 1000, *extra)[::2], "report.md", "link")
    assert outside.read_bytes() == MINE and (out / "report.md").is_symlink()


# --- run and eval folders: a user's files there are never replaced nor removed ---------------------


def test_eval_out_never_replaces_a_users_config_yaml(tmp_path, cli):
    cfg = _eval_setup(tmp_path, 8)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "config.yaml").write_bytes(MINE)
    one_line_error(*cli("eval", cfg, "--out", mine)[::2], "config.yaml", "not written by lorarag")
    assert snapshot(mine) == {"config.yaml": MINE}  # refused before anything was written there


def test_an_eval_config_kept_in_its_out_dir_is_never_overwritten(tmp_path, cli):
    cfg = _eval_setup(tmp_path, 8)
    out = tmp_path / "out"
    out.mkdir()
    kept = out / "config.yaml"
    kept.write_text(cfg.read_text(encoding="utf-8"), encoding="utf-8")
    before = kept.read_bytes()
    one_line_error(*cli("eval", kept)[::2], "config.yaml")
    assert snapshot(out) == {"config.yaml": before}


def test_eval_fresh_removes_only_what_lorarag_listed(tmp_path, cli):
    cfg = _eval_setup(tmp_path, 8)
    mine = tmp_path / "mine"
    mine.mkdir()
    for name in ("config.yaml", "stamp.json", "run.json"):
        (mine / name).write_bytes(MINE)
    one_line_error(*cli("eval", cfg, "--out", mine, "--fresh")[::2], "not written by lorarag")
    assert snapshot(mine) == {n: MINE for n in ("config.yaml", "stamp.json", "run.json")}
    # a folder lorarag listed: --fresh removes its files, not the user's beside them
    ours = tmp_path / "ours"
    save_results(ours / "results.jsonl", [make_item(system="base", qid="q1")])
    (ours / "stamp.json").write_text("{}", encoding="utf-8")
    outputs.own([ours / "results.jsonl", ours / "stamp.json"])
    (ours / "run.json").write_bytes(MINE)
    code, _, err = cli("eval", cfg, "--out", ours, "--fresh")
    one_line_error(code, err, "run.json", "not written by lorarag")
    assert "--fresh: removed results.jsonl, stamp.json" in err and "kept run.json" in err
    assert (ours / "run.json").read_bytes() == MINE


def test_a_run_config_kept_in_its_run_folder_stops_the_run_before_it_writes(tmp_path, cli):
    folder = tmp_path / "runs" / "kept"
    folder.mkdir(parents=True)
    kept = folder / "config.yaml"
    kept.write_text(f"base: {RUN}\nname: kept\nruns_dir: {tmp_path / 'runs'}\n", encoding="utf-8")
    before = snapshot(tmp_path / "runs")
    one_line_error(*cli("run", kept)[::2], str(kept), "not written by lorarag")
    assert snapshot(tmp_path / "runs") == before


def test_a_run_folder_never_takes_a_users_config_or_run_json(tmp_path):
    from lorarag.core.runinfo import start_run
    from lorarag.train.config import TrainConfig

    cfg = TrainConfig(run_name="x", model="m", dataset="d.jsonl")
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "config.yaml").write_bytes(MINE)
    with pytest.raises(outputs.OutputError, match="config.yaml"):
        start_run(folder, cfg)
    assert snapshot(folder) == {"config.yaml": MINE}
    fresh = tmp_path / "fresh"
    start_run(fresh, cfg)
    start_run(fresh, cfg)  # lorarag's own files: rewritten on a second start
    info = json.loads((fresh / "run.json").read_text(encoding="utf-8"))
    (fresh / "run.json").write_text(json.dumps({**info, "added": 1}), encoding="utf-8")  # a later stage adds to it
    start_run(fresh, cfg)
    (fresh / "config.yaml").write_bytes(MINE)  # the user edits the resolved dump: it is theirs now
    with pytest.raises(outputs.OutputError, match="config.yaml"):
        start_run(fresh, cfg)
    assert (fresh / "config.yaml").read_bytes() == MINE


def test_remove_owned_never_follows_a_link_nor_removes_an_unlisted_file(tmp_path):
    folder, outside = tmp_path / "out", tmp_path / "outside.jsonl"
    folder.mkdir()
    outside.write_bytes(MINE)
    (folder / "results.jsonl").write_text("{}\n", encoding="utf-8")
    (folder / "stamp.json").write_bytes(MINE)
    outputs.own([folder / "results.jsonl", folder / "resumes.jsonl"])
    (folder / "resumes.jsonl").symlink_to(outside)
    gone, kept = outputs.remove_owned(folder, ["results.jsonl", "resumes.jsonl", "stamp.json"])
    assert gone == ["results.jsonl"] and kept == ["resumes.jsonl", "stamp.json"]
    assert outside.read_bytes() == MINE and (folder / "stamp.json").read_bytes() == MINE


def test_fresh_removes_a_training_run_folder_only_when_lorarag_started_it(tmp_path):
    from lorarag.core.runinfo import start_run

    users = tmp_path / "notes"
    users.mkdir()
    (users / "README.md").write_bytes(MINE)
    with pytest.raises(outputs.OutputError, match="no run.json lorarag wrote"):
        outputs.remove_run_folder(users)
    assert snapshot(users) == {"README.md": MINE}
    link = tmp_path / "link"
    link.symlink_to(users, target_is_directory=True)
    with pytest.raises(outputs.OutputError, match="link"):
        outputs.remove_run_folder(link)
    assert snapshot(users) == {"README.md": MINE}
    (users / "run.json").write_text('{"mine": true}', encoding="utf-8")  # a run.json that is not lorarag's
    with pytest.raises(outputs.OutputError):
        outputs.remove_run_folder(users)
    ours = start_run(tmp_path / "ours", None)
    (ours / "output").mkdir()
    (ours / "output" / "checkpoint-2").write_text("weights", encoding="utf-8")
    assert outputs.remove_run_folder(ours) and not ours.exists()
    older = tmp_path / "older"  # a run folder from before the manifest: run.json's own keys
    older.mkdir()
    (older / "run.json").write_text(json.dumps({"started": "x", "git_sha": "y", "versions": {}}), encoding="utf-8")
    assert outputs.remove_run_folder(older) and not older.exists()
    assert not outputs.remove_run_folder(tmp_path / "absent")


def test_run_fresh_clears_only_lorarags_eval_and_report_files(tmp_path):
    """`lorarag run --fresh` on eval/ and report/: the systems' run folders and the listed report files
    go, a user's file beside them stays (and so does its folder)."""
    from lorarag.core.runinfo import start_run

    ev, rep = tmp_path / "eval", tmp_path / "report"
    system = start_run(ev / "base_rag", None)
    save_results(system / "results.jsonl", [make_item(system="base_rag", qid="q1")])
    outputs.write_text(rep / "report.md", "# report\n")
    outputs.write_text(rep / "base-vs-lora" / "report.md", "# pair\n")
    assert outputs.clear_tree(ev) == [] and not ev.exists()
    (rep / "notes.md").write_bytes(MINE)
    assert outputs.clear_tree(rep) == [rep / "notes.md"]
    assert snapshot(rep) == {"notes.md": MINE}


def test_a_run_folder_from_before_the_manifest_is_still_lorarags(tmp_path):
    """A folder lorarag started before it kept a manifest (run.json with start_run's keys, no
    manifest) is rerun into as before; a lone user's config.yaml beside no such run.json is not."""
    from lorarag.core.runinfo import start_run
    from lorarag.train.config import TrainConfig

    cfg = TrainConfig(run_name="x", model="m", dataset="d.jsonl")
    older = tmp_path / "older"
    older.mkdir()
    (older / "config.yaml").write_text("run_name: x\n", encoding="utf-8")
    (older / "run.json").write_text(json.dumps({"started": "t", "git_sha": "s", "versions": {}}), encoding="utf-8")
    start_run(older, cfg)
    assert "dataset: d.jsonl" in (older / "config.yaml").read_text(encoding="utf-8")
    assert outputs.is_ours(older / "config.yaml")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "config.yaml").write_bytes(MINE)
    (mine / "run.json").write_text('{"notes": 1}', encoding="utf-8")
    with pytest.raises(outputs.OutputError):
        start_run(mine, cfg)
    assert (mine / "config.yaml").read_bytes() == MINE


def test_a_users_stamp_json_in_an_eval_folder_without_results_is_never_replaced(tmp_path):
    """An eval out_dir that holds only a stamp.json of the user's: refused in one line, the file as it
    was; one lorarag wrote (its keys, another config) is replaced as before, and recorded as lorarag's."""
    from lorarag.core.outputs import OutputError, is_ours
    from lorarag.eval.runner import STAMP_FILE, claim_run_dir

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / STAMP_FILE).write_text('{"notes": "my own file"}', encoding="utf-8")
    with pytest.raises(OutputError, match=r"stamp.json: exists and was not written by lorarag"):
        claim_run_dir(mine, {"system": "base_rag", "items": 3})
    assert (mine / STAMP_FILE).read_text(encoding="utf-8") == '{"notes": "my own file"}'
    ours = tmp_path / "ours"
    ours.mkdir()
    (ours / STAMP_FILE).write_text('{"system": "lora_rag", "items": 2}', encoding="utf-8")
    assert claim_run_dir(ours, {"system": "base_rag", "items": 3}) is False
    assert '"base_rag"' in (ours / STAMP_FILE).read_text(encoding="utf-8") and is_ours(ours / STAMP_FILE)
