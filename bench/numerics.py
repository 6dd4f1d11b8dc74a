"""`lorarag bench numerics`: a fingerprint of a pinned tiny training run, held against the
fingerprints committed from other machines, so any machine can check whether it trains the same
bits and, where it does not, at which stage they part.

The run (in a child process with the AVX2 pins and 1 thread of `numerics: {cpu_isa: avx2}`):
1. `base`: a tiny Qwen3 built from seed 0 (random init: the RNG's kernels);
2. `rows`: 12 SFT rows of the seed-0 demo world of 8 organisations, written as a knowledge base
   and split by fact as a run does (bench/demo_kb.py; data, no arithmetic);
3. `forward`: the base model's logits on the first row (the forward kernels);
4. `loss@1..3`: the peft loop's loss at each step (step 1 is a forward pass at the LoRA's init;
   steps 2-3 also read the updates before them);
5. `init`, `grad@1`, `clipped@1`: step 1 taken apart, as the peft loop takes it: the LoRA's fresh
   weights (seeded RNG), the gradients of the first batch (backward pass), the same after the
   norm clip at 1.0;
6. `adapter@1..3`: the adapter after each step (after `clipped@1`: AdamW).
The first stage that differs from a reference says where the bits part: model build, forward,
LoRA init, backward, clip or optimiser. A reference recorded before a stage existed is compared on
the stages it holds. The same run with the machine's own kernel choice says whether the pins
change anything on this CPU. Nothing here is timed; the JSON goes to `--out`.

`bench/numerics_reference.json` holds one fingerprint per machine kind that ran it, with the
machine's CPU flags; `--record` adds this machine's.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from lorarag.core.numerics import NumericsConfig, cpu_flags, pinned_env

REFERENCE = Path(__file__).with_name("numerics_reference.json")
PINS = NumericsConfig(cpu_isa="avx2", threads=1)
STEPS = 3
STAGES = (
    "base",
    "rows",
    "forward",
    *(f"loss@{i}" for i in range(1, STEPS + 1)),
    "init",
    "grad@1",
    "clipped@1",
    *(f"adapter@{i}" for i in range(1, STEPS + 1)),
)
TRAIN_ARGS = {
    "lora_rank": 4,
    "lora_alpha": 8,
    "max_steps": STEPS,
    "save_steps": 1,
    "save_total_limit": STEPS,
    "per_device_train_batch_size": 4,
    "max_length": 512,
    "torch_dtype": "float32",
    "learning_rate": 5e-3,
}


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _sha_tensors(named) -> str:
    return _sha(b"".join(t.detach().float().contiguous().numpy().tobytes() for _, t in sorted(named)))


def first_step(lm: Path, data: Path) -> dict[str, str]:
    """`init`, `grad@1`, `clipped@1`: the peft loop's step 1 up to AdamW, rebuilt from its own
    functions in its order (seed, model, batch plan, loss, clip); its loss is checked against the
    loop's `loss@1`."""
    import random

    import torch
    from transformers import AutoTokenizer

    from lorarag.train.config import DEFAULTS
    from lorarag.train.peft_trainer import length_batches, lora_model, loss_backward, tokenize_rows
    from lorarag.train.sft import read_sft

    a = {**DEFAULTS, **TRAIN_ARGS}
    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(lm)
    rows = tokenize_rows(tok, read_sft(str(data)), int(a["max_length"]), a["truncation_strategy"])
    model = lora_model(str(lm), a)
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    out = {"init": _sha_tensors(params)}
    batch = length_batches([len(r[0]) for r in rows], int(a["per_device_train_batch_size"]), random.Random(0))[0]
    model.train()
    loss = loss_backward(
        model.get_base_model().model, model.get_output_embeddings(), [rows[i] for i in batch], tok.pad_token_id, False
    )
    out["loss"] = f"{loss.item():.4f}"
    out["grad@1"] = _sha_tensors([(n, p.grad) for n, p in params])
    torch.nn.utils.clip_grad_norm_([p for _, p in params], 1.0)
    out["clipped@1"] = _sha_tensors([(n, p.grad) for n, p in params])
    return out


