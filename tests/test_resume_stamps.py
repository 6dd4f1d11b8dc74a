"""Results stamped by what produced them (issue 63): every result row records the hashes of its item,
the index, the prompt settings and the model; a resume reuses exactly the rows whose stamp matches
and says how many it recomputed; an adapter made on another base model than the one now at its path
is refused by `load_run` and `lorarag eval`; shards made by different models are never merged."""

from __future__ import annotations

import json
import logging
import shutil
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from lorarag.core.errors import ConfigError
from lorarag.eval import stamps
from lorarag.eval.records import load_results
from lorarag.eval.runner import run_eval
from lorarag.eval.shards import Shard, ShardError, merge_shards, select, shard_dir, write_stamp
from lorarag.rag.records import to_dict

from .test_runner_resume import EchoSystem, scenarios

SHARED = {"index": "i1", "prompt": "p1", "model": "m1"}


def _resumes(folder: Path) -> dict:
    return json.loads((folder / "resumes.jsonl").read_text().splitlines()[-1])


# --- the runner: rows reused only under their own stamp --------------------------------------------


def test_rows_carry_their_stamp_and_only_changed_items_are_recomputed(tmp_path, caplog):
    items = scenarios(15)
    out = tmp_path / "run"
    run_eval(EchoSystem(), items, out, progress=False, made_by=SHARED)
    rows = load_results(out)
    assert dict(rows[0].made_by) == {"item": stamps.item_sha256(items[0]), **SHARED}
    assert len({dict(r.made_by)["item"] for r in rows}) == 15  # one hash per item
    # three items edited (a reworded question, another gold answer, another passage text)
    edited = list(items)
    edited[2] = replace(items[2], question="Which value has fact 2?")
    edited[5] = replace(items[5], gold_answers=("w5",))
    edited[9] = replace(items[9], presented=(replace(items[9].presented[0], text="Fact 9 is w9."),))
    system = EchoSystem()
    caplog.set_level(logging.INFO, logger="lorarag.eval.runner")
    got = run_eval(system, edited, out, progress=False, made_by=SHARED)
    assert system.calls == 3
    assert (
        "resuming: 12 of 15 items reused, 3 recomputed (their item, index, prompt or model changed: item 3)" in caplog.text
    )
    assert _resumes(out)["recomputed"] == {"item": 3} and _resumes(out)["already_done"] == 12
    assert [r.qid for r in got] == [s.qid for s in items]
    assert got[5].gold_answers == ("w5",) and got[2].question == "Which value has fact 2?"
    on_disk = {r.qid: r for r in load_results(out)}
    assert len(on_disk) == 15 and on_disk["q005"].gold_answers == ("w5",)  # the stale row is gone, not doubled
    assert on_disk["q000"] == rows[0]  # a reused row is the same row


def test_another_prompt_or_model_recomputes_every_row_and_old_rows_without_a_stamp_too(tmp_path, caplog):
    items = scenarios(6)
    out = tmp_path / "run"
    run_eval(EchoSystem(), items[:4], out, progress=False)  # an older lorarag: rows without made_by
    caplog.set_level(logging.INFO, logger="lorarag.eval.runner")
    system = EchoSystem()
    run_eval(system, items, out, progress=False, made_by=SHARED)
    assert system.calls == 6
    assert (
        "0 of 6 items reused, 4 recomputed (their item, index, prompt or model changed: no stamp 4), "
        "2 not done yet" in caplog.text
    )
    now = dict(SHARED)
    for part in ("prompt", "model", "index"):
        now[part] = "changed-" + part
        again = EchoSystem()
        run_eval(again, items, out, progress=False, made_by=now)
        assert again.calls == 6 and _resumes(out)["recomputed"] == {part: 6}
    same = EchoSystem()
    run_eval(same, items, out, progress=False, made_by=now)
    assert same.calls == 0 and _resumes(out)["recomputed"] == {}


# --- merging shards --------------------------------------------------------------------------------


