"""`lorarag bench cpu`: what makes the CPU demo fit its budget, each beside the slow baseline in one run.

(a) One LoRA training step (batch of SFT-like chat rows, bf16 autocast, loss on the reply only:
    `train.peft_trainer.loss_backward`) with the first measured recipe as the baseline — base loaded in
    fp32 and cast by autocast, SDPA attention, LoRA on every layer — against: eager attention
    (`attn_impl`), eager + each batch's shared prefix run once (`share_prefix`; the demo's
    recipe), base loaded in bf16 (ms-swift's `torch_dtype`) + eager, and that with LoRA on
    the upper half of the layers only (`target_regex`), where the backward pass stops early.
(b) Batched greedy generation of grounded-prompt-sized inputs: fp32 weights vs bf16 weights with the
    fp32 LM head (`GeneratorConfig.fp32_lm_head`), + eager attention (`attn_impl`), + the shared
    system prompt prefilled once per batch (`prefix_cache`); also how often the greedy answers agree
    with fp32's and the largest first-token log-probability difference.
Model: `--model DIR` (the demo's SmolLM2 by default when converted, else a tiny Qwen3 built here,
whose timings only show that the bench runs). Rows are synthetic with the demo's lengths.
"""

from __future__ import annotations

import json
import platform
import random
import tempfile
import time
from pathlib import Path

from lorarag.rag.config import GeneratorConfig
from lorarag.rag.generators.base import Message
from lorarag.rag.generators.registry import build_generator
from lorarag.testing.tiny import build_causal_lm
from lorarag.train.config import DEFAULTS
from lorarag.train.peft_trainer import length_batches, lora_model, loss_backward, tokenize_rows

WORDS = (
    "company founded headquarters chief executive officer net profit fiscal year version product "
    "flagship city robotics energy logistics source memory verdict answer outdated archive"
).split()
DEMO_MODEL = Path("checkpoints/smollm2-135m-instruct")


def _rows(n: int, seed: int) -> list[dict]:
    """Chat rows shaped like the demo's SFT mix: 3 short closed-book rows per 4 RAG rows."""
    rng = random.Random(seed)

    def words(k: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(k))

    # one system prompt per row type, as in the demo's SFT rows (what `share_prefix` shares)
    system = {True: words(30), False: words(12)}
    rows = []
    for i in range(n):
        rag = i % 7 >= 3
        user = (
            f"Sources:\n[S1] {words(30)}.\n[S2] {words(30)}.\nQuestion: {words(10)}?" if rag else f"Question: {words(10)}?"
        )
        reply = f"memory: {words(3)} | source: {words(3)} | verdict: supported | answer: {words(3)}" if rag else words(3)
        rows.append(
            {
                "messages": [
                    {"role": "system", "content": system[rag]},
                    {"role": "user", "content": user},
                    {"role": "assistant", "content": reply},
                ]
            }
        )
    return rows


