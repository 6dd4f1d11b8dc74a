"""Training launcher: exact ms-swift commands, run dirs and adapter pointers, the CPU peft loop,
and (slow) a real `swift sft` LoRA on the tiny Qwen3, killed and resumed, merged and reloaded."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from lorarag.bench.demo_kb import load_world_kb, world_rows
from lorarag.core.errors import ConfigError
from lorarag.rag.config import ChunkerConfig
from lorarag.scenarios.config import SplitConfig, WorldConfig
from lorarag.train.config import SFTConfig, TrainConfig, check_swift_args
from lorarag.train.export import export_command
from lorarag.train.runs import find_adapter, last_checkpoint, run_dir
from lorarag.train.sft import write_sft
from lorarag.train.swift import command_for, launch_env, load_train_config, slurm_script, swift_command, train

REPO = Path(__file__).resolve().parent.parent


def _cfg(tmp_path: Path, model: Path, dataset: Path, **kw) -> TrainConfig:
    base = load_train_config(REPO / "configs/train/tiny.yaml")
    data = {**base.model_dump(), "model": str(model), "dataset": str(dataset), "runs_dir": str(tmp_path / "runs"), **kw}
    return TrainConfig.model_validate(data)


@pytest.fixture(scope="module")
def sft_file(tmp_path_factory) -> Path:
    """48 SFT rows of the 8-organisation demo world, read as a knowledge base and split by fact."""
    folder = tmp_path_factory.mktemp("sft")
    kb = load_world_kb(WorldConfig(seed=0, n_orgs=8), ChunkerConfig(), folder / "world")
    return write_sft(world_rows(kb, SplitConfig(), SFTConfig(knowledge_repeats=1))[:48], folder / "train.jsonl")


def test_dry_run_is_the_exact_swift_command(tmp_path, sft_file):
    cfg = _cfg(tmp_path, Path("/m"), sft_file)
    cmd = command_for(cfg)
    assert cmd[:4] == ["swift", "sft", "--model", "/m"]
    pairs = dict(zip(cmd[2::2], cmd[3::2]))
    assert pairs["--tuner_type"] == "lora" and pairs["--template"] == "qwen3"
    assert pairs["--check_model"] == "false" and pairs["--add_version"] == "false"
    assert pairs["--dataloader_num_workers"] == "0" and pairs["--report_to"] == "none"
    assert pairs["--output_dir"] == str(tmp_path / "runs/tiny-qwen3/output")
    assert "--resume_from_checkpoint" not in cmd
    assert train(cfg, dry_run=True).startswith("swift sft --model /m")


def test_a_checkpoint_makes_the_command_resume(tmp_path, sft_file):
    cfg = _cfg(tmp_path, Path("/m"), sft_file)
    for n in (2, 10, 4):
        ck = run_dir(cfg) / "output" / f"checkpoint-{n}"
        ck.mkdir(parents=True)
        for name in ("adapter_model.safetensors", "adapter_config.json", "trainer_state.json"):
            (ck / name).write_bytes(b"")
    # a run killed while saving checkpoint-12: adapter written, trainer state not yet
    torn = run_dir(cfg) / "output" / "checkpoint-12"
    torn.mkdir()
    (torn / "adapter_model.safetensors").write_bytes(b"")
    cmd = command_for(cfg)
    assert cmd[-2:] == ["--resume_from_checkpoint", str(run_dir(cfg) / "output/checkpoint-10")]


def test_multi_node_env_deepspeed_and_slurm(tmp_path, sft_file):
    cfg = _cfg(
        tmp_path,
        Path("/m"),
        sft_file,
        nproc_per_node=8,
        nnodes=2,
        swift={"deepspeed": "zero3", "target_modules": ["q_proj", "v_proj"], "template": "qwen3"},
    )
    text = train(cfg, dry_run=True)
    assert text.startswith("NPROC_PER_NODE=8 NNODES=2 swift sft") or "NPROC_PER_NODE=8" in text
    assert "--deepspeed zero3" in text and "--target_modules q_proj v_proj" in text
    script = slurm_script(cfg, "configs/train/x.yaml")
    assert "#SBATCH --nodes=2" in script and "NODE_RANK=$SLURM_NODEID" in script
    assert "export NPROC_PER_NODE=8" in script and "lorarag train configs/train/x.yaml" in script


def test_unknown_swift_argument_and_reserved_keys_are_config_errors(tmp_path, sft_file):
    with pytest.raises(ConfigError, match="lora_rnak"):
        check_swift_args({"lora_rnak": 8, "lora_rank": 8})
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="output_dir is set by lorarag"):
        _cfg(tmp_path, Path("/m"), sft_file, swift={"output_dir": "x"})
    with pytest.raises(ConfigError, match="unknown ms-swift"):
        command_for(_cfg(tmp_path, Path("/m"), sft_file, swift={"lora_rnak": 8}))


def test_find_adapter(tmp_path):
    from lorarag.train.runs import final_adapter

    with pytest.raises(FileNotFoundError, match="nope"):
        find_adapter("nope", tmp_path)
    assert final_adapter("nope", tmp_path) is None
    ad = tmp_path / "a"
    ad.mkdir()
    (ad / "adapter_config.json").write_text("{}")
    assert find_adapter(ad) == ad
    (tmp_path / "run1").mkdir()
    (tmp_path / "run1/adapter.json").write_text(json.dumps({"adapter": str(ad), "base_model": "/m"}))
    assert find_adapter("run1", tmp_path) == ad
    cmd = export_command("run1", str(tmp_path / "merged"), str(tmp_path))
    assert cmd[:8] == [
        "swift",
        "export",
        "--adapters",
        str(ad),
        "--merge_lora",
        "true",
        "--output_dir",
        str(tmp_path / "merged"),
    ]
    assert cmd[cmd.index("--model") + 1] == "/m"  # no args.json: the base is named


def test_peft_kind_rejects_swift_arguments_it_would_not_honour(tmp_path):
    """gradient_accumulation_steps would change the training under ms-swift; the peft loop does not
    implement it, so the config is refused rather than trained differently without a word."""
    base = {"kind": "peft", "run_name": "r", "model": "/m", "dataset": "/d.jsonl"}
    with pytest.raises(
        ValueError,
        match=r"swift.gradient_accumulation_steps: not implemented by the peft kind"
        r".*also lr_scheduler_kwargs",
    ):
        TrainConfig.model_validate(
            {**base, "swift": {"gradient_accumulation_steps": 2, "lora_rank": 8, "lr_scheduler_kwargs": {}}}
        )
    ok = {"model_type": "qwen3", "template": "qwen3", "logging_steps": 5, "bf16": True, "lora_rank": 8}
    assert TrainConfig.model_validate({**base, "swift": ok}).swift == ok
    with pytest.raises(ValueError, match="not implemented"):  # the swift kind takes it (ms-swift checks)
        TrainConfig.model_validate({**base, "swift": {"gradient_accumulation_steps": 2}})
    TrainConfig.model_validate({**base, "kind": "swift", "swift": {"gradient_accumulation_steps": 2}})


def test_peft_kind_trains_writes_the_adapter_format_and_resumes(tmp_path, tiny_models, sft_file):
    """The CPU loop: loss falls on a repeated batch; a second call resumes from its checkpoint."""
    import torch

    torch.set_num_threads(1)
    from lorarag.train.peft_trainer import train_peft

    args = {
        "lora_rank": 4,
        "lora_alpha": 8,
        "max_steps": 4,
        "save_steps": 2,
        "per_device_train_batch_size": 4,
        "max_length": 512,
        "torch_dtype": "float32",
        "learning_rate": 5e-3,
    }
    out = tmp_path / "peft"
    final = train_peft(str(tiny_models["lm"]), str(sft_file), str(out), args, seed=0)
    assert final.name == "checkpoint-4"
    assert (final / "adapter_config.json").is_file() and (final / "adapter_model.safetensors").is_file()
    log = [json.loads(x) for x in (out / "logging.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [1, 2, 3, 4]
    assert all(0 < r["loss"] < 100 for r in log)  # finite: no batch without labels (NaN fails this)
    # Resume: with max_steps raised, it continues from checkpoint-4 (steps 5..6 only).
    train_peft(str(tiny_models["lm"]), str(sft_file), str(out), {**args, "max_steps": 6}, seed=0)
    log = [json.loads(x) for x in (out / "logging.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [1, 2, 3, 4, 5, 6]
    assert last_checkpoint(out).name == "checkpoint-6"


def test_peft_kind_upper_layers_bf16_base_eager(tmp_path, tiny_models, sft_file):
    """`target_regex` adapts only the matching layers; a bf16 base keeps fp32 LoRA weights."""
    import torch
    from safetensors.torch import load_file

    torch.set_num_threads(1)
    from lorarag.train.peft_trainer import train_peft

    args = {
        "lora_rank": 4,
        "lora_alpha": 8,
        "max_steps": 2,
        "save_steps": 2,
        "per_device_train_batch_size": 4,
        "max_length": 512,
        "torch_dtype": "bfloat16",
        "attn_impl": "eager",
        "learning_rate": 5e-3,
        "target_regex": r".*\.layers\.1\.(self_attn\.[qkvo]_proj|mlp\.(gate|up|down)_proj)",
    }
    final = train_peft(str(tiny_models["lm"]), str(sft_file), str(tmp_path / "p"), args, seed=0)
    weights = load_file(str(final / "adapter_model.safetensors"))
    layers = {k.split(".layers.")[1].split(".")[0] for k in weights}
    assert layers == {"1"} and len(weights) == 2 * 7  # lora_A + lora_B on 7 linears of layer 1 only
    assert {w.dtype for w in weights.values()} == {torch.float32}
    log = [json.loads(x) for x in (tmp_path / "p/logging.jsonl").read_text().splitlines()]
    assert len(log) == 2 and all(r["loss"] == r["loss"] and r["loss"] > 0 for r in log)  # finite, not NaN


def test_peft_labels_cover_only_the_reply(tiny_models):
    from transformers import AutoTokenizer

    from lorarag.train.peft_trainer import tokenize_rows

    tok = AutoTokenizer.from_pretrained(tiny_models["lm"])
    row = {
        "messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "Question: q?"},
            {"role": "assistant", "content": "Lyon"},
        ]
    }
    [(ids, labels)] = tokenize_rows(tok, [row], 512)
    kept = [t for t, lab in zip(ids, labels) if lab != -100]
    # The reply and its end token; with Qwen3's template the empty think block belongs to the reply
    # (as ms-swift trains it), never the system or user text.
    text = tok.decode(kept)
    assert text.endswith("Lyon<|im_end|>") and "Question" not in text and text.count("<|im_start|>") == 0


def test_peft_rows_over_max_length_are_dropped_or_cut_never_left_without_labels(tiny_models):
    from transformers import AutoTokenizer

    from lorarag.train.peft_trainer import tokenize_rows

    tok = AutoTokenizer.from_pretrained(tiny_models["lm"])

    def row(q: str) -> dict:
        return {"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": "Lyon"}]}

    short, long_ = row("Where?"), row("Where is it? " * 40)
    n_short = len(tokenize_rows(tok, [short], 4096)[0][0])
    n_long = len(tokenize_rows(tok, [long_], 4096)[0][0])
    limit = n_short + 5
    assert len(tokenize_rows(tok, [short, long_], limit)) == 1  # delete: the long row goes
    # right: cut from the end; a row whose reply would be cut entirely is dropped as well
    assert len(tokenize_rows(tok, [short, long_], limit, "right")) == 1
    [(ids, labels)] = tokenize_rows(tok, [long_], n_long - 1, "right")
    assert len(ids) == n_long - 1 and any(x != -100 for x in labels)
    with pytest.raises(ValueError, match="max_length"):
        tokenize_rows(tok, [long_], limit)


@pytest.mark.slow
def test_swift_sft_kill_resume_export_reload(tmp_path, tiny_models, sft_file):
    """A real `swift sft` LoRA on the tiny Qwen3: killed after its first checkpoint, resumed to the
    end, merged with `swift export`, and the merged model's logits match peft's adapter."""
    import torch

    cfg = _cfg(
        tmp_path,
        tiny_models["lm"],
        sft_file,
        swift={**load_train_config(REPO / "configs/train/tiny.yaml").swift, "max_steps": 40, "save_steps": 2},
    )
    out = run_dir(cfg) / "output"
    env = launch_env({**os.environ, "OMP_NUM_THREADS": "1"})  # as train() launches it
    proc = subprocess.Popen(
        swift_command(cfg), env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.time() + 300
        while last_checkpoint(out) is None and time.time() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert last_checkpoint(out) is not None, "no checkpoint before the kill"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    first = last_checkpoint(out)
    assert int(first.name.split("-")[1]) < 40
    assert command_for(cfg)[-2:] == ["--resume_from_checkpoint", str(first)]
    final = train(cfg)  # resumes
    assert final.name == "checkpoint-40"
    state = json.loads((final / "trainer_state.json").read_text())
    assert state["global_step"] == 40
    assert (out / "args.json").is_file() and (run_dir(cfg) / "run.json").is_file()
    assert find_adapter(cfg.run_name, cfg.runs_dir) == final

    merged = tmp_path / "merged"
    cmd = export_command(cfg.run_name, str(merged), cfg.runs_dir)
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    ids = torch.tensor([[5, 17, 42, 99, 7]])
    base = AutoModelForCausalLM.from_pretrained(tiny_models["lm"], dtype=torch.float32)
    with torch.no_grad():
        plain = base(ids).logits
        lora = PeftModel.from_pretrained(base, final).eval()
        via_peft = lora(ids).logits
        via_merge = AutoModelForCausalLM.from_pretrained(merged, dtype=torch.float32)(ids).logits
    assert not torch.allclose(plain, via_peft, atol=1e-4)  # the adapter changed something
    assert torch.allclose(via_peft, via_merge, atol=1e-4)


def test_peft_main_reports_rows_that_do_not_fit_in_one_line(tmp_path, tiny_models, sft_file):
    from lorarag.train.peft_trainer import main

    with pytest.raises(SystemExit) as exc:
        main(
            [
                "--model",
                str(tiny_models["lm"]),
                "--dataset",
                str(sft_file),
                "--output_dir",
                str(tmp_path / "o"),
                "--args",
                json.dumps({"max_length": 8}),
            ]
        )
    msg = str(exc.value.code)
    assert msg.startswith("error: no training row fits max_length=8") and "\n" not in msg


def test_shared_prefix_stops_before_the_first_label_and_needs_two_rows():
    from lorarag.train.peft_trainer import shared_prefix

    a = ([1, 2, 3, 4, 5, 6, 7], [-100, -100, -100, -100, -100, 6, 7])  # first label at index 5
    b = ([1, 2, 3, 4, 5, 9, 9, 9], [-100, -100, -100, -100, -100, -100, 9, 9])
    c = ([1, 2, 8, 4, 5, 9], [-100, -100, -100, -100, 5, 9])
    # a and b agree on 5 tokens, but the token at index 4 predicts a's first label: 4 are shared
    assert shared_prefix([a, b], min_tokens=1) == 4
    assert shared_prefix([a, b, c], min_tokens=1) == 2  # c differs at index 2
    assert shared_prefix([a, c], min_tokens=3) == 0  # 2 < min_tokens: not worth a second pass
    assert shared_prefix([a], min_tokens=1) == 0  # one row: nothing to share
    assert shared_prefix([a, a], min_tokens=1) == 4


def test_share_prefix_gives_the_padded_batch_loss_and_gradients(tiny_models, sft_file):
    """The prefix pass + repeated cache is the same computation as the padded batch (fp32: equal
    up to float rounding), on real SFT rows that share their system prompt."""
    import torch
    from transformers import AutoTokenizer

    from lorarag.train.config import DEFAULTS
    from lorarag.train.peft_trainer import lora_model, loss_backward, shared_prefix, tokenize_rows
    from lorarag.train.sft import read_sft

    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(tiny_models["lm"])
    data = tokenize_rows(tok, read_sft(sft_file), 512)
    batch = data[:6]
    assert shared_prefix(batch) >= 8  # the rows do share a system prompt
    torch.manual_seed(0)
    model = lora_model(str(tiny_models["lm"]), {**DEFAULTS, "torch_dtype": "float32", "lora_rank": 4})
    for name, p in model.named_parameters():  # non-zero B: the adapter's own gradient path counts too
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.05)
    params = [p for p in model.parameters() if p.requires_grad]
    body, head = model.get_base_model().model, model.get_output_embeddings()
    out = []
    for share in (False, True):
        loss = loss_backward(body, head, batch, tok.pad_token_id, bf16=False, share_prefix=share)
        out.append((loss.item(), torch.cat([p.grad.flatten() for p in params]).clone()))
        model.zero_grad(set_to_none=True)
    (l0, g0), (l1, g1) = out
    assert l1 == pytest.approx(l0, rel=1e-5)
    assert float((g1 - g0).norm() / g0.norm()) < 1e-4


def test_share_prefix_is_for_the_peft_kind_and_reaches_its_command(tmp_path):
    from lorarag.train.swift import peft_command

    base = {"run_name": "r", "model": "/m", "dataset": "/d.jsonl", "share_prefix": True}
    with pytest.raises(ValueError, match="share_prefix is for the peft kind"):
        TrainConfig.model_validate({**base, "kind": "swift"})
    cfg = TrainConfig.model_validate({**base, "kind": "peft"})
    assert peft_command(cfg)[-1] == "--share_prefix"
    assert "--share_prefix" not in peft_command(cfg.model_copy(update={"share_prefix": False}))


def test_config_changes_name_what_differs_from_the_trained_run(tmp_path):
    from lorarag.core.runinfo import start_run
    from lorarag.train.runs import config_changes

    cfg = TrainConfig.model_validate(
        {
            "kind": "peft",
            "run_name": "r",
            "model": "/m",
            "dataset": "/d.jsonl",
            "runs_dir": str(tmp_path),
            "swift": {"lora_rank": 8},
        }
    )
    assert config_changes(cfg) == []  # never trained: nothing to compare
    start_run(run_dir(cfg), cfg)
    assert config_changes(cfg) == []
    # where it runs is not what it trains; a launch field differs without a change
    assert config_changes(cfg.model_copy(update={"nproc_per_node": 2})) == []
    other = cfg.model_copy(update={"share_prefix": True, "swift": {"lora_rank": 16, "attn_impl": "eager"}})
    assert config_changes(other) == ["share_prefix", "swift.attn_impl", "swift.lora_rank"]
    # a saved config written before a field existed reads it as its default
    saved = run_dir(cfg) / "config.yaml"
    saved.write_text(saved.read_text().replace("share_prefix: false\n", ""))
    assert config_changes(cfg) == []
    # `lorarag train` itself refuses to resume that run dir under the other recipe, keeping it
    (tmp_path / "d.jsonl").write_text("{}\n")
    other = other.model_copy(update={"model": str(tmp_path), "dataset": str(tmp_path / "d.jsonl")})
    from lorarag.train.swift import TrainError

    with pytest.raises(TrainError, match=r"trained with another config \(differs in"):
        train(other)
    assert saved.is_file() and "share_prefix" not in saved.read_text()  # nothing rewritten


def test_a_killed_parent_takes_its_training_child_with_it(tmp_path):
    """run_child: the training process dies with `lorarag` even when `lorarag` is SIGKILLed."""
    import signal
    import subprocess
    import sys
    import time

    pidfile = tmp_path / "child.pid"
    child = f"import os, time; open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(120)"
    parent = f"import sys; from lorarag.train.swift import run_child; run_child([sys.executable, '-c', {child!r}], {{}})"
    p = subprocess.Popen([sys.executable, "-c", parent], cwd=Path(__file__).resolve().parents[1])
    for _ in range(300):
        if pidfile.exists() and pidfile.read_text():
            break
        time.sleep(0.1)
    pid = int(pidfile.read_text())
    p.send_signal(signal.SIGKILL)
    p.wait()
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        try:  # a zombie child of a dead parent is reaped by init; count it as gone
            if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
                break
        except FileNotFoundError:
            break
        time.sleep(0.1)
    else:
        os.kill(pid, signal.SIGKILL)
        raise AssertionError("the training child outlived its killed parent")


class _RunsCode:
    """A pickled object that would create `marker` when unpickled (what a hostile run folder holds)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (Path.touch, (Path(self.marker),))