def worker(work: Path) -> dict[str, str]:
    """The fingerprint, computed in this (pinned) process."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lorarag.bench.demo_kb import load_world_kb, world_rows
    from lorarag.rag.config import ChunkerConfig
    from lorarag.scenarios.config import SplitConfig, WorldConfig
    from lorarag.testing.tiny import build_causal_lm
    from lorarag.train.config import SFTConfig
    from lorarag.train.peft_trainer import train_peft
    from lorarag.train.sft import write_sft

    lm = build_causal_lm(work / "tiny-qwen3", seed=0)
    kb = load_world_kb(WorldConfig(seed=0, n_orgs=8), ChunkerConfig(), work / "world")
    data = write_sft(world_rows(kb, SplitConfig(), SFTConfig(knowledge_repeats=1))[:12], work / "train.jsonl")
    out = {"base": _sha((Path(lm) / "model.safetensors").read_bytes()), "rows": _sha(Path(data).read_bytes())}
    tok = AutoTokenizer.from_pretrained(lm)
    model = AutoModelForCausalLM.from_pretrained(lm, torch_dtype=torch.float32).eval()
    first = json.loads(Path(data).read_text(encoding="utf-8").splitlines()[0])["messages"]
    ids = tok.apply_chat_template(first, tokenize=True, return_tensors="pt", return_dict=True)["input_ids"]
    with torch.no_grad():
        out["forward"] = _sha(model(input_ids=ids).logits.float().numpy().tobytes())
    folder = work / "train"
    train_peft(str(lm), str(data), str(folder), TRAIN_ARGS, 0)
    losses = [json.loads(x) for x in (folder / "logging.jsonl").read_text().splitlines()]
    for rec in losses:
        out[f"loss@{rec['step']}"] = f"{rec['loss']:.4f}"
    step1 = first_step(lm, data)
    if step1.pop("loss") != out["loss@1"]:
        raise RuntimeError("the rebuilt first step does not reproduce the peft loop's loss@1")
    out.update(step1)
    for step in range(1, STEPS + 1):
        out[f"adapter@{step}"] = _sha((folder / f"checkpoint-{step}" / "adapter_model.safetensors").read_bytes())
    return out


def fingerprint(work: Path, *, pinned: bool = True) -> dict[str, str]:
    """The fingerprint from a child process, under the AVX2 pins (they must be set before torch
    loads) or, `pinned=False`, with the machine's own kernel choice on 1 thread."""
    work.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in pinned_env(PINS)}
    env.update(pinned_env(PINS) if pinned else {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
    res = subprocess.run(
        [sys.executable, "-m", "lorarag.bench.numerics", str(work)], env=env, capture_output=True, text=True, timeout=900
    )
    if res.returncode != 0:
        raise RuntimeError(f"the pinned fingerprint run failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def first_difference(mine: dict[str, str], ref: dict[str, str]) -> str | None:
    """The first stage (in STAGES order) whose value differs, or None when all agree; a stage
    the reference does not hold (recorded before the stage existed) is not compared."""
    return next((s for s in STAGES if s in ref and mine.get(s) != ref[s]), None)


WHERE = {
    "base": "model build (the RNG's kernels)",
    "rows": "the data",
    "forward": "the forward pass",
    "loss@1": "the forward pass at the LoRA's init",
    "init": "the LoRA's init (the RNG's kernels)",
    "grad@1": "the backward pass",
    "clipped@1": "the gradient-norm clip",
    "adapter@1": "the optimiser (AdamW)",
}


def where_parted(stage: str, ref: dict[str, str]) -> str:
    """What a first difference at `stage` blames; an adapter against a reference without the
    step-1 stages can only blame backward and optimiser together."""
    if stage.startswith("adapter@") and (stage != "adapter@1" or "clipped@1" not in ref):
        return "the backward pass or the optimiser"
    return WHERE[stage]


def run(work: Path, out: Path, record: bool, echo: Callable[[str], None]) -> dict:
    """Fingerprint this machine, compare with every committed reference, write `out`."""
    flags = cpu_flags()
    echo(
        f"numerics: pinned tiny run ({', '.join(f'{k}={v}' for k, v in pinned_env(PINS).items())}) "
        f"on a CPU with {', '.join(flags) or 'no reported flags'}"
    )
    mine = fingerprint(work / "pinned")
    own = fingerprint(work / "own", pinned=False)
    refs = json.loads(REFERENCE.read_text(encoding="utf-8")) if REFERENCE.is_file() else []
    own_diff = first_difference(own, mine)
    echo(
        "this machine's own kernels (unpinned): "
        + ("the same bits as pinned" if own_diff is None else f"first differ from pinned at {own_diff}")
    )
    report = {
        "cpu_flags": flags,
        "pins": pinned_env(PINS),
        "fingerprint": mine,
        "unpinned": own,
        "unpinned_first_difference": own_diff,
        "against": [],
    }
    echo("| stage | this machine | " + " | ".join(r["machine"] for r in refs) + " |")
    echo("|---|---|" + "---|" * len(refs))
    for s in STAGES:
        echo(
            f"| {s} | {mine.get(s)} | "
            + " | ".join(("same" if r["fingerprint"].get(s) == mine.get(s) else r["fingerprint"].get(s, "–")) for r in refs)
            + " |"
        )
    for r in refs:
        diff = first_difference(mine, r["fingerprint"])
        where = "identical bits" if diff is None else f"first differs at {diff}: {where_parted(diff, r['fingerprint'])}"
        report["against"].append({"machine": r["machine"], "first_difference": diff})
        echo(f"against {r['machine']}: {where}")
    if record:
        name = "+".join(f for f in flags if f != "avx2") or "avx2"
        refs = [r for r in refs if r["machine"] != name] + [
            {"machine": name, "cpu_flags": flags, "pins": pinned_env(PINS), "fingerprint": mine}
        ]
        REFERENCE.write_text(json.dumps(refs, indent=1) + "\n", encoding="utf-8")
        echo(f"recorded as {name} in {REFERENCE}")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return report


if __name__ == "__main__":
    import torch

    torch.set_num_threads(1)
    print(json.dumps(worker(Path(sys.argv[1]))))
