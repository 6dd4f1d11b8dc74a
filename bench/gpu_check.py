"""The GPU config's pipeline at its real model shapes, where no weights can be downloaded.

`configs/run/qwen3-4b.yaml` names hub models (Qwen3-4B, Qwen3-Embedding-0.6B, Qwen3-Reranker-0.6B)
that machines without a hub cannot fetch. This check builds checkpoints of exactly those
architectures with RANDOM weights (and a small locally trained tokenizer), rewrites the config to
point at them and runs `lorarag run` end to end: ms-swift LoRA training, dense + BM25 hybrid
retrieval with the reranker, the gate calibration and every system of the config. It measures
what the shapes decide -- time per stage and peak GPU memory -- and shows that every stage runs
on the device. It says nothing about accuracy: random weights cannot read or remember.

    lorarag bench gpu --shape qwen3-4b --device cuda             # on a GPU machine (= python -m lorarag.bench.gpu_check)
    python -m lorarag.bench.gpu_check --shape tiny --device cpu --steps 3  # the same path, small, here

The generator kind is `transformers` unless `--generator vllm` (vLLM is not installed everywhere).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import threading
import time
from pathlib import Path

import yaml

from lorarag.study.pipeline import run
from lorarag.testing.tiny import build_tokenizer
from lorarag.train.config import unsupported_args
from lorarag.trained.config import RunConfig

# Architectures of the hub checkpoints the GPU config names (their config.json values), except the
# vocabulary: the local tokenizer has ~1k entries (vocab_size None = its size), so embedding and LM
# head have ~1k rows instead of 151,936 -- 3.6B parameters instead of 4.0B for the "4B" model, and
# no token id the tokenizer cannot decode.
SHAPES = {
    "qwen3-4b": {
        "lm": dict(
            hidden_size=2560,
            intermediate_size=9728,
            num_hidden_layers=36,
            num_attention_heads=32,
            num_key_value_heads=8,
            head_dim=128,
            vocab_size=None,
            max_position_embeddings=40960,
        ),
        # Qwen3-Embedding-0.6B and Qwen3-Reranker-0.6B are both Qwen3-0.6B bodies.
        "small": dict(
            hidden_size=1024,
            intermediate_size=3072,
            num_hidden_layers=28,
            num_attention_heads=16,
            num_key_value_heads=8,
            head_dim=128,
            vocab_size=None,
            max_position_embeddings=40960,
        ),
    },
    "tiny": {
        "lm": dict(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=32,
            vocab_size=None,
            max_position_embeddings=4096,
        ),
        "small": dict(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=32,
            vocab_size=None,
            max_position_embeddings=4096,
        ),
    },
}


def build_random(out: Path, shape: dict, device: str, dtype: str, seed: int) -> Path:
    """A Qwen3ForCausalLM of `shape` with random weights + the tiny tokenizer, saved as safetensors."""
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    if (out / "model.safetensors.index.json").is_file() or (out / "model.safetensors").is_file():
        return out
    tok = build_tokenizer(out)
    kw = {**shape, "vocab_size": shape["vocab_size"] or len(tok)}
    config = Qwen3Config(
        **kw,
        tie_word_embeddings=True,
        rope_theta=1_000_000.0,
        rms_norm_eps=1e-6,
        bos_token_id=None,
        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tok.pad_token_id,
        torch_dtype=dtype,
    )
    torch.manual_seed(seed)
    with torch.device(device):  # a 4B model is built in seconds on the GPU, minutes on the CPU
        model = Qwen3ForCausalLM(config).to(getattr(torch, dtype))
    model.generation_config = GenerationConfig(
        eos_token_id=[config.eos_token_id, tok.pad_token_id], pad_token_id=config.pad_token_id, do_sample=False
    )
    model.save_pretrained(out, safe_serialization=True)
    del model
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return out


def derive_config(base: dict, name: str, models: dict[str, Path], args) -> dict:
    """`base` (the GPU run config) pointed at the local random checkpoints, sized for a check."""
    cfg = json.loads(json.dumps(base))
    dtype = "bfloat16" if args.device.startswith("cuda") else "float32"
    root = f"{cfg.get('runs_dir', 'runs')}/{name}"
    cfg["name"] = name
    t = cfg["train"]
    t.update(
        model=str(models["lm"]),
        run_name=f"{name}-lora",
        dataset=f"{root}/sft/train.jsonl",
        val_dataset=f"{root}/sft/val.jsonl",
    )
    data = cfg.setdefault("data", {})
    if data.get("world") is not None:  # the demo world, resized; a user's knowledge base stays as it is
        data["world"] = {**data["world"], "n_orgs": args.n_orgs}
    if args.train_kind:
        t["kind"] = args.train_kind
    t["swift"].update(max_steps=args.steps, save_steps=args.steps, torch_dtype=dtype)
    if t.get("kind", "swift") == "peft":  # the loop refuses what it would not honour: say what is dropped
        dropped = unsupported_args(t["swift"])
        print(f"peft kind: dropping ms-swift-only arguments {dropped}", flush=True)
        for k in dropped:
            t["swift"].pop(k)
    r = cfg["rag"]
    r["index"]["dir"] = f"{root}/index"
    r["embedder"].update(model=str(models["embedder"]), device=args.device, dtype=dtype)
    r["reranker"].update(model=str(models["reranker"]), device=args.device, dtype=dtype, backend="transformers")
    g = r["generator"]
    g.update(kind=args.generator, model=str(models["lm"]), device=args.device, dtype=dtype)
    if args.generator == "transformers":
        g.pop("gpu_memory_utilization", None)
        # vLLM pages its KV cache; HF generate holds rows x padded length of it at once.
        g["max_batch_tokens"] = args.max_batch_tokens
    cfg["calibration"] = {"max_items": args.cal_items}
    cfg["eval"] = {**cfg.get("eval", {}), "max_per_cell": args.per_cell, "bootstrap": 1000}
    cfg["extra_sets"] = [{"kind": "conflictnq", "path": args.conflictnq}] if args.conflictnq else []
    return cfg


class GpuMemory:
    """Polls nvidia-smi every 0.5 s for the memory used on the GPU (MiB, all processes; the
    caching allocators' reserve included): the peak, and the samples for per-stage peaks."""

    def __init__(self, t0: float) -> None:
        self.t0 = t0
        self.samples: list[tuple[float, int]] = []  # (seconds since t0, MiB)
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._poll, daemon=True)

    @property
    def peak(self) -> int:
        """Most MiB seen in use."""
        return max((m for _, m in self.samples), default=0)

    def peak_between(self, start: float, end: float) -> int:
        """Most MiB seen in use between two times (seconds since t0)."""
        return max((m for t, m in self.samples if start <= t < end), default=0)

    def _poll(self) -> None:
        while not self._stop.is_set():
            try:
                out = subprocess.run(
                    ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                    capture_output=True,
                    text=True,
                    timeout=5,
                ).stdout
                used = [int(x) for x in out.split() if x.isdigit()]
                if used:
                    self.samples.append((time.time() - self.t0, max(used)))
            except (OSError, subprocess.TimeoutExpired):
                return  # no nvidia-smi (CPU run): nothing to poll
            self._stop.wait(0.5)

    def __enter__(self) -> GpuMemory:
        self._t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._t.join(timeout=5)


