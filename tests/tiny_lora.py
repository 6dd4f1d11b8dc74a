"""A tiny peft LoRA adapter for the tiny Qwen3 LM: random NON-zero B weights so it changes outputs."""

from __future__ import annotations

from pathlib import Path


def build_lora(base: Path, out_dir: Path, *, seed: int = 7, rank: int = 8) -> Path:
    """Save a LoRA adapter (safetensors) on all linear layers of `base` under `out_dir`."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    if (out_dir / "adapter_model.safetensors").exists():
        return out_dir
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    cfg = LoraConfig(r=rank, lora_alpha=2 * rank, target_modules="all-linear", lora_dropout=0.0)
    peft_model = get_peft_model(model, cfg)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:  # peft initialises B to zero (a no-op adapter): make it bite
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    peft_model.save_pretrained(out_dir, safe_serialization=True)
    return out_dir
