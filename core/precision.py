"""Precision that follows the CPU: `bf16: auto` and `dtype: auto` in a config.

bf16 arithmetic is fast only where the CPU computes it natively (AVX512-BF16 or AMX); elsewhere
(AVX2-only CPUs, most laptops) PyTorch emulates it and a training step is many times slower than in
fp32. So a config may say `auto` and leave the choice to the machine: `resolve` replaces it, once,
when the config is read (core/config.load_config), before validation:

- `swift: {bf16: auto}` (bf16 autocast of a training run): true where the CPU has native bf16, or
  for the GPU trainer (`kind: swift`); false elsewhere.
- `dtype: auto` (a generator's, embedder's or reranker's weights): `bfloat16` on a GPU device or
  where the CPU has native bf16, `float32` elsewhere.

The resolved config (config.yaml of a run) holds the values chosen, run.json's `precision` says
which and why (`describe`), and an explicit bf16 on a CPU without it still runs, with a warning.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

AUTO = "auto"
# The CPU features that decide the kernels (core/numerics.py reports them in run.json).
REPORTED_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
# CPU flags that mean native bf16 arithmetic, the widest first, and how a reader names them.
NATIVE = (("amx_bf16", "AMX"), ("avx512_bf16", "AVX512-BF16"))


def cpu_flags(cpuinfo: str | Path = "/proc/cpuinfo") -> list[str]:
    """The CPU features that decide the kernels (REPORTED_FLAGS present on this machine)."""
    try:
        text = Path(cpuinfo).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    line = next((x for x in text.splitlines() if x.startswith(("flags", "Features"))), "")
    have = set(line.partition(":")[2].split())
    return [f for f in REPORTED_FLAGS if f in have]


def native_bf16(flags: list[str] | None = None) -> str | None:
    """The name of this CPU's native bf16 feature ("AMX", "AVX512-BF16"), or None."""
    have = set(cpu_flags() if flags is None else flags)
    return next((name for flag, name in NATIVE if flag in have), None)


def cpu_bf16_why(flags: list[str] | None = None) -> str:
    """Why `auto` picks what it picks here: "native bf16 (AMX)", "no native bf16 (AVX2 only)"."""
    flags = cpu_flags() if flags is None else flags
    native = native_bf16(flags)
    if native:
        return f"native bf16 ({native})"
    if "avx512f" in flags:
        return "no native bf16 (AVX-512 without BF16)"
    return "no native bf16 (AVX2 only)" if "avx2" in flags else "no native bf16 (CPU features unknown)"


def _on_gpu(section: dict[str, Any]) -> bool:
    return str(section.get("device") or "").startswith("cuda") or section.get("kind") == "swift"


def resolve(data: Any, flags: list[str] | None = None) -> Any:
    """`data` (a parsed config mapping) with every `bf16: auto` under a `swift:` section and every
    `dtype: auto` replaced by this machine's choice (module docstring); warns where a CPU section
    asks for bf16 the CPU does not have natively. Other values are left as they are."""
    flags = cpu_flags() if flags is None else flags
    return _walk(data, flags, native_bf16(flags) is not None, "")


def _walk(data: Any, flags: list[str], native: bool, where: str) -> Any:
    if isinstance(data, list):
        return [_walk(v, flags, native, f"{where}[{i}]") for i, v in enumerate(data)]
    if not isinstance(data, dict):
        return data
    out = {k: _walk(v, flags, native, f"{where}.{k}" if where else str(k)) for k, v in data.items()}
    at = f"{where}." if where else ""
    if out.get("dtype") == AUTO:
        out["dtype"] = "bfloat16" if native or _on_gpu(out) else "float32"
    elif out.get("dtype") == "bfloat16" and not native and "kind" in out and not _on_gpu(out):
        _warn(f"{at}dtype", flags)
    swift = out.get("swift")
    if isinstance(swift, dict):
        if swift.get("bf16") == AUTO:
            out["swift"] = {**swift, "bf16": native or out.get("kind") == "swift"}
        elif swift.get("bf16") is True and not native and out.get("kind") == "peft":
            _warn(f"{at}swift.bf16", flags)
    return out


def _warn(key: str, flags: list[str]) -> None:
    log.warning(
        "%s: bf16 on a CPU with %s is emulated and many times slower than fp32; `auto` picks fp32 here",
        key,
        cpu_bf16_why(flags),
    )


def describe(config: dict[str, Any], flags: list[str] | None = None) -> dict[str, str]:
    """run.json's `precision`: the CPU trainer's and the generator's precision in a resolved run
    (or train) config dump, as one `dtype` when they agree, and why."""
    train = config.get("train", config)
    gen = (config.get("rag") or {}).get("generator") or {}
    parts = {}
    if isinstance(train, dict) and train.get("kind") == "peft":
        swift = train.get("swift") or {}
        parts["train"] = "bfloat16" if swift.get("bf16") is True or swift.get("torch_dtype") == "bfloat16" else "float32"
    if gen.get("dtype") and not _on_gpu(gen):
        parts["generator"] = gen["dtype"]
    values = set(parts.values())
    out = {
        "dtype": values.pop() if len(values) == 1 else ", ".join(f"{k} {v}" for k, v in parts.items()) or "n/a",
        **parts,
        "why": cpu_bf16_why(flags),
    }
    if "bfloat16" in parts.values() and not native_bf16(flags):
        out["why"] += ": bf16 set explicitly, emulated and slow"
    return out


def line(config: dict[str, Any], flags: list[str] | None = None) -> str:
    """The precision as the first lines of `lorarag run` print it."""
    d = describe(config, flags)
    return f"precision {d['dtype']}: {d['why']}"
