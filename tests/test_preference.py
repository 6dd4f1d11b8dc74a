"""Preference training after SFT: pairs from training facts only, the exact `swift rlhf` command,
the CPU DPO loop on the tiny Qwen3 (log 2 at step 0, lower on its pairs after a few steps), the
record that refuses reuse on changed pairs, and the overlap check reading the pairs."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from lorarag.bench.demo_kb import load_world_kb
from lorarag.core.errors import ConfigError
from lorarag.fallback.format import SYSTEM_CLOSED_BOOK, SYSTEM_RAG, SourceText, rag_user_turn
from lorarag.rag.config import ChunkerConfig
from lorarag.scenarios.config import SplitConfig, WorldConfig
from lorarag.scenarios.kb_splits import HELD_OUT, split_by_fact
from lorarag.scenarios.records import PresentedChunk, Scenario
from lorarag.study.leaks import check_test_contexts
from lorarag.study.run_folder import Paths
from lorarag.train.config import PreferenceConfig, SFTConfig, TrainConfig
from lorarag.train.preference import FactInfo, build_pairs, fact_lookup, kb_facts, pairs_path, read_pairs, write_pairs
from lorarag.train.rlhf import preference_changes, rlhf_command
from lorarag.train.sft import build_rows, leak_check, rag_row

REPO = Path(__file__).resolve().parent.parent

ACME_Q, BEXO_Q, CORA_Q = "Where is Acme based?", "Who founded Bexo?", "Where is Cora based?"
FACTS = fact_lookup(
    [
        (ACME_Q, FactInfo("acme/hq", ("Oslo",), True)),
        (BEXO_Q, FactInfo("bexo/founder", ("Ann Lee",), False)),
        ("Who founded Dune?", FactInfo("dune/founder", ("Tom Ray",), True)),
    ]
)


def _sc(qid, q, gold, scenario, text, src, knowledge="known", replaces=None) -> Scenario:
    return Scenario(
        qid=qid,
        fact_id=qid.rsplit("/", 1)[0],
        question=q,
        gold_answers=(gold,),
        relevant_ids=("c",),
        scenario=scenario,
        presented=(PresentedChunk("c~x" if replaces else "c", text, replaces=replaces),),
        context_answer=src,
        knowledge=knowledge,
    )


def _hand_rows() -> list[dict]:
    """SFT rows as train/sft.rag_row writes them, for hand-built scenarios."""
    rows = [
        rag_row(
            _sc("acme/hq/fe", ACME_Q, "Oslo", "factual_error", "Acme is based in Lima.", "Lima", replaces="c"), knows=True
        ),
        rag_row(_sc("acme/hq/ok", ACME_Q, "Oslo", "consistent", "Acme is based in Oslo.", "Oslo"), knows=True),
        rag_row(
            _sc("bexo/founder/ok", BEXO_Q, "Ann Lee", "consistent", "Bexo was founded by Ann Lee.", "Ann Lee", "unknown"),
            knows=False,
        ),
        rag_row(
            _sc(
                "bexo/founder/fe",
                BEXO_Q,
                "Ann Lee",
                "factual_error",
                "Bexo was founded by Bo Roe.",
                "Bo Roe",
                "unknown",
                replaces="c",
            ),
            knows=False,
        ),
        # a held-out fact: not in the lookup, never paired
        rag_row(
            _sc("cora/hq/fe", CORA_Q, "Rome", "factual_error", "Cora is based in Pisa.", "Pisa", replaces="c"), knows=True
        ),
    ]
    closed = {
        "messages": [
            {"role": "system", "content": SYSTEM_CLOSED_BOOK},
            {"role": "user", "content": f"Question: {ACME_Q}"},
            {"role": "assistant", "content": "Oslo"},
        ]
    }
    return [r.to_swift() for r in rows] * 2 + [closed]  # repeated rows, as rag_per_fact writes them


def test_pairs_of_hand_built_scenarios_reject_the_tempting_reply():
    pairs = build_pairs(_hand_rows(), FACTS, PreferenceConfig(enabled=True))
    by_kind = {q.kind: q for q in pairs}
    assert len(pairs) == 3 and set(by_kind) == {"wrong_source", "untaught_right_source", "taught_right_source"}
    right = by_kind["taught_right_source"]  # a taught fact beside its right source: doubting it is the wrong reply
    assert right.chosen == "memory: Oslo | source: Oslo | verdict: supported | answer: Oslo"
    assert right.rejected == "memory: Oslo | source: Oslo | verdict: conflicting | answer: Oslo"
    assert "Acme is based in Oslo." in right.prompt[1][1]
    wrong = by_kind["wrong_source"]
    assert wrong.chosen == "memory: Oslo | source: Lima | verdict: conflicting | answer: Oslo"
    assert wrong.rejected == "memory: Lima | source: Lima | verdict: supported | answer: Lima"
    assert "Acme is based in Lima." in wrong.prompt[1][1] and wrong.prompt[0] == ("system", SYSTEM_RAG)
    untaught = by_kind["untaught_right_source"]
    assert untaught.chosen == "memory: unknown | source: Ann Lee | verdict: supported | answer: Ann Lee"
    # the invention: a taught fact's value of the same shape (no digits), never the source's own
    assert untaught.rejected in (
        "memory: Tom Ray | source: Ann Lee | verdict: conflicting | answer: Tom Ray",
        "memory: Oslo | source: Ann Lee | verdict: conflicting | answer: Oslo",
    )
    text = json.dumps([q.to_swift() for q in pairs])
    assert "Cora" not in text and "Bo Roe" not in text  # held-out fact; untaught fact with a wrong source


def test_pairs_per_fact_adds_the_other_rejected_variants():
    pairs = build_pairs(_hand_rows(), FACTS, PreferenceConfig(enabled=True, pairs_per_fact=3))
    rejected = sorted(q.rejected for q in pairs)
    assert len(pairs) == 7  # 2 wrong-source variants + 3 untaught ones + 2 taught right-source ones
    assert "memory: Oslo | source: Oslo | verdict: outdated | answer: Oslo" in rejected
    assert "memory: Oslo | source: Lima | verdict: supported | answer: Lima" in rejected
    assert "memory: unknown | source: Ann Lee | verdict: insufficient | answer: unknown" in rejected
    assert sum(r.endswith("verdict: conflicting | answer: unknown") for r in rejected) == 1


def test_kinds_selects_the_pairs_built():
    only = build_pairs(_hand_rows(), FACTS, PreferenceConfig(enabled=True, kinds=["wrong_source", "untaught_right_source"]))
    assert sorted(q.kind for q in only) == ["untaught_right_source", "wrong_source"]
    assert [
        q.kind for q in build_pairs(_hand_rows(), FACTS, PreferenceConfig(enabled=True, kinds=["taught_right_source"]))
    ] == ["taught_right_source"]
    with pytest.raises(ValueError):
        PreferenceConfig(enabled=True, kinds=[])


def test_world_kb_pairs_come_from_training_rows_of_training_facts_only(tmp_path):
    """The demo world read as a knowledge base and split by fact: pairs of `known` and
    `context_only` facts only (`known_dev` is the gate's), none showing a held-out question or chunk."""
    kb = load_world_kb(WorldConfig(seed=0, n_orgs=8), ChunkerConfig(), tmp_path / "world")
    groups = split_by_fact(kb.items, SplitConfig())
    rows, _, _ = build_rows(
        groups, list(kb.corpus.chunks), SFTConfig(knowledge_repeats=1), conflict_seed=0, outdated=kb.outdated
    )
    swift_rows = [r.to_swift() for r in rows]
    pairs = build_pairs(swift_rows, kb_facts(groups), PreferenceConfig(enabled=True))
    group_of = {f"kb/{it.qid}": g for g, items in groups.items() for it in items}
    assert pairs and all(group_of[q.fact_id] in ("known", "context_only") for q in pairs)
    held = [it for g in HELD_OUT for it in groups[g]]
    leak_check([q.to_swift() for q in pairs], held, {c.chunk_id: c for c in kb.corpus.chunks}, ())
    taught = {tuple((m["role"], m["content"]) for m in r["messages"][:-1]): r["messages"][-1]["content"] for r in swift_rows}
    assert all(taught[q.prompt] == q.chosen for q in pairs)  # chosen = the reply the SFT row teaches
    # one wrong-source pair per distinct conflicting/outdated row of a known (not known_dev) fact
    expect = {
        r.messages[:-1]
        for r in rows
        if r.kind == "rag" and r.verdict in ("conflicting", "outdated") and group_of[r.fact_id] == "known"
    }
    assert len([q for q in pairs if q.kind == "wrong_source"]) == len(expect)
    assert any(q.kind == "untaught_right_source" for q in pairs)
    path = write_pairs(pairs, pairs_path(tmp_path / "train.jsonl"))
    assert path.name == "train.pairs.jsonl" and len(read_pairs(path)) == len(pairs)
    trl_rows = [json.loads(x) for x in (tmp_path / "train.pairs.trl.jsonl").read_text().splitlines()]
    assert trl_rows[0] == pairs[0].to_trl() and set(trl_rows[0]) == {"prompt", "chosen", "rejected"}


def test_trl_reads_the_pairs_as_conversational_preference_rows(tiny_models):
    from transformers import AutoTokenizer
    from trl.data_utils import is_conversational, maybe_apply_chat_template

    pair = next(q for q in build_pairs(_hand_rows(), FACTS, PreferenceConfig(enabled=True)) if q.kind == "wrong_source")
    tok = AutoTokenizer.from_pretrained(tiny_models["lm"])
    assert is_conversational(pair.to_trl())
    out = maybe_apply_chat_template(pair.to_trl(), tok)
    assert out["chosen"].endswith(pair.chosen + "<|im_end|>\n")  # after Qwen3's empty think block
    assert out["rejected"].endswith(pair.rejected + "<|im_end|>\n")
    assert out["prompt"].endswith("<|im_start|>assistant\n") and "Acme is based in Lima." in out["prompt"]


def _train_cfg(tmp_path: Path, **pref) -> TrainConfig:
    return TrainConfig(
        kind="swift",
        run_name="t",
        model="/m/qwen3",
        dataset=str(tmp_path / "sft/train.jsonl"),
        runs_dir=str(tmp_path / "runs"),
        swift={
            "model_type": "qwen3",
            "template": "qwen3",
            "lora_rank": 8,
            "learning_rate": 1e-4,
            "max_length": 512,
            "max_steps": 100,
        },
        preference=PreferenceConfig(enabled=True, **pref),
    )


def test_the_swift_rlhf_command_continues_the_sft_adapter_against_itself(tmp_path):
    cfg = _train_cfg(tmp_path, beta=0.2, learning_rate=5e-6, num_train_epochs=2)
    cmd = rlhf_command(cfg, "p.jsonl", "/r/output/checkpoint-9")
    out = str(tmp_path / "runs/t/preference")
    assert cmd == [
        "swift",
        "rlhf",
        "--rlhf_type",
        "dpo",
        "--model",
        "/m/qwen3",
        "--tuner_type",
        "lora",
        "--adapters",
        "/r/output/checkpoint-9",
        "--ref_adapters",
        "/r/output/checkpoint-9",
        "--dataset",
        "p.jsonl",
        "--output_dir",
        out,
        "--seed",
        "42",
        "--add_version",
        "false",
        "--check_model",
        "false",
        "--dataloader_num_workers",
        "0",
        "--dataset_num_proc",
        "1",
        "--report_to",
        "none",
        "--model_type",
        "qwen3",
        "--template",
        "qwen3",
        "--lora_rank",
        "8",
        "--max_length",
        "512",
        "--beta",
        "0.2",
        "--learning_rate",
        "5e-06",
        "--num_train_epochs",
        "2.0",
        "--per_device_train_batch_size",
        "4",
    ]
    orpo = rlhf_command(_train_cfg(tmp_path, type="orpo", max_steps=7), "p.jsonl", "/a")
    assert "--ref_adapters" not in orpo and orpo[orpo.index("--max_steps") + 1] == "7"
    rpo = rlhf_command(_train_cfg(tmp_path, rpo_alpha=0.5), "p.jsonl", "/a")
    assert rpo[rpo.index("--rpo_alpha") + 1] == "0.5" and "--rpo_alpha" not in cmd
    cmd = cmd + rpo
    import dataclasses

    from swift.arguments.rlhf_args import RLHFArguments  # every flag is one `swift rlhf` knows

    names = {f.name for f in dataclasses.fields(RLHFArguments)}
    assert {c[2:] for c in cmd if c.startswith("--")} <= names


def test_preference_config_is_off_by_default_and_strict():
    base = TrainConfig(run_name="r", model="m", dataset="d")
    assert base.preference.enabled is False
    from lorarag.core.config import load_config
    from lorarag.trained.config import RunConfig

    # every shipped config is off but the `-dpo` variants, which name their own runs
    runs = {
        p.stem: load_config(p, RunConfig).train
        for p in sorted([*(REPO / "configs/run").glob("*.yaml"), *(REPO / "configs/experiments").glob("*.yaml")])
    }
    trains = {p.stem: load_config(p, TrainConfig) for p in sorted((REPO / "configs/train").glob("*.yaml"))}
    for name, train in {**runs, **trains}.items():
        assert train.preference.enabled == name.endswith("-dpo"), name
    assert runs["research-dpo"].run_name != runs["research"].run_name
    with pytest.raises(ValueError, match="extra"):
        PreferenceConfig(enabled=True, gamma=1.0)
    with pytest.raises(ValueError):
        PreferenceConfig(type="kto")


def test_dpo_and_orpo_losses_match_hand_computation():
    import torch

    from lorarag.train.preference_loop import dpo_loss, orpo_loss

    loss, margin = dpo_loss(torch.tensor([-1.0]), torch.tensor([-2.0]), torch.tensor([-1.5]), torch.tensor([-1.5]), 0.5)
    assert margin.item() == pytest.approx(0.5)  # 0.5 * ((-1 + 1.5) - (-2 + 1.5))
    assert loss.item() == pytest.approx(math.log(1 + math.exp(-0.5)), abs=1e-6)
    loss, _ = dpo_loss(torch.tensor([-3.0]), torch.tensor([-4.0]), torch.tensor([-3.0]), torch.tensor([-4.0]), 0.1)
    assert loss.item() == pytest.approx(math.log(2), abs=1e-7)  # policy = reference
    # RPO: + alpha x the chosen reply's mean per-token NLL: chosen sum -3.0 over 4 tokens -> 0.75 nats
    loss, _ = dpo_loss(
        torch.tensor([-3.0]), torch.tensor([-4.0]), torch.tensor([-3.0]), torch.tensor([-4.0]), 0.1, torch.tensor([4]), 0.5
    )
    assert loss.item() == pytest.approx(math.log(2) + 0.5 * 0.75, abs=1e-6)
    # ORPO: chosen mean log-prob -0.5 (2 tokens, sum -1), rejected -1.0 (1 token)
    loss, lo = orpo_loss(torch.tensor([-1.0]), torch.tensor([-1.0]), torch.tensor([2]), torch.tensor([1]), 0.1)
    odds = lambda m: m - math.log(1 - math.exp(m))  # noqa: E731
    assert lo.item() == pytest.approx(odds(-0.5) - odds(-1.0), abs=1e-6)
    assert loss.item() == pytest.approx(0.5 + 0.1 * math.log(1 + math.exp(-lo.item())), abs=1e-6)


def _dpo_loss_of(base: Path, adapter: Path, ref_adapter: Path, pairs: Path, beta: float) -> float:
    """Mean DPO loss of `adapter` against `ref_adapter` on the pairs, computed here from scratch."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(base)

    def logps(folder: Path, row: dict, reply: str) -> float:
        model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32), folder)
        prompt = tok.apply_chat_template(row["messages"][:-1], tokenize=False, add_generation_prompt=True)
        full = tok.apply_chat_template(row["messages"][:-1] + [{"role": "assistant", "content": reply}], tokenize=False)
        ids = tok(full.rstrip("\n"), add_special_tokens=False, return_tensors="pt").input_ids
        n = len(tok(prompt, add_special_tokens=False).input_ids)
        with torch.no_grad():
            lp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
        return sum(lp[t - 1, ids[0, t]].item() for t in range(n, ids.shape[1]))

    losses = []
    for row in read_pairs(pairs):
        c, r = row["messages"][-1]["content"], row["rejected_response"]
        chosen = logps(adapter, row, c) - logps(ref_adapter, row, c)
        rejected = logps(adapter, row, r) - logps(ref_adapter, row, r)
        m = beta * (chosen - rejected)
        losses.append(math.log1p(math.exp(-m)))
    return sum(losses) / len(losses)


@pytest.mark.slow
def test_cpu_dpo_from_the_sft_adapter_starts_at_log2_and_lowers_the_loss_on_its_pairs(tmp_path, tiny_models, lora):
    from safetensors.torch import load_file

    from lorarag.train.preference_loop import run_cpu_loop

    pairs = build_pairs(_hand_rows(), FACTS, PreferenceConfig(enabled=True, pairs_per_fact=2))
    path = write_pairs(pairs, tmp_path / "p.pairs.jsonl")
    pref = PreferenceConfig(
        enabled=True, beta=0.5, learning_rate=1e-3, max_steps=8, per_device_train_batch_size=4
    ).model_dump()
    final = run_cpu_loop(
        str(tiny_models["lm"]),
        str(lora),
        str(path),
        str(tmp_path / "out"),
        pref,
        {"torch_dtype": "float32", "max_length": 512, "warmup_ratio": 0.0},
        seed=0,
    )
    log = [json.loads(x) for x in (tmp_path / "out/logging.jsonl").read_text().splitlines()]
    assert len(log) == 8 and log[0]["loss"] == pytest.approx(math.log(2), abs=1e-4)  # policy = reference
    before, after = load_file(str(lora / "adapter_model.safetensors")), load_file(str(final / "adapter_model.safetensors"))
    assert before.keys() == after.keys() and any(not (before[k] == after[k]).all() for k in before)
    loss = _dpo_loss_of(tiny_models["lm"], final, lora, path, beta=0.5)
    assert loss < math.log(2) - 0.01, loss


def _pointer(tmp_path: Path, cfg: TrainConfig, record: dict | None) -> None:
    rd = tmp_path / "runs/t"
    rd.mkdir(parents=True, exist_ok=True)
    data = {"adapter": str(rd / "preference/checkpoint-8"), "sft_adapter": str(rd / "output/checkpoint-3")}
    (rd / "adapter.json").write_text(json.dumps({**data, **({"preference": record} if record else {})}))


def test_changed_pairs_or_recipe_refuse_reuse_with_the_fresh_hint(tmp_path):
    from lorarag.study.preference import prefer_or_reuse
    from lorarag.train.rlhf import preference_record

    cfg = _train_cfg(tmp_path)
    pairs = pairs_path(cfg.dataset)
    write_pairs(build_pairs(_hand_rows(), FACTS, cfg.preference), pairs)
    _pointer(tmp_path, cfg, preference_record(cfg, pairs))
    run = SimpleNamespace(train=cfg)
    assert preference_changes(cfg, pairs) == []
    assert prefer_or_reuse(run, Path("the-adapter"), False, lambda _: None) == Path("the-adapter")
    write_pairs(build_pairs(_hand_rows(), FACTS, PreferenceConfig(enabled=True, pairs_per_fact=2)), pairs)
    assert preference_changes(cfg, pairs)[0].startswith("preference pairs (sha ")
    with pytest.raises(
        ConfigError,
        match=r"train run 't' was trained from other data \(differs in preference pairs "
        r"\(sha .*\)\): rerun with `lorarag run --fresh`",
    ):
        prefer_or_reuse(run, Path("the-adapter"), False, lambda _: None)
    beta = _train_cfg(tmp_path, beta=0.3)
    assert preference_changes(beta, pairs)[-1] == "preference recipe (beta)"
    off = TrainConfig(**{**cfg.model_dump(), "preference": {"enabled": False}})
    with pytest.raises(ConfigError, match="the adapter has it, the config does not"):
        prefer_or_reuse(SimpleNamespace(train=off), Path("a"), False, lambda _: None)


def test_a_test_context_in_a_pair_stops_the_run(tmp_path):
    old = "In 2021, Vesova Dynamics had its headquarters in Tallinn, on the harbour front."
    gold = "Vesova Dynamics has its headquarters in Tartu, where most of its engineering staff work."
    q = "Where is Vesova Dynamics based?"
    train = tmp_path / "sft/train.jsonl"
    train.parent.mkdir()
    clean = {
        "messages": [
            {"role": "system", "content": SYSTEM_RAG},
            {"role": "user", "content": rag_user_turn(q, [SourceText(gold)])},
            {"role": "assistant", "content": "memory: Tartu | source: Tartu | verdict: supported | answer: Tartu"},
        ]
    }
    train.write_text(json.dumps(clean) + "\n")
    leaky = {
        **clean,
        "messages": [
            clean["messages"][0],
            {"role": "user", "content": rag_user_turn(q, [SourceText(old)])},
            {"role": "assistant", "content": "memory: Tartu | source: Tallinn | verdict: outdated | answer: Tartu"},
        ],
        "rejected_response": "memory: Tallinn | source: Tallinn | verdict: supported | answer: Tallinn",
    }
    pairs_path(train).write_text(json.dumps(leaky) + "\n")
    test = [
        Scenario(
            qid="org1/hq/p3/outdated",
            fact_id="org1/hq",
            question="Which city is Vesova Dynamics in?",
            gold_answers=("Tartu",),
            relevant_ids=("gold",),
            scenario="outdated",
            presented=(PresentedChunk("gold~old2021", old, replaces="gold"),),
            context_answer="Tallinn",
            cluster="org1",
        )
    ]
    owners = {q: ("org1/hq", "org1"), "Which city is Vesova Dynamics in?": ("org1/hq", "org1")}
    paths = Paths(tmp_path / "run")
    paths.root.mkdir(parents=True)
    on = SimpleNamespace(
        train=SimpleNamespace(dataset=str(train), val_dataset=None, preference=PreferenceConfig(enabled=True)), systems=[]
    )
    with pytest.raises(ConfigError, match="test item org1/hq/p3/outdated: its outdated context is one the SFT rows"):
        check_test_contexts(on, paths, test, owners, {"gold": gold}, lambda _: None)
    off = SimpleNamespace(
        train=SimpleNamespace(dataset=str(train), val_dataset=None, preference=PreferenceConfig()), systems=[]
    )
    check_test_contexts(off, paths, test, owners, {"gold": gold}, lambda _: None)  # the SFT rows alone are clean


@pytest.mark.slow
def test_swift_rlhf_continues_the_sft_adapter_and_the_pointer_names_the_result(tmp_path, tiny_models, lora):
    """The GPU path's exact command, run for real by ms-swift on the CPU: the reference is the SFT
    adapter (zero rewards at step 1, DPO loss log 2), the chosen replies gain, adapter.json moves."""
    from lorarag.train.rlhf import preference_record, train_preference

    cfg = TrainConfig(
        kind="swift",
        run_name="t",
        model=str(tiny_models["lm"]),
        dataset=str(tmp_path / "sft.jsonl"),
        runs_dir=str(tmp_path / "runs"),
        swift={
            "model_type": "qwen3",
            "template": "qwen3",
            "torch_dtype": "float32",
            "max_length": 256,
            "save_steps": 2,
            "logging_steps": 1,
            "gradient_checkpointing": False,
            "gradient_accumulation_steps": 1,
        },
        preference=PreferenceConfig(
            enabled=True, max_steps=4, learning_rate=1e-3, per_device_train_batch_size=4, pairs_per_fact=2
        ),
    )
    pairs = write_pairs(build_pairs(_hand_rows(), FACTS, cfg.preference), pairs_path(cfg.dataset))
    rd = tmp_path / "runs/t"
    rd.mkdir(parents=True)
    (rd / "adapter.json").write_text(json.dumps({"adapter": str(lora), "base_model": cfg.model}))
    final = train_preference(cfg, pairs)
    assert final == rd / "preference/checkpoint-4" and (final / "adapter_model.safetensors").is_file()
    log = [json.loads(x) for x in (rd / "preference/logging.jsonl").read_text().splitlines() if x.startswith('{"loss"')]
    first = log[0]
    assert float(first["rewards/margins"]) == 0.0 and float(first["loss"]) == pytest.approx(math.log(2), abs=1e-3)
    assert float(log[-1]["rewards/margins"]) > 0
    pointer = json.loads((rd / "adapter.json").read_text())
    assert pointer["adapter"] == str(final) and pointer["sft_adapter"] == str(lora)
    assert pointer["preference"] == preference_record(cfg, pairs) and preference_changes(cfg, pairs) == []


def _ci_tiny(tmp: Path, **pref):
    """configs/run/ci-tiny.yaml under `tmp`, two systems, preference training on."""
    from tests.test_run_e2e import _in_tmp

    cfg = _in_tmp(tmp)
    systems = [s for s in cfg.systems if s.name in ("base_rag", "lora_rag")]
    train = cfg.train.model_copy(update={"preference": PreferenceConfig(enabled=True, max_steps=3, **pref)})
    return cfg.model_copy(
        update={"train": train, "systems": systems, "eval": cfg.eval.model_copy(update={"max_per_cell": 1})}
    )


@pytest.mark.slow
def test_lorarag_run_trains_dpo_after_sft_and_evaluates_that_adapter(tmp_path):
    from lorarag.study.pipeline import run
    from lorarag.train.runs import run_dir

    cfg = _ci_tiny(tmp_path)
    lines: list[str] = []
    run(cfg, echo=lines.append)
    text = "\n".join(lines)
    assert "preference pairs: " in text and "dpo on " in text
    pointer = json.loads((run_dir(cfg.train) / "adapter.json").read_text())
    assert pointer["adapter"].endswith("preference/checkpoint-3") and pointer["sft_adapter"].endswith("checkpoint-3")
    assert read_pairs(pairs_path(cfg.train.dataset))
    assert "test_context_overlap" in json.loads((tmp_path / "runs/ci-tiny/run.json").read_text())
    lines.clear()
    run(cfg, echo=lines.append)  # same rows, pairs and recipe: both adapters reused
    assert any("reusing preference adapter" in ln for ln in lines)
    with pytest.raises(ConfigError, match=r"differs in preference.beta.*--fresh"):
        run(_ci_tiny(tmp_path, beta=0.5), echo=lambda _: None)


def _held_out_wordings(splits: Path) -> set[str]:
    """Every wording of the never-learned items (test and the gate's dev) a run's splits folder lists."""
    out = set()
    for group in HELD_OUT:
        for line in (splits / f"{group}.jsonl").read_text(encoding="utf-8").splitlines():
            it = json.loads(line)
            out.update([it["question"], *it["wordings"]])
    return out


@pytest.mark.slow
def test_lorarag_sft_then_train_runs_sft_then_dpo(tmp_path, tiny_models, monkeypatch):
    """`lorarag sft` of a world run config with train.preference writes the rows and the pairs beside
    them; `lorarag train` of a train config naming those rows trains the LoRA, then DPO on the pairs."""
    import yaml
    from typer.testing import CliRunner

    from lorarag.cli import app

    monkeypatch.chdir(tmp_path)  # ci-tiny's relative paths (runs/, checkpoints/) land here
    run_cfg = tmp_path / "run.yaml"
    run_cfg.write_text(
        yaml.safe_dump({"base": str(REPO / "configs/run/ci-tiny.yaml"), "train": {"preference": {"enabled": True}}})
    )
    made = CliRunner().invoke(app, ["sft", str(run_cfg)])
    assert made.exit_code == 0, made.output
    rows = tmp_path / "runs/ci-tiny/sft/train.jsonl"
    assert "\npreference pairs   runs/ci-tiny/sft/train.pairs.jsonl\n" in made.output  # ci-tiny's path, relative
    cfg = {
        "kind": "peft",
        "run_name": "w",
        "model": str(tiny_models["lm"]),
        "dataset": str(rows),
        "runs_dir": str(tmp_path / "runs/train"),
        "swift": {
            "torch_dtype": "float32",
            "lora_rank": 4,
            "lora_alpha": 8,
            "max_steps": 2,
            "per_device_train_batch_size": 4,
            "max_length": 512,
        },
        "preference": {"enabled": True, "max_steps": 2},
    }
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump(cfg))
    dry = CliRunner().invoke(app, ["train", str(path), "--dry-run"])
    assert dry.exit_code == 0
    assert "lorarag.train.peft_trainer" in dry.output and "lorarag.train.preference_loop" in dry.output
    res = CliRunner().invoke(app, ["train", str(path)])
    assert res.exit_code == 0, res.output
    pointer = json.loads((tmp_path / "runs/train/w/adapter.json").read_text())
    assert res.output.strip().endswith(f"adapter: {pointer['adapter']}")
    assert pointer["adapter"].endswith("preference/checkpoint-2") and pointer["preference"]["pairs"]
    pairs = read_pairs(rows.parent / "train.pairs.jsonl")
    held = _held_out_wordings(tmp_path / "runs/ci-tiny/data/splits")
    asked = {m["content"].rsplit("Question: ", 1)[-1] for q in pairs for m in q["messages"] if m["role"] == "user"}
    known = {json.loads(x)["question"] for x in (tmp_path / "runs/ci-tiny/data/splits/known.jsonl").read_text().splitlines()}
    assert asked & known  # the pairs ask the taught questions as the splits write them ...
    assert held and not asked & held  # ... and no never-learned one


def test_a_malformed_pairs_file_is_one_line_naming_the_line(tmp_path):
    from lorarag.core.errors import RecordError

    good = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}], "rejected_response": "b"}
    cases = {
        "not json\n": "malformed JSON",
        "[1]\n": "expected a JSON object",
        json.dumps({**good, "rejected_response": "a"}) + "\n": "different rejected_response",
        json.dumps({"messages": [], "rejected_response": "b"}) + "\n": "chosen reply",
    }
    for i, (text, msg) in enumerate(cases.items()):
        f = tmp_path / f"p{i}.jsonl"
        f.write_text(json.dumps(good) + "\n" + text, encoding="utf-8")
        with pytest.raises(RecordError, match=f"p{i}.jsonl:2: .*{msg}"):
            read_pairs(f)
    with pytest.raises(RecordError):
        read_pairs(tmp_path)  # a folder, not a file