def upper_half_regex(n_layers: int) -> str:
    """`target_regex` for every linear layer of the upper half of a Llama/Qwen-style decoder."""
    layers = "|".join(str(i) for i in range(n_layers // 2, n_layers))
    return rf".*\.layers\.({layers})\.(self_attn\.[qkvo]_proj|mlp\.(gate|up|down)_proj)"


def bench_train_step(model_dir: Path, steps: int, batch: int) -> list[dict]:
    """Seconds per training step of each variant on the same batches (after one warm-up step)."""
    import torch
    from transformers import AutoConfig, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    data = tokenize_rows(tok, _rows(batch * (steps + 1), 0), 320)
    plan = length_batches([len(d[0]) for d in data], batch, random.Random(0))[: steps + 1]
    upper = upper_half_regex(AutoConfig.from_pretrained(model_dir).num_hidden_layers)
    fp32 = {"torch_dtype": "float32"}
    variants = [
        ("baseline: fp32 base, sdpa, LoRA on all layers", fp32, False),
        ("fp32 base + eager attention", {**fp32, "attn_impl": "eager"}, False),
        ("fp32 base + eager + shared prefix (the demo)", {**fp32, "attn_impl": "eager"}, True),
        ("bf16 base + eager attention", {"attn_impl": "eager"}, False),
        ("bf16 base + eager + LoRA on the upper half", {"attn_impl": "eager", "target_regex": upper}, False),
    ]
    out = []
    for name, over, share in variants:
        a = {**DEFAULTS, **over}
        torch.manual_seed(0)
        model = lora_model(str(model_dir), a)
        params = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=1e-4)
        body, head = model.get_base_model().model, model.get_output_embeddings()
        times = []
        for b in plan:
            t0 = time.perf_counter()
            loss = loss_backward(body, head, [data[i] for i in b], tok.pad_token_id, bf16=True, share_prefix=share)
            opt.step()
            opt.zero_grad(set_to_none=True)
            times.append(time.perf_counter() - t0)
        out.append(
            {
                "variant": name,
                "s_per_step": sum(times[1:]) / len(times[1:]),
                "loss": loss.item(),
                "lora_params": sum(p.numel() for p in params),
            }
        )
        print(f"  {name}: {out[-1]['s_per_step']:.2f} s/step", flush=True)
    for r in out:
        r["speedup"] = out[0]["s_per_step"] / r["s_per_step"]
    return out


def bench_generation(model_dir: Path, n: int, new_tokens: int) -> dict:
    """fp32 weights vs bf16 weights + fp32 LM head (SDPA, then eager attention): time, greedy
    agreement with fp32, first-token logprob gap."""

    rng = random.Random(1)
    system = " ".join(rng.choice(WORDS) for _ in range(40))  # one system prompt, as a grounded prompt has
    convs = [
        [
            Message("system", system),
            Message("user", " ".join(rng.choice(WORDS) for _ in range(rng.randint(60, 140))) + f" question {i}?"),
        ]
        for i in range(n)
    ]
    res = {}
    for key, dtype, attn, cache in (
        ("fp32", "float32", None, False),
        ("bf16", "bfloat16", None, False),
        ("eager", "bfloat16", "eager", False),
        ("prefix", "bfloat16", "eager", True),
    ):
        gen = build_generator(
            GeneratorConfig(
                kind="transformers",
                model=str(model_dir),
                dtype=dtype,
                attn_impl=attn,
                prefix_cache=cache,
                max_new_tokens=new_tokens,
                batch_size=32,
                max_model_len=1024,
                chat_template_kwargs={},
            )
        )
        gen.generate(convs[:2], max_new_tokens=2)  # warm-up
        t0 = time.perf_counter()
        res[key] = (gen.generate(convs), time.perf_counter() - t0)
        gen.close()
        print(
            f"  generation {dtype}{' ' + attn if attn else ''}{' prefix cache' if cache else ''}: {res[key][1]:.1f} s",
            flush=True,
        )
    (a, ta), (b, tb), (e, te), (c, tc) = res["fp32"], res["bf16"], res["eager"], res["prefix"]
    gaps = [
        abs(x.logprobs[0] - y.logprobs[0])
        for x, y in zip(a, b)
        if x.logprobs and y.logprobs and x.tokens[:1] == y.tokens[:1]
    ]
    return {
        "n": n,
        "new_tokens": new_tokens,
        "fp32_s": ta,
        "bf16_fp32_head_s": tb,
        "speedup": ta / tb,
        "bf16_eager_s": te,
        "eager_speedup": ta / te,
        "prefix_cache_s": tc,
        "prefix_cache_speedup": ta / tc,
        "same_greedy_text": sum(x.text == y.text for x, y in zip(a, b)) / n,
        "eager_same_greedy_text": sum(x.text == y.text for x, y in zip(a, e)) / n,
        "prefix_cache_same_greedy_text": sum(x.text == y.text for x, y in zip(a, c)) / n,
        "max_first_token_logprob_gap": max(gaps) if gaps else None,
    }


def run(model: Path | None, steps: int, batch: int, n_gen: int, new_tokens: int, out: Path) -> dict:
    """Both parts; prints the tables and writes JSON to `out`."""
    import torch

    tmp = None
    if model is None and (DEMO_MODEL / "config.json").is_file():
        model = DEMO_MODEL
    if model is None:
        tmp = tempfile.TemporaryDirectory()
        model = build_causal_lm(Path(tmp.name) / "lm", hidden_size=128, num_hidden_layers=4)
    print(f"model {model}, {torch.get_num_threads()} threads")
    result = {
        "model": str(model),
        "threads": torch.get_num_threads(),
        "machine": platform.machine(),
        "train_step": bench_train_step(model, steps, batch),
        "generation": bench_generation(model, n_gen, new_tokens),
    }
    print("\n| training step variant | s/step | speed-up vs baseline |\n|---|---|---|")
    for r in result["train_step"]:
        print(f"| {r['variant']} | {r['s_per_step']:.2f} | {r['speedup']:.2f}x |")
    g = result["generation"]
    print(
        f"\ngeneration of {g['n']} prompts x {g['new_tokens']} tokens: fp32 {g['fp32_s']:.1f} s, "
        f"bf16 + fp32 head {g['bf16_fp32_head_s']:.1f} s ({g['speedup']:.2f}x), + eager attention "
        f"{g['bf16_eager_s']:.1f} s ({g['eager_speedup']:.2f}x), + prefix cache {g['prefix_cache_s']:.1f} s "
        f"({g['prefix_cache_speedup']:.2f}x); same greedy text as fp32 {g['same_greedy_text']:.0%} / "
        f"{g['eager_same_greedy_text']:.0%} / {g['prefix_cache_same_greedy_text']:.0%}, max first-token "
        f"logprob gap (bf16) {g['max_first_token_logprob_gap']}"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    if tmp is not None:
        tmp.cleanup()
    return result
