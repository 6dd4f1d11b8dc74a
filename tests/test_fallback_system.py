"""AdvancedRAGSystem: scored pass on a real tiny Qwen3 + peft LoRA, the gate's regeneration, routes.

Reference values: label probabilities are recomputed from a plain forward pass of the same peft
model (softmax over the five labels' first-token logits at the verdict position).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from fallback.config import FallbackConfig, GateConfig, PolicyConfig
from fallback.format import VERDICTS
from fallback.system import AdvancedRAGSystem, Detector, conversation
from fallback.verdict import label_first_tokens, label_probs
from rag.config import GeneratorConfig
from rag.records import Chunk, Retrieved

from tests.tiny_lora import build_lora


def _src(text: str, cid: str = "c1") -> Retrieved:
    return Retrieved(Chunk(cid, "doc.md", "doc.md", text, 0, len(text)), 1.0, 1)


@pytest.fixture(scope="module")
def tiny_gen(tiny_models, tmp_path_factory):
    import torch

    torch.set_num_threads(1)
    from rag.generate import build_generator

    lora = build_lora(tiny_models["lm"], tmp_path_factory.mktemp("lora") / "a")
    cfg = GeneratorConfig(kind="transformers", model=str(tiny_models["lm"]), adapters={"lora": str(lora)},
                          max_new_tokens=12, batch_size=4)
    gen = build_generator(cfg)
    yield gen
    gen.close()


def test_label_probs_match_a_plain_forward_pass(tiny_gen):
    """The generator's top logprobs at the verdict position, renormalised, equal a manual softmax."""
    import torch

    tok = tiny_gen.tokenizer
    first = label_first_tokens(tok)
    conv = conversation("What is the net profit?", [_src("Net profit was 12.5 million in 2023.")])
    prefix = "memory: 12 | source: 9 | verdict:"
    g = tiny_gen.generate([conv], adapter="lora", max_new_tokens=1, top_logprobs=len(tok),
                          prefixes=[prefix])[0]
    got = label_probs(list(g.top_logprobs[0]), first)

    msgs = [{"role": m.role, "content": m.content} for m in conv]
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True,
                                   enable_thinking=False) + prefix
    ids = torch.tensor([tok.encode(text, add_special_tokens=False)])
    tiny_gen.model.set_adapter("lora")
    with torch.inference_mode():
        logits = tiny_gen.model(input_ids=ids).logits[0, -1].float()
    label_ids = [tok.encode(" " + v, add_special_tokens=False)[0] for v in VERDICTS]
    ref = torch.softmax(logits[label_ids], -1).tolist()
    for v, p in zip(VERDICTS, ref):
        assert got[v] == pytest.approx(p, rel=1e-4, abs=1e-6)


def test_random_tiny_model_output_is_invalid_and_counted(tiny_gen):
    """A model that does not speak the format: verdict 'invalid', counted, abstain route, no crash."""
    cfg = FallbackConfig(policy=PolicyConfig(on_invalid="abstain"), gate=GateConfig(enabled=False))
    det = Detector(tiny_gen, label_first_tokens(tiny_gen.tokenizer), cfg, None)
    system = AdvancedRAGSystem(rag=None, detector=det, cfg=cfg)
    srcs = (_src("Net profit was 12.5 million in 2023."),)
    answers = system.answer_with_context(["What is the net profit?", "Who is the CEO?"],
                                         [((), srcs), ((), srcs)])
    assert len(answers) == 2
    for a in answers:
        assert a.trace.verdict == "invalid" and a.trace.route == "abstain" and a.abstained
        assert a.text == "" and a.trace.raw_output.startswith("memory:")
    assert det.invalid == 2


# --- the gate and the policy with a scripted generator (the tiny model cannot speak the format) ---

FIRST = {v: " " + v for v in (*VERDICTS, "unknown")}


@dataclass(frozen=True)
class G:
    text: str
    tokens: tuple
    top_logprobs: tuple
    prompt: str = "p"