def _torch_memory() -> dict[str, int]:
    """This process's CUDA allocator (MiB): max allocated since the last call, reserved now; {} off the GPU."""
    import torch

    if not torch.cuda.is_initialized():
        return {}
    out = {
        "torch_max_allocated_mib": torch.cuda.max_memory_allocated() >> 20,
        "torch_reserved_mib": torch.cuda.memory_reserved() >> 20,
    }
    torch.cuda.reset_peak_memory_stats()
    return out


def main(argv: list[str] | None = None) -> None:
    """Build the random checkpoints, run the derived config, print stage times and peak memory."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="qwen3-4b")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--generator", choices=["transformers", "vllm"], default="transformers")
    ap.add_argument("--config", default="configs/run/qwen3-4b.yaml")
    ap.add_argument("--models", default="checkpoints/gpu-check", help="where the random checkpoints go")
    ap.add_argument("--steps", type=int, default=40, help="LoRA steps (max_steps)")
    ap.add_argument("--train-kind", choices=["swift", "peft"], default=None, help="default: the config's")
    ap.add_argument("--n-orgs", type=int, default=30, help="organisations of the config's demo world (data.world)")
    ap.add_argument("--per-cell", type=int, default=25)
    ap.add_argument("--cal-items", type=int, default=40)
    ap.add_argument(
        "--max-batch-tokens",
        type=int,
        default=65536,
        help="transformers generator: padded tokens per batch (KV-cache bound)",
    )
    ap.add_argument("--conflictnq", default=None, help="a ConflictNQ folder to evaluate beside the world")
    ap.add_argument("--out", default=None, help="write the summary JSON here too")
    args = ap.parse_args(argv)

    t0 = time.time()
    stamps: list[tuple[float, str]] = []
    torch_mem: list[dict[str, int]] = []  # this process's allocator at each stage line (MiB)

    def echo(msg: str) -> None:
        stamps.append((time.time() - t0, msg))
        torch_mem.append(_torch_memory())
        print(f"[{time.time() - t0:7.1f}s] {msg}", flush=True)

    shape = SHAPES[args.shape]
    dtype = "bfloat16" if args.device.startswith("cuda") else "float32"
    root = Path(args.models) / args.shape
    with GpuMemory(t0) as mem:
        echo(f"building random checkpoints ({args.shape}) on {args.device}")
        models = {
            "lm": build_random(root / "lm", shape["lm"], args.device, dtype, 0),
            "embedder": build_random(root / "embedder", shape["small"], args.device, dtype, 1),
            "reranker": build_random(root / "reranker", shape["small"], args.device, dtype, 2),
        }
        echo(f"random checkpoints ({args.shape}) ready under {root}")
        base = yaml.safe_load(Path(args.config).read_text(encoding="utf-8"))
        cfg = RunConfig.model_validate(derive_config(base, f"gpu-check-{args.shape}", models, args))
        run_dir = Path(cfg.runs_dir) / cfg.name
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "derived-config.yaml").write_text(yaml.safe_dump(cfg.model_dump(), sort_keys=False), encoding="utf-8")
        run(cfg, fresh=True, echo=echo)
    summary = {
        "shape": args.shape,
        "device": args.device,
        "generator": args.generator,
        "train": cfg.train.kind,
        "steps": args.steps,
        "wall_s": round(time.time() - t0, 1),
        "peak_gpu_mib": mem.peak,
        # peak from each stage line to the next (MiB): which stage holds the memory
        # and torch's own view in this process when the NEXT line came (the swift trainer is
        # a subprocess: its memory shows in nvidia-smi's peak only)
        "stages": [
            {"t_s": round(t, 1), "peak_gpu_mib": mem.peak_between(t, nxt), **tm_next, "msg": m}
            for (t, m), nxt, tm_next in zip(
                stamps, [s for s, _ in stamps[1:]] + [float("inf")], [*torch_mem[1:], _torch_memory()]
            )
        ],
    }
    print(json.dumps({k: v for k, v in summary.items() if k != "stages"}))
    for st in summary["stages"]:
        if st["peak_gpu_mib"]:
            print(
                f"{st['t_s']:8.1f}s {st['peak_gpu_mib']:7d} MiB (torch: max allocated "
                f"{st.get('torch_max_allocated_mib', 0)}, reserved {st.get('torch_reserved_mib', 0)})  "
                f"{st['msg'].splitlines()[0][:80]}"
            )
    for path in (run_dir / "gpu-check.json", *([Path(args.out)] if args.out else [])):
        path.write_text(json.dumps(summary, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
