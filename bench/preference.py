"""`lorarag bench preference`: the CPU preference loop (train/preference_loop.py) beside TRL's DPOTrainer.

Both train the same thing from the same start: a tiny Qwen3 built here (or `--model DIR`), an SFT
LoRA on every linear layer (random non-zero B, so it changes the outputs), the policy that LoRA
trainable and the DPO reference the same LoRA frozen, its log-probabilities computed once before
the first step (the hand loop always does; TRL with `precompute_ref_log_probs`). The same pairs
(synthetic, shaped like the demo's: system prompt, two sources, a question, a verdict-format
reply), steps, batch, beta, learning rate (cosine, no warmup), seed; fp32 on the CPU. Timed: the
training steps only, after the first (model loading, tokenizing and the reference pass are not),
for `--repeats` runs of each in turn; the best run of each is reported, which a machine shared
with other work disturbs least. Steps/s of each, the ratio hand/TRL, and whether each loss at
step 1 is log 2 (policy = reference there: a check that both train the configuration meant).
TRL that cannot run this configuration is reported in one line, as the finding. JSON to `--out`.
"""

from __future__ import annotations

import json
import math
import os
import platform
import random
import tempfile
import time
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from lorarag.testing.tiny import build_causal_lm
from lorarag.train.config import PreferenceConfig
from lorarag.train.preference import PreferencePair, write_pairs

WORDS = (
    "company founded headquarters chief executive officer net profit fiscal year version product "
    "flagship city robotics energy logistics source memory verdict answer outdated archive"
).split()
LOG2_TOL = 1e-3  # |loss at step 1 - log 2| below which it counts as log 2


def make_pairs(n: int, seed: int) -> list[PreferencePair]:
    """`n` synthetic pairs with the demo's shape: a verdict-format chosen reply, a tempting rejected one."""
    rng = random.Random(seed)

    def words(k: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(k))

    system = words(12)
    out = []
    for i in range(n):
        mem, src = words(2), words(2)
        user = f"Sources:\n[S1] {words(14)}.\n[S2] {words(14)}.\nQuestion: {words(6)}?"
        out.append(
            PreferencePair(
                prompt=(("system", system), ("user", user)),
                chosen=f"memory: {mem} | source: {src} | verdict: conflicting | answer: {mem}",
                rejected=f"memory: {src} | source: {src} | verdict: supported | answer: {src}",
                kind="wrong_source",
                variant=0,
                fact_id=f"bench/{i}",
            )
        )
    return out