def _reply(tokens: list[str], p_unknown: float, verdict: str, p_verdict: float) -> G:
    tops = []
    for i, t in enumerate(tokens):
        if i == 0:
            tops.append(((" unknown", math.log(p_unknown)), ("x", -5.0)))
        elif tokens[i - 1] == ":" and tokens[i - 2] == " verdict":
            other = "supported" if verdict != "supported" else "conflicting"
            tops.append(((" " + verdict, math.log(p_verdict)), (" " + other, math.log(1 - p_verdict))))
        else:
            tops.append(((t, -0.01),))
    return G("".join(tokens), tuple(tokens), tuple(tops))


class Scripted:
    """Returns a scripted reply per (question, prefix); records every call."""

    def __init__(self, replies):
        self.replies, self.calls = replies, []

    def generate(self, convs, *, adapter=None, max_new_tokens=None, top_logprobs=0, prefixes=None):
        self.calls.append((len(convs), prefixes, adapter))
        return [self.replies[(c[-1].content.rsplit("Question: ", 1)[1], p)] for c, p in zip(convs, prefixes)]


def _toks(mem, src, verdict, ans):
    return [f" {mem}", " |", " source", ":", f" {src}", " |", " verdict", ":", f" {verdict}", " |",
            " answer", ":", f" {ans}"]


def test_gate_regenerates_with_forced_unknown_and_policy_routes():
    gated_tail = [" source", ":", " 9", " |", " verdict", ":", " supported", " |", " answer", ":", " 9"]
    replies = {
        # known fact, factual error in the source: memory kept (P(unknown) low) -> fallback to memory
        ("q-known", "memory:"): _reply(_toks("12", "9", "conflicting", "12"), 0.05, "conflicting", 0.9),
        # never-learned fact: the model "remembers" 7, but P(unknown) is high -> gate fires
        ("q-unseen", "memory:"): _reply(_toks("7", "9", "conflicting", "7"), 0.6, "conflicting", 0.8),
        ("q-unseen", "memory: unknown |"): _reply(gated_tail, 0.5, "supported", 0.95),
    }
    gen = Scripted(replies)
    cfg = FallbackConfig(policy=PolicyConfig(flag_threshold=0.5))
    det = Detector(gen, FIRST, cfg, gate_threshold=0.3)
    out = AdvancedRAGSystem(None, det, cfg).answer_with_context(
        ["q-known", "q-unseen"], [((), (_src("x"),)), ((), (_src("x"),))])
    assert [c[0] for c in gen.calls] == [2, 1]  # one scored pass for all, regeneration for one
    assert gen.calls[1][1] == ["memory: unknown |"] and gen.calls[0][2] == "lora"
    known, unseen = out
    assert known.text == "12" and known.trace.route == "fallback"
    assert known.trace.verdict == "conflicting" and known.trace.verdict_score == pytest.approx(0.9)
    assert dict(known.trace.verdict_probs)["supported"] == pytest.approx(0.1)
    assert known.trace.memory_answer == "12" and known.trace.context_answer == "9"
    assert unseen.text == "9" and unseen.trace.route == "context" and unseen.trace.verdict == "supported"
    assert unseen.trace.memory_answer is None
    assert any("gate: memory '7' -> unknown" in n for n in unseen.trace.notes)
    assert any(n == "p_unknown=0.6000" for n in unseen.trace.notes)


def test_without_gate_the_invented_memory_wins():
    replies = {("q-unseen", "memory:"): _reply(_toks("7", "9", "conflicting", "7"), 0.6, "conflicting", 0.8)}
    cfg = FallbackConfig(gate=GateConfig(enabled=False))
    det = Detector(Scripted(replies), FIRST, cfg, gate_threshold=0.3)
    (a,) = AdvancedRAGSystem(None, det, cfg).answer_with_context(["q-unseen"], [((), (_src("x"),))])
    assert a.text == "7" and a.trace.route == "fallback"