def test_resume_state_is_loaded_without_running_code(tmp_path):
    import torch

    from lorarag.train.trainer_state import load_trainer_state

    p = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(p.parameters(), lr=1e-3)
    p(torch.ones(1, 3)).sum().backward()
    opt.step()
    torch.save({"optimizer": opt.state_dict(), "step": 7}, tmp_path / "trainer_state.pt")
    state = load_trainer_state(tmp_path)
    assert state["step"] == 7 and set(state["optimizer"]) == {"state", "param_groups"}
    opt2 = torch.optim.AdamW(p.parameters(), lr=1e-3)
    opt2.load_state_dict(state["optimizer"])
    marker = tmp_path / "pwned"
    torch.save({"optimizer": {}, "step": 1, "x": _RunsCode(marker)}, tmp_path / "trainer_state.pt")
    with pytest.raises(ConfigError, match=r"trainer_state.pt: not a plain optimizer state, refused \(.*GLOBAL"):
        load_trainer_state(tmp_path)
    assert not marker.exists()
    torch.save({"optimizer": [], "step": "3"}, tmp_path / "trainer_state.pt")
    with pytest.raises(ConfigError, match="expected"):
        load_trainer_state(tmp_path)


def test_the_training_child_iterates_sets_the_same_way_whatever_the_parents_hash_seed():
    """peft writes target_modules from a set: under launch_env the child's order is fixed, so the same
    training writes the same adapter_config.json (and the adapter keeps its content id)."""
    import sys

    code = "print(list({'q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'}))"
    base = {k: v for k, v in os.environ.items() if k != "PYTHONHASHSEED"}

    def order(env):
        return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout

    seeded = [{**base, "PYTHONHASHSEED": s} for s in ("1", "2", "3", "4")]
    assert len({order(e) for e in seeded}) > 1  # the hazard: another hash seed, another order
    assert len({order(launch_env(base)) for _ in range(3)}) == 1 and launch_env(base)["PYTHONHASHSEED"] == "0"
    assert launch_env({"PYTHONHASHSEED": "7"})["PYTHONHASHSEED"] == "7"  # a user's own choice is kept
