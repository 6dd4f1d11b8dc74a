"""The `ctranslate2` generator kind reads what the transformers kind reads, on the tiny Qwen3 with and
without its LoRA (merged into a converted copy): the same greedy text, tokens and finish reason, the
closed-book NLL within 1e-4 nats and every position's top-k probabilities within 1e-4 (the tolerance
of tests/test_engine_agree.py; measured here ~1e-6). Prompts of different lengths share a batch, as
in evaluation. The converted copies are named by the weights that made them: a changed adapter is
converted again, an unchanged one is not, and a half-written copy is never read.
"""

from __future__ import annotations

import shutil

import pytest

from lorarag.fallback.gate import generator_id
from lorarag.rag.config import GeneratorConfig
from lorarag.rag.generators.registry import build_generator
from tests.engine_agreement import CONVS, K, assert_read_alike


def _cfg(kind, lm, lora, engines) -> GeneratorConfig:
    extra = {"engine_dir": str(engines)} if kind == "ctranslate2" else {}
    return GeneratorConfig(kind=kind, model=str(lm), adapters={"sft": str(lora)}, max_model_len=512, **extra)


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    return tmp_path_factory.mktemp("engines")


@pytest.fixture(scope="module")
def pair(tiny_models, lora, engines):
    import torch

    torch.set_num_threads(1)
    ref = build_generator(_cfg("transformers", tiny_models["lm"], lora, engines))
    ct2 = build_generator(_cfg("ctranslate2", tiny_models["lm"], lora, engines))
    try:
        yield ref, ct2
    finally:
        ref.close()
        ct2.close()


@pytest.mark.parametrize("adapter", [None, "sft"])
def test_ctranslate2_reads_the_same_answers_nll_and_probabilities(pair, adapter):
    ref, ct2 = pair
    prefixes = ["memory:" if i % 2 else "" for i in range(len(CONVS))]
    want = ref.generate(CONVS, adapter=adapter, max_new_tokens=24, top_logprobs=K, prefixes=prefixes)
    got = ct2.generate(CONVS, adapter=adapter, max_new_tokens=24, top_logprobs=K, prefixes=prefixes)
    assert_read_alike(want, got)


def test_the_adapter_changes_what_ctranslate2_answers(pair):
    _, ct2 = pair
    base = ct2.generate(CONVS, max_new_tokens=12)
    tuned = ct2.generate(CONVS, adapter="sft", max_new_tokens=12)
    assert [g.text for g in base] != [g.text for g in tuned]


def _no_conversion(*_a, **_k):
    raise RuntimeError("converted again")


def test_a_converted_copy_is_named_by_the_weights_that_made_it(tiny_models, lora, tmp_path, monkeypatch):
    from safetensors.torch import load_file, save_file

    from lorarag.rag.generators import ct2 as generate_ct2

    cfg = _cfg("ctranslate2", tiny_models["lm"], lora, tmp_path / "engines")
    base_dir, tuned_dir = generate_ct2.convert(cfg, None), generate_ct2.convert(cfg, str(lora))
    assert base_dir != tuned_dir and (tuned_dir / "model.bin").is_file()
    # an unchanged adapter is not converted again
    monkeypatch.setattr("ctranslate2.converters.TransformersConverter.convert", _no_conversion)
    assert generate_ct2.convert(cfg, str(lora)) == tuned_dir
    # a retrained adapter (other weights, same path) gets its own copy; a half-written one is not read
    other = tmp_path / "other"
    shutil.copytree(lora, other)
    w = load_file(str(other / "adapter_model.safetensors"))
    save_file({k: v * 2 for k, v in w.items()}, str(other / "adapter_model.safetensors"))
    fresh = generate_ct2.engine_folder(cfg, str(other))
    assert fresh != tuned_dir
    fresh.mkdir(parents=True)  # a folder without model.bin: an interrupted conversion
    with pytest.raises(RuntimeError, match="converted again"):
        generate_ct2.convert(cfg, str(other))


def test_a_gate_read_on_ctranslate2_is_not_reused_on_transformers():
    assert generator_id(GeneratorConfig(kind="ctranslate2", model="m")) != generator_id(
        GeneratorConfig(kind="transformers", model="m")
    )


def test_a_missing_model_folder_is_one_line(tmp_path):
    from lorarag.core.errors import ConfigError

    with pytest.raises(ConfigError, match="no such folder"):
        build_generator(GeneratorConfig(kind="ctranslate2", model=str(tmp_path / "nope"), engine_dir=str(tmp_path)))
