"""The fast transformers engine (`prompt_lookup`: drafts from the request's own prompt, verified by
the model) reads what the plain transformers path reads, on the tiny Qwen3 + LoRA:

- greedy answers: the same text, tokens and finish reason;
- the closed-book NLL (fallback.gate.answer_nll over the chosen tokens' logprobs): within 1e-4 nats;
- the top-k logprobs at every position, from which the verdict probabilities are read
  (fallback/verdict.py): the same tokens, probabilities within 1e-4.

A multi-token verify step computes its logits in one matmul over several positions, so the last
bits may differ from one-token steps (fp32: ~1e-6); 1e-4 is the stated tolerance. And the point
of the engine: on a reply that repeats its prompt it runs fewer forward passes than new tokens.
"""

from __future__ import annotations

import pytest

from lorarag.rag.config import GeneratorConfig
from lorarag.rag.generators.registry import build_generator
from tests.engine_agreement import CONVS, K, assert_read_alike


def _cfg(lm, lora, **kw) -> GeneratorConfig:
    return GeneratorConfig(kind="transformers", model=str(lm), adapters={"sft": str(lora)}, max_model_len=512, **kw)


def _answers(gen, adapter):
    # one request per call: the engine drafts for a request decoded alone (one serve client)
    return [
        gen.generate([c], adapter=adapter, max_new_tokens=24, top_logprobs=K, prefixes=["memory:" if i % 2 else ""])[0]
        for i, c in enumerate(CONVS)
    ]


@pytest.fixture(scope="module")
def pair(tiny_models, lora):
    import torch

    torch.set_num_threads(1)
    plain = build_generator(_cfg(tiny_models["lm"], lora))
    fast = build_generator(_cfg(tiny_models["lm"], lora, prompt_lookup=8))
    try:
        yield plain, fast
    finally:
        plain.close()
        fast.close()


@pytest.mark.parametrize("adapter", [None, "sft"])
def test_prompt_lookup_reads_the_same_answers_nll_and_probabilities(pair, adapter):
    plain, fast = pair
    assert_read_alike(_answers(plain, adapter), _answers(fast, adapter))


def test_prompt_lookup_verifies_several_tokens_per_forward_pass(pair):
    plain, fast = pair
    calls = {"plain": 0, "fast": 0}
    hooks = [
        g.model.get_base_model().register_forward_hook(lambda *_a, n=name: calls.__setitem__(n, calls[n] + 1))
        for name, g in (("plain", plain.inner), ("fast", fast.inner))
    ]
    try:
        new = sum(len(g.tokens) for g in (plain.generate([c], max_new_tokens=24)[0] for c in CONVS))
        fast_new = sum(len(g.tokens) for g in (fast.generate([c], max_new_tokens=24)[0] for c in CONVS))
    finally:
        for h in hooks:
            h.remove()
    assert fast_new == new
    assert calls["plain"] == new  # one forward per new token (the prefill gives the first; all run to length)
    assert calls["fast"] < calls["plain"], calls


def test_prompt_lookup_is_refused_where_it_cannot_apply():
    with pytest.raises(ValueError, match="prompt_lookup"):
        GeneratorConfig(kind="vllm", model="m", prompt_lookup=4)
    with pytest.raises(ValueError, match="prompt_lookup"):
        GeneratorConfig(kind="transformers", model="m", prompt_lookup=4, temperature=0.7)


def test_a_gate_read_with_prompt_lookup_is_not_reused_without_it():
    from lorarag.fallback.gate import generator_id

    plain = GeneratorConfig(kind="transformers", model="m")
    assert generator_id(plain) == "transformers m float32"  # unset: the id of gates saved before it
    assert generator_id(plain.model_copy(update={"prompt_lookup": 10})) == "transformers m float32 lookup-10"


def test_the_fp32_demo_config_decodes_single_questions_with_prompt_lookup():
    from lorarag.core.config import load_config
    from lorarag.trained.config import RunConfig
    from tests.conftest import REPO

    fp32 = load_config(REPO / "configs/run/cpu-demo-fp32.yaml", RunConfig).rag.generator
    auto = load_config(REPO / "configs/run/cpu-demo.yaml", RunConfig).rag.generator
    assert (fp32.dtype, fp32.prompt_lookup) == ("float32", 10)
    assert auto.prompt_lookup is None  # its dtype follows the CPU, and no agreement is shown in bf16