def build_sft_lora(base: Path, out_dir: Path, rank: int, seed: int) -> Path:
    """An SFT-like LoRA on all linear layers of `base` (B random, not peft's zeros), saved in `out_dir`."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32),
        LoraConfig(r=rank, lora_alpha=2 * rank, target_modules="all-linear", lora_dropout=0.0, task_type="CAUSAL_LM"),
    )
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
    model.save_pretrained(out_dir, safe_serialization=True)
    return out_dir


def steps_per_s(ends: list[float]) -> float:
    """Steps per second from the clock at the end of each step, the first step (warm-up) left out."""
    if len(ends) < 3:
        raise ValueError("need at least 3 steps to time the steps after the first")
    return (len(ends) - 1) / max(ends[-1] - ends[0], 1e-9)


def run_hand(model: Path, lora: Path, pairs: Path, work: Path, pref: dict[str, Any], seed: int) -> dict:
    """The hand loop on the pairs: steps/s and its loss at step 1 (from its logging.jsonl)."""
    from lorarag.train.preference_loop import run_cpu_loop

    run_cpu_loop(
        str(model),
        str(lora),
        str(pairs),
        str(work),
        pref,
        {"torch_dtype": "float32", "max_length": 512, "warmup_ratio": 0.0},
        seed,
    )
    rows = [json.loads(x) for x in (work / "logging.jsonl").read_text(encoding="utf-8").splitlines()]
    return {"steps_per_s": steps_per_s([r["elapsed_s"] for r in rows]), "first_loss": rows[0]["loss"]}


def run_trl(model: Path, lora: Path, pairs: list[PreferencePair], work: Path, pref: dict[str, Any], seed: int) -> dict:
    """TRL's DPOTrainer on the same pairs and settings: steps/s and its loss at step 1."""
    import torch
    from datasets import Dataset
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from transformers.trainer_callback import PrinterCallback
    from trl import DPOConfig, DPOTrainer

    class Clock(TrainerCallback):
        def __init__(self) -> None:
            self.ends: list[float] = []

        def on_step_end(self, args, state, control, **kwargs):
            self.ends.append(time.perf_counter())

    torch.manual_seed(seed)
    tok = AutoTokenizer.from_pretrained(model)
    policy = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32), lora, is_trainable=True
    )  # TRL copies it to a frozen "ref" adapter
    args = DPOConfig(
        output_dir=str(work),
        max_steps=int(pref["max_steps"]),
        per_device_train_batch_size=int(pref["per_device_train_batch_size"]),
        gradient_accumulation_steps=1,
        learning_rate=float(pref["learning_rate"]),
        lr_scheduler_type="cosine",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        beta=float(pref["beta"]),
        loss_type=["sigmoid"],
        precompute_ref_log_probs=True,
        max_length=512,
        seed=seed,
        use_cpu=True,
        bf16=False,
        fp16=False,
        gradient_checkpointing=False,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    clock = Clock()
    trainer = DPOTrainer(
        model=policy,
        args=args,
        train_dataset=Dataset.from_list([q.to_trl() for q in pairs]),
        processing_class=tok,
        callbacks=[clock],
    )
    trainer.remove_callback(PrinterCallback)  # its per-step dicts on stdout: the table says what matters
    trainer.train()
    first = next(r["loss"] for r in trainer.state.log_history if "loss" in r)
    return {"steps_per_s": steps_per_s(clock.ends), "first_loss": float(first)}


def summarise(hand: list[dict], trl: list[dict] | str) -> dict:
    """The best run of each (highest steps/s), the ratio hand/TRL and the log 2 checks; `trl` is the
    error text where TRL did not run."""
    best_hand = max(hand, key=lambda r: r["steps_per_s"])
    out: dict[str, Any] = {
        "hand": {
            **best_hand,
            "first_loss_is_log2": abs(best_hand["first_loss"] - math.log(2)) < LOG2_TOL,
            "runs": [r["steps_per_s"] for r in hand],
        }
    }
    if isinstance(trl, str):
        return {**out, "trl": None, "trl_error": trl, "ratio_hand_over_trl": None}
    best_trl = max(trl, key=lambda r: r["steps_per_s"])
    out["trl"] = {
        **best_trl,
        "first_loss_is_log2": abs(best_trl["first_loss"] - math.log(2)) < LOG2_TOL,
        "runs": [r["steps_per_s"] for r in trl],
    }
    return {**out, "trl_error": None, "ratio_hand_over_trl": best_hand["steps_per_s"] / best_trl["steps_per_s"]}


def table(summary: dict, trl_version: str) -> list[str]:
    """The printed lines: a markdown table of both loops, then the ratio (or TRL's failure)."""
    lines = ["| loop | steps/s (best) | runs | loss at step 1 | = log 2 |", "|---|---|---|---|---|"]
    for key, name in (("hand", "hand loop (train/preference_loop.py)"), ("trl", f"TRL {trl_version} DPOTrainer")):
        r = summary.get(key)
        if r is not None:
            runs = ", ".join(f"{x:.2f}" for x in r["runs"])
            lines.append(
                f"| {name} | {r['steps_per_s']:.2f} | {runs} | {r['first_loss']:.6f} | "
                f"{'yes' if r['first_loss_is_log2'] else 'NO'} |"
            )
    if summary["trl_error"]:
        lines.append(f"TRL {trl_version} DPOTrainer cannot run this configuration on CPU: {summary['trl_error']}")
    else:
        ratio = summary["ratio_hand_over_trl"]
        lines.append(f"hand / TRL steps/s: {ratio:.2f}x ({'the hand loop' if ratio > 1 else 'TRL'} is faster)")
    return lines


def run(
    model: Path | None,
    steps: int,
    batch: int,
    n_pairs: int,
    seed: int,
    repeats: int,
    out: Path,
    echo: Callable[[str], None] = print,
) -> dict:
    """Both loops `repeats` times each, in turn; echoes the table and writes JSON to `out`."""
    import torch

    try:
        trl_version = version("trl")
    except PackageNotFoundError:
        trl_version = "(not installed)"
    pref = PreferenceConfig(
        enabled=True, beta=0.1, learning_rate=1e-4, max_steps=steps, per_device_train_batch_size=batch
    ).model_dump()
    label = str(model) if model is not None else "tiny Qwen3 (hidden 128, 4 layers)"
    isa = torch.backends.cpu.get_cpu_capability()
    with tempfile.TemporaryDirectory(prefix="lorarag-bench-preference-") as tmp:
        root = Path(tmp)
        if model is None:
            model = build_causal_lm(root / "lm", hidden_size=128, num_hidden_layers=4)
        lora = build_sft_lora(model, root / "sft", rank=8, seed=seed)
        pairs = make_pairs(n_pairs, seed)
        pairs_file = write_pairs(pairs, root / "bench.pairs.jsonl")
        echo(
            f"model {label}, {torch.get_num_threads()} threads ({isa}), {n_pairs} pairs, {steps} steps of {batch} "
            f"pairs, {repeats} run(s) each"
        )
        hand: list[dict] = []
        trl_runs: list[dict] | str = []
        for i in range(repeats):
            hand.append(run_hand(model, lora, pairs_file, root / f"hand{i}", pref, seed))
            echo(f"  hand loop run {i + 1}: {hand[-1]['steps_per_s']:.2f} steps/s")
            if isinstance(trl_runs, list):
                try:
                    trl_runs.append(run_trl(model, lora, pairs, root / f"trl{i}", pref, seed))
                    echo(f"  TRL run {i + 1}: {trl_runs[-1]['steps_per_s']:.2f} steps/s")
                except (ImportError, ValueError, TypeError, RuntimeError, NotImplementedError) as exc:
                    trl_runs = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        summary = summarise(hand, trl_runs)
    for line in table(summary, trl_version):
        echo(line)
    result = {
        "model": label,
        "threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "cpu_capability": isa,
        "machine": platform.machine(),
        "torch": torch.__version__,
        "trl": trl_version,
        "steps": steps,
        "batch": batch,
        "pairs": n_pairs,
        "seed": seed,
        "repeats": repeats,
        **summary,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    echo(f"results -> {out}")
    return result