def test_shards_made_by_different_models_are_not_merged(tmp_path):
    items = scenarios(12)
    qids = [s.qid for s in items]
    folder_stamp = {"system": "echo"}
    for i in range(2):
        run_eval(
            EchoSystem(),
            select(items, Shard(i, 2)),
            shard_dir(tmp_path, Shard(i, 2)),
            progress=False,
            stamp=folder_stamp,
            made_by={**SHARED, "model": f"base-{i}"},
        )  # the base swapped in between
    with pytest.raises(ShardError, match=r"shards 0/2 and 1/2 were evaluated with different models") as ei:
        merge_shards(tmp_path, 2, qids, stamp=folder_stamp)
    assert "\n" not in str(ei.value) and not (tmp_path / "results.jsonl").exists()
    # the merging config's model is base-1: shard 0 is named
    with pytest.raises(ShardError, match=r"shard 0/2: item .* with another model than the config merging now"):
        merge_shards(
            tmp_path, 2, qids, stamp=folder_stamp, made_by=stamps.expected_stamps(items, {**SHARED, "model": "base-1"})
        )
    run_eval(
        EchoSystem(),
        select(items, Shard(0, 2)),
        shard_dir(tmp_path, Shard(0, 2)),
        progress=False,
        stamp=folder_stamp,
        made_by={**SHARED, "model": "base-1"},
    )  # redone under base-1: merged
    merged = merge_shards(
        tmp_path, 2, qids, stamp=folder_stamp, made_by=stamps.expected_stamps(items, {**SHARED, "model": "base-1"})
    )
    assert [r.qid for r in merged] == qids


def test_unstamped_shards_still_merge(tmp_path):
    """Shards written without row stamps (bench/scale.py, older results) merge as before."""
    items = scenarios(6)
    for i in range(2):
        folder = shard_dir(tmp_path, Shard(i, 2))
        run_eval(EchoSystem(), select(items, Shard(i, 2)), folder, progress=False)
        write_stamp(folder, {"bench": "x"})
    assert len(merge_shards(tmp_path, 2, [s.qid for s in items])) == 6


# --- `lorarag run`'s evaluation stage on a tiny Qwen3: a KB edit, then another max_context_chars ---


def _tiny_kb_cfg(tmp: Path, lm: Path):
    from lorarag.trained.config import SystemConfig

    from .test_run_kb_e2e import _in_tmp

    cfg = _in_tmp(tmp)
    rag = cfg.rag.model_copy(update={"generator": cfg.rag.generator.model_copy(update={"model": str(lm)})})
    systems = [
        SystemConfig(name="closed_book", kind="closed_book", max_new_tokens=3),
        SystemConfig(name="base_rag", kind="base_rag", context="presented", max_new_tokens=3),
        SystemConfig(name="base_rag_retrieved", kind="base_rag", max_new_tokens=3),
    ]
    ev = cfg.eval.model_copy(update={"max_per_cell": None})
    return cfg.model_copy(update={"rag": rag, "systems": systems, "eval": ev})


def _evaluate(cfg):
    """Stages 1-3 and 6 of `lorarag run` (no adapter: the systems run on the base model)."""
    from lorarag.study.evaluate import evaluate
    from lorarag.study.kb_source import KBSource
    from lorarag.study.prepare import index_chunks
    from lorarag.study.run_folder import Paths
    from lorarag.trained.components import build_parts

    paths = Paths(Path(cfg.runs_dir) / cfg.name)
    src = KBSource(cfg, paths)
    retriever = index_chunks(cfg, src.chunks, src.n_documents, cfg.rag.index)
    test, _, _ = src.scenarios(lambda _: None, retriever)
    parts = build_parts(cfg, retriever, None, src.chunks)
    try:
        evaluate(cfg, parts, test, paths, None)
    finally:
        parts.generator.close()
    return paths, {s.qid: s for s in test}


