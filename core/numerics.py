"""CPU numerics: which kernels a run's arithmetic goes through, and pinning them across machines.

The same seed on two CPUs can give two adapters because PyTorch and the libraries under it pick
their kernels from the CPU they find: ATen's vectorised kernels (softmax, norms, reductions) by
`ATEN_CPU_CAPABILITY` (AVX2, AVX-512, ...), MKL's GEMM by its code path (AVX2, AVX-512), oneDNN's
bf16 matmuls by the widest ISA (AMX-BF16, AVX512-BF16, or AVX2 emulation). Each path sums in
another order, so the bits differ, the rounding compounds over hundreds of steps, and a gate
threshold or a borderline item moves (docs/research-log.md: on one machine, ATen's default kernels
and MKL's compatible path each change the product of the same matrices).

`numerics: {cpu_isa: avx2, threads: N}` pins all three to their AVX2 paths and the thread count,
which every x86-64 CPU of the last decade runs (AVX-512 and AMX machines included), so a pinned
run takes the same code path everywhere. It costs speed on wider CPUs; above all bf16 autocast,
emulated on AVX2, is far slower than native, so pinning suits the fp32 recipes
(configs/run/cpu-demo-fp32.yaml, cpu-demo-pinned.yaml). The variables must be set before torch loads: `lorarag` sets
them at the start of a command, and the training child inherits them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Literal

from pydantic import Field

from lorarag.core.config import Strict
from lorarag.core.errors import ConfigError
from lorarag.core.precision import REPORTED_FLAGS, cpu_flags  # noqa: F401 - this module's public names too

PINS: dict[str, dict[str, str]] = {
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2,STRICT", "ONEDNN_MAX_CPU_ISA": "AVX2"}
}
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


class NumericsConfig(Strict):
    """`numerics:` of a run config (see the module docstring); the defaults leave the machine's choice."""

    cpu_isa: Literal["avx2"] | None = Field(
        None,
        description=(
            "`avx2`: pin ATen, MKL and oneDNN to their AVX2 code paths, the same on every x86-64 CPU (slower on wider "
            "CPUs); null: the machine's choice"
        ),
    )
    threads: int | None = Field(
        default=None, ge=1, description=("pin the thread count of torch and the math libraries; null: the machine's choice")
    )


def pinned_env(cfg: NumericsConfig) -> dict[str, str]:
    """The environment variables `cfg` pins (empty when it pins nothing)."""
    env = dict(PINS[cfg.cpu_isa]) if cfg.cpu_isa else {}
    if cfg.threads:
        env.update({k: str(cfg.threads) for k in THREAD_VARS})
    return env


def apply(cfg: NumericsConfig, environ: dict[str, str] | None = None) -> dict[str, str]:
    """Set `pinned_env(cfg)` in `environ` (os.environ) before torch loads; returns what was set.

    Raises ConfigError when torch is already loaded with other settings: its kernels are chosen,
    and a run that claims pinned numerics would not have them."""
    env = os.environ if environ is None else environ
    want = pinned_env(cfg)
    differ = {k: v for k, v in want.items() if env.get(k) != v}
    if differ and "torch" in sys.modules and environ is None:
        names = " ".join(f"{k}={v}" for k, v in differ.items())
        raise ConfigError(
            f"numerics: torch is already loaded, so its kernels are chosen; set {names} "
            "before it loads (the lorarag command does) or remove numerics: from the config"
        )
    env.update(want)
    return want


def describe(environ: Mapping[str, str] | None = None) -> dict[str, object]:
    """What run.json records: the CPU's features, the kernel variables in effect, ATen's choice."""
    env = os.environ if environ is None else environ
    keys = sorted({k for pin in PINS.values() for k in pin} | set(THREAD_VARS))
    out: dict[str, object] = {
        "cpu_flags": cpu_flags(),
        "cpu_count": os.cpu_count(),
        "env": {k: env[k] for k in keys if k in env},
    }
    torch = sys.modules.get("torch")
    if torch is not None:  # never imported for this: run.json must not load torch
        out["aten_capability"] = torch.backends.cpu.get_cpu_capability()
        out["torch_threads"] = torch.get_num_threads()
    return out
