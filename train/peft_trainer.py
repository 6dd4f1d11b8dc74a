"""The `peft` trainer kind: a plain LoRA loop for the CPU demo (GPU runs use ms-swift; this loop
also runs on a visible GPU, as ms-swift would, e.g. where ms-swift is not installed).

Why it exists: on 2 CPU cores ms-swift's step costs more than this loop (see
docs/research-log.md for the measured flags). This loop does what makes CPU training fit:
bf16 autocast (AVX512-BF16), no gradient checkpointing, length-grouped batches (little
padding), the LM head applied only at positions that carry a label (the 49k-vocabulary
projection at every position is wasted work), and, with `share_prefix`, each batch's common
leading tokens (system prompt, chat header) run once for all its rows. As in ms-swift, `torch_dtype` is the dtype the
frozen base is loaded in (the LoRA weights stay fp32), `attn_impl` picks the attention kernel and
`target_regex` (a full-match regex over module names) overrides `target_modules`: LoRA on the
upper layers only lets the backward pass stop there (`lorarag bench cpu` measures each gain).
It reads the same ms-swift argument names from `TrainConfig.swift` and writes the same adapter
format (`checkpoint-N/adapter_config.json` + `adapter_model.safetensors`); loss is on the assistant
reply and its end token only, as ms-swift's chatml template does. Resumable: each checkpoint keeps optimizer and RNG state.
With `val_dataset`, the mean loss per reply token on those rows (no gradients) is logged at the end of
training and, when `eval_steps` is set, every `eval_steps` steps, as `eval_loss` in logging.jsonl;
`report_to: tensorboard` also writes the losses and learning rate to TensorBoard event files under
`<output_dir>/runs`.
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from pathlib import Path
from typing import Any

from lorarag.rag.generators.hf import shared_len
from lorarag.train.config import DEFAULTS
from lorarag.train.sft import read_sft
from lorarag.train.trainer_state import last_saved, load_trainer_state, save_checkpoint

log = logging.getLogger(__name__)

_ALL_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def tokenize_rows(tok, rows: list[dict], max_length: int, truncation: str = "delete") -> list[tuple[list[int], list[int]]]:
    """(input ids, labels) per messages row: labels only on the last assistant reply + <|im_end|>.

    Rows longer than `max_length` tokens are dropped (`delete`, ms-swift's default) or cut from
    the end (`right`; a row whose whole reply is cut is dropped: it has nothing to learn and would
    make the loss of an all-empty batch NaN). Raises ValueError when no row is left.
    """
    if truncation not in ("delete", "right"):
        raise ValueError(f"truncation_strategy {truncation!r}: the peft kind supports delete and right")
    out, dropped = [], 0
    for r in rows:
        msgs = r["messages"]
        prompt = tok.apply_chat_template(msgs[:-1], tokenize=False, add_generation_prompt=True)
        full = tok.apply_chat_template(msgs, tokenize=False)
        if not full.startswith(prompt):
            raise ValueError("chat template does not render the prompt as a prefix of the full chat")
        reply = full[len(prompt) :].rstrip("\n")  # "<content><|im_end|>"
        p_ids = tok(prompt, add_special_tokens=False).input_ids
        r_ids = tok(reply, add_special_tokens=False).input_ids
        if len(p_ids) + len(r_ids) > max_length and (truncation == "delete" or len(p_ids) >= max_length):
            dropped += 1
            continue
        out.append(((p_ids + r_ids)[:max_length], ([-100] * len(p_ids) + r_ids)[:max_length]))
    if dropped:
        log.warning(
            "%d of %d rows are longer than max_length=%d tokens: %s",
            dropped,
            len(rows),
            max_length,
            "dropped (truncation_strategy delete)" if truncation == "delete" else "reply cut away, dropped",
        )
    if not out:
        raise ValueError(f"no training row fits max_length={max_length} tokens; raise swift.max_length")
    return out


def length_batches(lengths: list[int], batch_size: int, rng: random.Random) -> list[list[int]]:
    """Batches of similar length (sorted within shuffled pools of 8 batches), in random order."""
    idx = list(range(len(lengths)))
    rng.shuffle(idx)
    pool = batch_size * 8
    batches = []
    for s in range(0, len(idx), pool):
        part = sorted(idx[s : s + pool], key=lambda i: lengths[i])
        batches += [part[j : j + batch_size] for j in range(0, len(part), batch_size)]
    rng.shuffle(batches)
    return batches


def lora_targets(a: dict[str, Any]) -> list[str] | str:
    """peft `target_modules`: `target_regex` (full match on module names) or the module list."""
    if a["target_regex"]:
        return str(a["target_regex"])
    return _ALL_LINEAR if a["target_modules"] in ("all-linear", ["all-linear"]) else a["target_modules"]


def load_base(model_dir: str, a: dict[str, Any]):
    """The frozen base model in `torch_dtype` (fp32 when unset) with the `attn_impl` kernel."""
    import torch
    from transformers import AutoModelForCausalLM

    dtype = getattr(torch, a["torch_dtype"]) if a["torch_dtype"] else torch.float32
    kw = {"attn_implementation": a["attn_impl"]} if a["attn_impl"] else {}
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, **kw)


def lora_model(model_dir: str, a: dict[str, Any]):
    """The base (`load_base`) with fresh LoRA weights on `lora_targets(a)`."""
    from peft import LoraConfig, get_peft_model

    lcfg = LoraConfig(
        r=int(a["lora_rank"]),
        lora_alpha=int(a["lora_alpha"]),
        lora_dropout=float(a["lora_dropout"]),
        target_modules=lora_targets(a),
        task_type="CAUSAL_LM",
    )
    return get_peft_model(load_base(model_dir, a), lcfg)


def tensorboard_writer(report_to: Any, out: Path):
    """A TensorBoard SummaryWriter under `out/runs` when `report_to` asks for one, else None;
    ValueError for an integration this loop does not write (train/config.py refuses those earlier)."""
    names = [n for n in ([report_to] if isinstance(report_to, str) else list(report_to or [])) if n != "none"]
    if not names:
        return None
    if set(names) - {"tensorboard", "all"}:
        raise ValueError(f"report_to {report_to!r}: the peft kind writes tensorboard only (or none)")
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise ValueError("report_to: tensorboard needs the tensorboard package (pip install tensorboard)") from None
    return SummaryWriter(str(out / "runs"))


def train_peft(
    model_dir: str,
    dataset: str,
    output_dir: str,
    args: dict[str, Any],
    seed: int,
    resume: bool = True,
    share_prefix: bool = False,
    val_dataset: str | None = None,
) -> Path:
    """Train a LoRA on messages JSONL (`share_prefix`: see `loss_backward`; `val_dataset`: see the module
    docstring); returns the final checkpoint folder."""
    import torch
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file
    from tqdm import tqdm
    from transformers import AutoTokenizer

    a = {**DEFAULTS, **args}
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    tok = AutoTokenizer.from_pretrained(model_dir)
    rows = read_sft(dataset)
    if a["system"]:
        rows = [
            {
                "messages": ([{"role": "system", "content": a["system"]}] if r["messages"][0]["role"] != "system" else [])
                + r["messages"]
            }
            for r in rows
        ]
    data = tokenize_rows(tok, rows, int(a["max_length"]), a["truncation_strategy"])
    val = tokenize_rows(tok, read_sft(val_dataset), int(a["max_length"]), a["truncation_strategy"]) if val_dataset else []
    eval_every = int(a["eval_steps"] or 0)  # 0: at the end only (each pass costs forward time on a CPU)
    # Like ms-swift, the GPU when one is visible (CUDA_VISIBLE_DEVICES= keeps it on the CPU).
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = lora_model(model_dir, a).to(device)
    log.info("training on %s", device)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=float(a["learning_rate"]), weight_decay=float(a["weight_decay"]))
    bs = int(a["per_device_train_batch_size"])
    epochs = int(math.ceil(float(a["num_train_epochs"])))
    rng = random.Random(seed)
    plan = [b for _ in range(epochs) for b in length_batches([len(d[0]) for d in data], bs, rng)]
    if int(a["max_steps"]) > 0:
        plan = plan[: int(a["max_steps"])]
    total = len(plan)
    warm = max(1, int(total * float(a["warmup_ratio"])))

    def lr_at(step: int) -> float:  # linear warmup, then cosine (or linear) decay to 0
        if step < warm:
            return (step + 1) / warm
        frac = (step - warm) / max(1, total - warm)
        return 0.5 * (1 + math.cos(math.pi * frac)) if a["lr_scheduler_type"] == "cosine" else 1 - frac

    start = 0
    ck = last_saved(out) if resume else None
    if ck is not None:
        set_peft_model_state_dict(model, load_file(str(ck / "adapter_model.safetensors")))
        state = load_trainer_state(ck, device)
        opt.load_state_dict(state["optimizer"])
        start = state["step"]
        log.info("resuming from %s (step %d of %d)", ck, start, total)
    if a.get("bf16") == "auto":  # resolved when a config is read; here for a direct call
        from lorarag.core.precision import native_bf16

        a["bf16"] = native_bf16() is not None
    use_bf16 = a["torch_dtype"] == "bfloat16" or a.get("bf16") is True
    lm_head = model.get_output_embeddings()
    body = model.get_base_model().model
    model.train()
    t0 = time.time()
    logf = (out / "logging.jsonl").open("a", encoding="utf-8")
    board = tensorboard_writer(a["report_to"], out)
    bar = tqdm(range(start, total), initial=start, total=total, desc="peft LoRA", unit="step")
    for step in bar:
        for g in opt.param_groups:
            g["lr"] = float(a["learning_rate"]) * lr_at(step)
        loss = loss_backward(body, lm_head, [data[i] for i in plan[step]], tok.pad_token_id, use_bf16, device, share_prefix)
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        bar.set_postfix(loss=f"{loss.item():.3f}")
        logf.write(
            json.dumps(
                {
                    "step": step + 1,
                    "loss": round(loss.item(), 4),
                    "lr": opt.param_groups[0]["lr"],
                    "elapsed_s": round(time.time() - t0, 1),
                }
            )
            + "\n"
        )
        done = step + 1
        if board is not None:
            board.add_scalar("train/loss", loss.item(), done)
            board.add_scalar("train/learning_rate", opt.param_groups[0]["lr"], done)
        if val and ((eval_every and done % eval_every == 0) or done == total):
            model.eval()
            vl = val_loss(body, lm_head, val, tok.pad_token_id, use_bf16, device, bs)
            model.train()
            log.info("step %d: eval_loss %.4f on %d validation rows", done, vl, len(val))
            logf.write(json.dumps({"step": done, "eval_loss": round(vl, 4), "eval_rows": len(val)}) + "\n")
            if board is not None:
                board.add_scalar("eval/loss", vl, done)
        logf.flush()
        if done % int(a["save_steps"]) == 0 or done == total:
            save_checkpoint(model, opt, out / f"checkpoint-{done}", done)
    logf.close()
    if board is not None:
        board.close()
    final = out / f"checkpoint-{total}"
    if not (final / "adapter_model.safetensors").is_file():
        save_checkpoint(model, opt, final, total)
    return final


def shared_prefix(batch: list[tuple[list[int], list[int]]], min_tokens: int = 8) -> int:
    """Leading tokens every row of `batch` has in common, stopping before the position that
    predicts any row's first label (so no label falls in it); 0 when under `min_tokens` or one row."""

    return shared_len([ids[: next(i for i, y in enumerate(lab) if y != -100)] for ids, lab in batch], min_tokens)


def loss_backward(
    body,
    lm_head,
    batch: list[tuple[list[int], list[int]]],
    pad: int,
    bf16: bool,
    device: str = "cpu",
    share_prefix: bool = False,
):
    """Forward + backward of one right-padded batch of (ids, labels); returns the mean loss
    (`forward_loss` with `share_prefix` as it says)."""
    loss = forward_loss(body, lm_head, batch, pad, bf16, device, share_prefix)
    loss.backward()
    return loss


def val_loss(
    body, lm_head, rows: list[tuple[list[int], list[int]]], pad: int, bf16: bool, device: str, batch_size: int
) -> float:
    """Mean cross-entropy per label token over `rows` (batches in length order, no gradients)."""
    import torch

    order = sorted(rows, key=lambda r: len(r[0]))
    total, count = 0.0, 0
    with torch.no_grad():
        for s in range(0, len(order), batch_size):
            batch = order[s : s + batch_size]
            total += forward_loss(body, lm_head, batch, pad, bf16, device, reduction="sum").item()
            count += sum(sum(1 for y in lab[1:] if y != -100) for _, lab in batch)
    return total / count


def forward_loss(
    body,
    lm_head,
    batch: list[tuple[list[int], list[int]]],
    pad: int,
    bf16: bool,
    device: str = "cpu",
    share_prefix: bool = False,
    reduction: str = "mean",
):
    """The loss of one right-padded batch of (ids, labels) over its label tokens (`reduction` as in
    torch's cross_entropy).

    `share_prefix`: the rows' common leading tokens (the system prompt and chat header) go through the model
    once, as one row, and their keys/values are repeated for every row; gradients from all rows flow back
    into that one pass. Same loss and gradients as the padded batch up to rounding (tested), fewer tokens of
    compute."""
    import torch

    n = shared_prefix(batch) if share_prefix else 0
    rows = [(x[n:], y[n:]) for x, y in batch]
    width = max(len(ids) for ids, _ in rows)
    ids = torch.tensor([x + [pad] * (width - len(x)) for x, _ in rows], device=device)
    att = torch.tensor([[1] * (n + len(x)) + [0] * (width - len(x)) for x, _ in rows], device=device)
    lab = torch.tensor([y + [-100] * (width - len(y)) for _, y in rows], device=device)
    with torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=bf16):
        kw = {}
        if n:  # one pass over the prefix, its cache repeated to the batch: [1, heads, n, d] -> [B, ...]
            cache = body(input_ids=torch.tensor([batch[0][0][:n]], device=device), use_cache=True).past_key_values
            cache.batch_repeat_interleave(len(rows))
            kw = {
                "past_key_values": cache,
                "use_cache": True,
                "position_ids": torch.arange(n, n + width, device=device).expand(len(rows), -1),
            }
        hidden = body(input_ids=ids, attention_mask=att, **kw).last_hidden_state  # [B, T - n, H]
        tgt = lab[:, 1:]
        keep = tgt != -100  # logits only where a label is: [N, V] instead of [B, T, V]
        logits = lm_head(hidden[:, :-1][keep])
    return torch.nn.functional.cross_entropy(logits.float(), tgt[keep], reduction=reduction)


def main(argv: list[str] | None = None) -> None:
    """`python -m lorarag.train.peft_trainer --model M --dataset D --output_dir O --seed S --args JSON`."""
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--output_dir", required=True)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--args", default="{}", help="ms-swift argument names -> values, as JSON")
    ap.add_argument("--share_prefix", action="store_true", help="run each batch's common prefix once")
    ap.add_argument("--val_dataset", default=None, help="validation rows: eval_loss every eval_steps")
    ns = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        final = train_peft(
            ns.model,
            ns.dataset,
            ns.output_dir,
            json.loads(ns.args),
            ns.seed,
            share_prefix=ns.share_prefix,
            val_dataset=ns.val_dataset,
        )
    except ValueError as exc:  # bad rows or arguments: one line, the caller names the run
        raise SystemExit(f"error: {exc}") from None
    print(f"final adapter: {final}")


if __name__ == "__main__":
    main()