@pytest.mark.slow
def test_a_kb_edit_recomputes_exactly_the_items_it_changed(tmp_path, tiny_models, caplog):
    cfg = _tiny_kb_cfg(tmp_path, tiny_models["lm"])
    paths, before = _evaluate(cfg)
    old = {name: {r.qid: r for r in load_results(paths.eval / name)} for name in ("closed_book", "base_rag")}
    # one document and its labelled answer change: a tested market moves to Sunday
    town = next(q.split("/")[1].split("-")[0] for q in before if "-market" in q and before[q].gold_answers)
    doc = tmp_path / "kb-docs" / f"{town.lower()}.md"
    day = next(d for d in ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday") if d in doc.read_text())
    doc.write_text(doc.read_text().replace(day, "Sunday"))
    qa = tmp_path / "kb-qa.jsonl"
    rows = [json.loads(x) for x in qa.read_text().splitlines()]
    for r in rows:
        if r["id"] == f"{town}-market":
            r["answers"] = ["Sunday"]
    qa.write_text("".join(json.dumps(r) + "\n" for r in rows))
    caplog.set_level(logging.INFO, logger="lorarag.eval.runner")
    paths, after = _evaluate(cfg)
    assert set(after) == set(before)
    # the reference: the items whose record (question, gold, passages, world) differs after the edit
    changed = {q for q in before if to_dict(before[q]) != to_dict(after[q])}
    assert any(f"{town}-market" in q for q in changed) and 0 < len(changed) < len(before)
    n = len(before)
    for name in ("closed_book", "base_rag"):  # they read no index: only the changed items are redone
        assert _resumes(paths.eval / name)["recomputed"] == {"item": len(changed)}
        assert (
            f"resuming: {n - len(changed)} of {n} items reused, {len(changed)} recomputed (their item, "
            f"index, prompt or model changed: item {len(changed)})"
        ) in caplog.text
        now = {r.qid: r for r in load_results(paths.eval / name)}
        assert all(now[q] == old[name][q] for q in before if q not in changed)
        assert all(now[q].gold_answers == after[q].gold_answers for q in changed)
        assert any(now[q].gold_answers == ("Sunday",) for q in changed)
    # the retrieved system reads the edited index: every row is redone
    assert _resumes(paths.eval / "base_rag_retrieved")["recomputed"] == Counter(index=n - len(changed), item=len(changed))

    # another max_context_chars: every row of every system is redone (afresh, the prompt differs)
    cfg2 = cfg.model_copy(
        update={"rag": cfg.rag.model_copy(update={"prompt": cfg.rag.prompt.model_copy(update={"max_context_chars": 60})})}
    )
    paths, _ = _evaluate(cfg2)
    for name in ("closed_book", "base_rag", "base_rag_retrieved"):
        assert _resumes(paths.eval / name)["recomputed"] == {"prompt": n}
        assert {dict(r.made_by)["prompt"] for r in load_results(paths.eval / name)} == {
            stamps.part_sha256(cfg2.rag.prompt.model_dump(mode="json"))
        }


# --- a base model swapped at the same path ---------------------------------------------------------


def _trained_run(tmp: Path, lm: Path, lora: Path):
    """A `lorarag run` dir whose adapter (a copy of the tiny lora) records the base it was trained on."""
    from lorarag.train import runs

    from .test_run_e2e import _in_tmp

    cfg = _in_tmp(tmp)
    cfg = cfg.model_copy(
        update={
            "fallback": cfg.fallback.model_copy(update={"gate": cfg.fallback.gate.model_copy(update={"enabled": False})})
        }
    )
    shutil.copytree(lm, cfg.train.model)
    root = Path(cfg.runs_dir) / cfg.name
    root.mkdir(parents=True)
    (root / "config.yaml").write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    rd = runs.run_dir(cfg.train)
    ad = rd / "output/checkpoint-1"
    shutil.copytree(lora, ad)
    (rd / "adapter.json").write_text(
        json.dumps({"adapter": str(ad), "base_model": cfg.train.model, "trained_on": runs.training_record(cfg.train)})
    )
    return cfg, root


def test_a_base_swapped_at_the_same_path_is_refused_by_load_run_ask_and_eval(tmp_path, tiny_models, lora, cli):
    from lorarag.scenarios.records import save_scenarios
    from lorarag.testing.tiny import build_causal_lm
    from lorarag.trained.load import load_run, read_run

    cfg, root = _trained_run(tmp_path, tiny_models["lm"], lora)
    assert read_run(root).adapter.is_dir()  # made on the base at its path: accepted
    scen = tmp_path / "scen.jsonl"
    save_scenarios(scen, scenarios(2))
    ecfg = tmp_path / "eval.yaml"
    ecfg.write_text(
        yaml.safe_dump(
            {
                "scenarios": str(scen),
                "components": str(root / "config.yaml"),
                "system": {"name": "lora_rag", "kind": "lora_rag", "context": "presented"},
                "out_dir": str(tmp_path / "eval-out"),
            }
        )
    )
    build_causal_lm(cfg.train.model, seed=7)  # another model, written over the base at the same path
    for call in (read_run, load_run):
        with pytest.raises(
            ConfigError,
            match=r"trained on another base model than the one now at .*"
            r"model\.safetensors.* differ\)",
        ) as ei:
            call(root)
        assert "\n" not in str(ei.value)
    for args in (("eval", ecfg), ("eval", ecfg, "--merge", "2"), ("ask", "Who leads Vesova?", "--run", root)):
        code, _, err = cli(*args)
        last = err.strip().splitlines()[-1]  # (the model written above left its progress bar on stderr)
        assert code == 2 and last.startswith("error: ") and "trained on another base model" in last, err
        assert "Traceback" not in err
    assert not (tmp_path / "eval-out").exists()  # nothing written


# --- a run that will be refused is refused before it writes anything -------------------------------


def _written(cfg) -> dict[str, bytes]:
    """Every file stages 1-3 write for `cfg`: the run folder's manifest, data, scenarios, and the SFT rows."""
    root = Path(cfg.runs_dir) / cfg.name
    files = [root / "config.yaml", root / "run.json", Path(cfg.train.dataset), Path(cfg.train.val_dataset)]
    files += [f for sub in ("data", "scenarios") for f in sorted((root / sub).rglob("*")) if f.is_file()]
    return {str(f): f.read_bytes() for f in files}


def test_a_new_split_seed_is_refused_before_the_run_folder_is_rewritten(tmp_path, lora):
    from lorarag.core.runinfo import start_run
    from lorarag.study.pipeline import prepare_rows, run
    from lorarag.study.reuse_check import refuse_before_writing
    from lorarag.train import runs

    from .test_run_kb_e2e import _in_tmp

    cfg = _in_tmp(tmp_path)
    prepare_rows(cfg, echo=lambda _: None)  # stages 1-3 of the first run (the tiny base is built here)
    root = Path(cfg.runs_dir) / cfg.name
    start_run(root, cfg)
    rd = start_run(runs.run_dir(cfg.train), cfg.train)  # ... and its finished training, recorded as swift.train does
    shutil.copytree(lora, rd / "output/checkpoint-1")
    (rd / "adapter.json").write_text(
        json.dumps(
            {
                "adapter": str(rd / "output/checkpoint-1"),
                "base_model": cfg.train.model,
                "trained_on": runs.training_record(cfg.train),
            }
        )
    )
    before = _written(cfg)
    said: list[str] = []
    refuse_before_writing(cfg, root, said.append)  # the same config: its rows are the adapter's, no refusal
    assert _written(cfg) == before
    splits = cfg.data.splits.model_copy(update={"seed": cfg.data.splits.seed + 1})
    moved = cfg.model_copy(update={"data": cfg.data.model_copy(update={"splits": splits})})
    with pytest.raises(
        ConfigError,
        match=r"trained from other data \(differs in SFT rows \(train: sha .*"
        r"\(nothing was written\)",
    ) as ei:
        run(moved, echo=said.append)
    assert "\n" not in str(ei.value)
    assert _written(cfg) == before  # config.yaml, run.json, scenarios and SFT rows as the adapter's run left them
    # another recipe is refused at once too
    rank = cfg.train.model_copy(update={"swift": {**cfg.train.swift, "lora_rank": 8}})
    with pytest.raises(ConfigError, match=r"trained with another config \(differs in swift\.lora_rank\)"):
        run(cfg.model_copy(update={"train": rank}), echo=said.append)
    assert _written(cfg) == before
    # and so is the same config on a base model swapped at its path
    from lorarag.testing.tiny import build_causal_lm

    build_causal_lm(cfg.train.model, seed=7)
    with pytest.raises(ConfigError, match=r"differs in base model \(.*model\.safetensors.*\(nothing was written\)"):
        run(cfg, echo=said.append)
    assert _written(cfg) == before
