"""AdvancedRAGSystem: scored pass on a real tiny Qwen3 + peft LoRA, the gate's regeneration, routes.

Reference values: label probabilities are recomputed from a plain forward pass of the same peft
model (softmax over the five labels' first-token logits at the verdict position).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from lorarag.fallback.config import FallbackConfig, GateConfig, PolicyConfig
from lorarag.fallback.format import VERDICTS
from lorarag.fallback.policy import CONFIDENT_NOTE, OVERRIDE_NOTE, READ_NOTE, READ_NOTE_ROUTED
from lorarag.fallback.system import AdvancedRAGSystem, Detector, conversation
from lorarag.fallback.verdict import label_first_tokens, label_probs
from lorarag.rag.config import GeneratorConfig
from lorarag.rag.records import Answer, Chunk, Retrieved
from tests.servers import needs_vllm


def _src(text: str, cid: str = "c1") -> Retrieved:
    return Retrieved(Chunk(cid, "doc.md", "doc.md", text, 0, len(text)), 1.0, 1)


@pytest.fixture(scope="module")
def tiny_gen(tiny_models, lora):
    import torch

    torch.set_num_threads(1)
    from lorarag.rag.generators.registry import build_generator

    cfg = GeneratorConfig(
        kind="transformers", model=str(tiny_models["lm"]), adapters={"lora": str(lora)}, max_new_tokens=12, batch_size=4
    )
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
    g = tiny_gen.generate([conv], adapter="lora", max_new_tokens=1, top_logprobs=len(tok), prefixes=[prefix])[0]
    got = label_probs(list(g.top_logprobs[0]), first)

    msgs = [{"role": m.role, "content": m.content} for m in conv]
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, enable_thinking=False) + prefix
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
    answers = system.answer_with_context(["What is the net profit?", "Who is the CEO?"], [((), srcs), ((), srcs)])
    assert len(answers) == 2
    for a in answers:
        assert a.trace.verdict == "invalid" and a.trace.route == "abstain" and a.abstained
        assert a.text == "" and a.trace.raw_output.startswith("memory:")
        (note,) = [n for n in a.trace.notes if n.startswith("invalid reply")]
        assert note == f"invalid reply: {' '.join(a.trace.raw_output.split())[:160]!r}"
    assert det.invalid == 2


# --- the gate and the policy with a scripted generator (the tiny model cannot speak the format) ---

FIRST = {v: " " + v for v in (*VERDICTS, "unknown")}


@dataclass(frozen=True)
class G:
    text: str
    tokens: tuple
    top_logprobs: tuple
    prompt: str = "p"
    logprobs: tuple = ()


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
    return [
        f" {mem}",
        " |",
        " source",
        ":",
        f" {src}",
        " |",
        " verdict",
        ":",
        f" {verdict}",
        " |",
        " answer",
        ":",
        f" {ans}",
    ]


def test_reply_memory_pass_routes_by_verdict_without_a_gate():
    """memory `reply` (the prompted baseline): one scored pass writes memory, source and verdict."""
    replies = {
        # known fact, factual error in the source: the memory is kept -> fallback to memory
        ("q-known", "memory:"): _reply(_toks("12", "9", "conflicting", "12"), 0.05, "conflicting", 0.9),
        ("q-ok", "memory:"): _reply(_toks("9", "9", "supported", "9"), 0.6, "supported", 0.95),
    }
    gen = Scripted(replies)
    cfg = FallbackConfig(policy=PolicyConfig(flag_threshold=0.5))
    det = Detector(gen, FIRST, cfg, gate_threshold=None, memory="reply")
    out = AdvancedRAGSystem(None, det, cfg).answer_with_context(
        ["q-known", "q-ok"], [((), (_src("x"),)), ((), (_src("x"),))]
    )
    assert [c[0] for c in gen.calls] == [2]  # one scored pass for all
    assert gen.calls[0][1] == ["memory:", "memory:"] and gen.calls[0][2] == "lora"
    known, ok = out
    assert known.text == "12" and known.trace.route == "fallback"
    assert known.trace.verdict == "conflicting" and known.trace.verdict_score == pytest.approx(0.9)
    assert dict(known.trace.verdict_probs)["supported"] == pytest.approx(0.1)
    assert known.trace.memory_answer == "12" and known.trace.context_answer == "9"
    assert ok.text == "9" and ok.trace.route == "context" and ok.trace.verdict == "supported"
    assert any(n == "p_unknown=0.6000" for n in ok.trace.notes)
    with pytest.raises(ValueError, match="no closed-book reading"):
        Detector(gen, FIRST, cfg, gate_threshold=0.3, memory="reply")


def test_without_gate_the_invented_memory_wins():
    replies = {("q-unseen", "memory:"): _reply(_toks("7", "9", "conflicting", "7"), 0.6, "conflicting", 0.8)}
    cfg = FallbackConfig(gate=GateConfig(enabled=False))
    gen = Scripted(replies)
    det = Detector(gen, FIRST, cfg, gate_threshold=0.3, memory="reply")  # the gate is off: no threshold
    (a,) = AdvancedRAGSystem(None, det, cfg).answer_with_context(["q-unseen"], [((), (_src("x"),))])
    assert a.text == "7" and a.trace.route == "fallback"
    assert [n for n, _, _ in gen.calls] == [1]  # one scored pass; no empty second call


# --- the same system on every backend (slow: vLLM engine / a real server) ---------------------

QUESTIONS = ["What is the net profit?", "Who is the CEO?"]
CONTEXTS = [
    ((), (_src("Net profit was 12.5 million in 2023."),)),
    ((), (_src("The CEO is Alice Martin."), _src("Headquarters: Berlin.", "c2"))),
]


def _run_system(gen, tok) -> tuple[list, list]:
    # routed by the verdict alone: the backends are compared on the detector, not on the base reader
    cfg = FallbackConfig(
        detector={"max_new_tokens": 10}, gate=GateConfig(enabled=False), policy=PolicyConfig(no_memory="verdict")
    )
    det = Detector(gen, label_first_tokens(tok), cfg, None)
    answers = AdvancedRAGSystem(None, det, cfg).answer_with_context(QUESTIONS, CONTEXTS)
    conv = conversation(QUESTIONS[0], CONTEXTS[0][1])
    scored = gen.generate([conv], adapter="lora", max_new_tokens=1, top_logprobs=5, prefixes=["memory:"])[0]
    return answers, list(scored.top_logprobs[0])


def _assert_same(ref, other):
    (ans_a, top_a), (ans_b, top_b) = ref, other
    for a, b in zip(ans_a, ans_b):
        assert a.trace.raw_output == b.trace.raw_output  # greedy: the same reply on every backend
        assert (a.trace.verdict, a.trace.route, a.text) == (b.trace.verdict, b.trace.route, b.text)
    assert [t for t, _ in top_a] == [t for t, _ in top_b]  # same top alternatives, same order
    for (_, la), (_, lb) in zip(top_a, top_b):
        assert la == pytest.approx(lb, abs=2e-3)


@pytest.fixture(scope="module")
def reference(tiny_gen):
    return _run_system(tiny_gen, tiny_gen.tokenizer)


@pytest.mark.slow
@needs_vllm
def test_vllm_offline_base_and_lora_on_one_engine(tiny_models, lora, reference):
    from lorarag.rag.generators.registry import build_generator

    gen = build_generator(
        GeneratorConfig(
            kind="vllm",
            model=str(tiny_models["lm"]),
            adapters={"lora": str(lora)},
            max_new_tokens=12,
            max_model_len=512,
            batch_size=4,
            max_lora_rank=8,
        )
    )
    try:
        _assert_same(reference, _run_system(gen, gen.tokenizer))
        base = gen.generate([conversation(QUESTIONS[0], CONTEXTS[0][1])], max_new_tokens=6)[0]
        with_lora = gen.generate([conversation(QUESTIONS[0], CONTEXTS[0][1])], adapter="lora", max_new_tokens=6)[0]
        assert base.tokens != with_lora.tokens  # one engine serves both, and the adapter bites
    finally:
        gen.close()


@pytest.mark.slow
@needs_vllm
def test_openai_server_with_lora_modules(tiny_models, tmp_path_factory, lora, reference):
    from transformers import AutoTokenizer

    from lorarag.rag.generators.registry import build_generator
    from tests.servers import free_port, launched, vllm_server_cmd

    tmp = tmp_path_factory.mktemp("srv")
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
        "--max-logprobs",
        "20",
    )
    with launched(cmd, port, log_path=tmp / "server.log") as url:
        gen = build_generator(
            GeneratorConfig(
                kind="openai",
                model="base",
                adapters={"lora": "sft"},
                base_url=url + "/v1",
                max_new_tokens=12,
                max_model_len=512,
            )
        )
        _assert_same(reference, _run_system(gen, AutoTokenizer.from_pretrained(tiny_models["lm"])))


# --- scenario contexts: poison the clean retrieval, then rerank --------------------------------


def _kb_retriever(tmp_path, texts):
    from lorarag.rag.config import IndexConfig, RetrievalConfig
    from lorarag.rag.index.store import build_from_chunks
    from lorarag.rag.retrieve import load_retriever

    chunks = [Chunk(f"d#{i}", "d.md", "d.md", t, 0, len(t)) for i, t in enumerate(texts)]
    icfg = IndexConfig(dir=str(tmp_path / "idx"))
    build_from_chunks(chunks, icfg)
    return load_retriever(icfg, RetrievalConfig(mode="bm25")), {c.chunk_id: c for c in chunks}


class LengthReranker:
    """Scores a passage by its length (a stand-in with a known order)."""

    def score(self, queries, docs):
        return [float(len(d)) for d in docs]


def test_retrieved_context_is_poisoned_then_reranked(tmp_path):
    from lorarag.rag.config import RetrievalConfig
    from lorarag.scenarios.records import PresentedChunk, Scenario
    from lorarag.trained.contexts import ScenarioContexts

    texts = [
        "Vesova Dynamics reported a net profit of 12.5 million.",
        "Vesova Dynamics archive 2021: net profit of 9.1 million dollars in that year.",
        "Vesova Dynamics is led by Alice Martin.",
        "Kestuna Foods is based in Lyon.",
    ]
    retriever, kb = _kb_retriever(tmp_path, texts)
    fe = Scenario(
        "q1",
        "f1",
        "What net profit did Vesova Dynamics report?",
        ("12.5 million",),
        ("d#0",),
        "factual_error",
        (PresentedChunk("d#0~fe", texts[0].replace("12.5", "17.5"), "d.md", replaces="d#0"),),
        "17.5 million",
    )
    outd = Scenario(
        "q2",
        "f1",
        "What net profit did Vesova Dynamics report?",
        ("12.5 million",),
        ("d#0",),
        "outdated",
        (PresentedChunk("d#1", texts[1], "d.md"),),
        "9.1 million",
        removes=("d#0",),
    )
    cfg = RetrievalConfig(mode="bm25", top_n=4, top_k=2)
    plain = ScenarioContexts(retriever, None, cfg, kb)
    (cands, final), (c2, f2) = plain.contexts([fe, outd], "retrieved")
    ids = [r.chunk.chunk_id for r in cands]
    assert "d#0~fe" in ids and "d#0" not in ids and len(final) == 2
    assert [r.rank for r in cands] == list(range(1, len(cands) + 1))
    assert next(r for r in cands if r.chunk.chunk_id == "d#0~fe").chunk.text.count("17.5") == 1
    assert "d#0" not in [r.chunk.chunk_id for r in c2] and len(f2) == 2  # the next candidate fills in
    reranked = ScenarioContexts(retriever, LengthReranker(), cfg, kb).contexts([outd], "retrieved")[0][1]
    lengths = [len(r.chunk.text) for r in reranked]
    assert lengths == sorted(lengths, reverse=True) and reranked[0].stage == "rerank"
    # presented and oracle modes
    assert [r.chunk.chunk_id for r in plain.contexts([fe], "presented")[0][1]] == ["d#0~fe"]
    assert [r.chunk.text for r in plain.oracle([fe])[0][1]] == [texts[0]]


def test_closed_book_memory_is_forced_into_the_reply():
    """memory: closed_book — a closed-book pass answers first; the RAG reply must start with it."""

    class TwoPass:
        def __init__(self):
            self.calls = []

        def generate(self, convs, *, adapter=None, max_new_tokens=None, top_logprobs=0, prefixes=None):
            self.calls.append((convs[0][0].content, prefixes, adapter))
            if prefixes is None:  # the closed-book pass
                return [G("12 | million", (), ())]
            toks = [" source", ":", " 9", " |", " verdict", ":", " conflicting", " |", " answer", ":", " 12"]
            return [_reply(toks, 0.5, "conflicting", 0.9)]

    gen = TwoPass()
    cfg = FallbackConfig()
    det = Detector(gen, FIRST, cfg, gate_threshold=None)  # no gate: the closed-book answer is the memory
    (a,) = AdvancedRAGSystem(None, det, cfg).answer_with_context(["q"], [((), (_src("x"),))])
    assert gen.calls[0][0].startswith("You answer questions from your own knowledge")
    assert gen.calls[1][1] == ["memory: 12 million |"]  # "|" in the answer cannot break the format
    assert a.trace.memory_answer == "12 million" and a.trace.route == "fallback" and a.text == "12 million"


class CBGate:
    """Closed-book pass answers with scripted token logprobs; the scored pass answers per prefix."""

    def __init__(self, closed, replies):
        self.closed, self.replies, self.calls = closed, replies, []

    def generate(self, convs, *, adapter=None, max_new_tokens=None, top_logprobs=0, prefixes=None):
        self.calls.append((convs[0][0].content, prefixes, top_logprobs))
        qs = [c[-1].content.rsplit("Question: ", 1)[1] for c in convs]
        if prefixes is None:
            return [G(self.closed[q][0], (), (), logprobs=self.closed[q][1]) for q in qs]
        return [self.replies[(q, p)] for q, p in zip(qs, prefixes)]


def test_closed_book_nll_gate_keeps_confident_memories_and_drops_unsure_ones():
    """An unsure closed-book answer (high NLL) becomes `memory: unknown`."""
    conflict = ["source", ":", " 9", " |", " verdict", ":", " conflicting", " |", " answer", ":", " 7"]
    closed = {
        "q-known": ("7", (-0.01, -0.03)),  # NLL 0.02 nats/token: learned
        "q-unseen": ("5", (-1.2, -0.6)),
    }  # NLL 0.9: invented
    replies = {
        ("q-known", "memory: 7 |"): _reply([" "] + conflict, 0.5, "conflicting", 0.9),
        ("q-unseen", "memory: unknown |"): _reply([" "] + conflict, 0.5, "conflicting", 0.9),
    }
    gen = CBGate(closed, replies)
    cfg = FallbackConfig(gate=GateConfig(), policy=PolicyConfig(no_memory="verdict"))
    det = Detector(gen, FIRST, cfg, gate_threshold=0.5, memory="closed_book")
    known, unseen = AdvancedRAGSystem(None, det, cfg).answer_with_context(["q-known", "q-unseen"], [((), (_src("x"),))] * 2)
    assert gen.calls[0][2] >= 1  # the closed-book pass asks for logprobs on every backend
    assert gen.calls[1][1] == ["memory: 7 |", "memory: unknown |"]
    assert known.trace.route == "fallback" and known.text == "7"
    # doubt without memory: the sources are the only answer (unknown_conflict = context)
    assert unseen.trace.route == "context" and unseen.trace.memory_answer is None
    assert any("gate: memory '5' -> unknown" in n for n in unseen.trace.notes)
    assert any("closed_book_nll)=0.9000" in n for n in unseen.trace.notes)


def test_declined_closed_book_answer_is_no_memory_and_no_gate_reading():
    """A closed-book "unknown" (refusal-trained adapter) gives no reading for calibration and a
    `memory: unknown |` scored pass whatever its NLL (a confident refusal is not a memory)."""
    tail = ["source", ":", " 9", " |", " verdict", ":", " supported", " |", " answer", ":", " 9"]
    closed = {"q-declined": ("unknown", (-0.001,)), "q-known": ("7", (-0.02,))}
    replies = {("q-declined", "memory: unknown |"): _reply([" "] + tail, 0.5, "supported", 0.9)}
    cfg = FallbackConfig(gate=GateConfig(), policy=PolicyConfig(no_memory="verdict"))
    det = Detector(CBGate(closed, replies), FIRST, cfg, gate_threshold=0.5, memory="closed_book")
    assert det.gate_scores(["q-declined", "q-known"]) == [None, pytest.approx(0.02)]
    (a,) = AdvancedRAGSystem(None, det, cfg).answer_with_context(["q-declined"], [((), (_src("9"),))])
    assert a.trace.route == "context" and a.text == "9" and a.trace.memory_answer is None


def test_astute_turn_puts_the_own_answer_between_sources_and_question():
    from lorarag.eval.systems import astute_user_turn
    from lorarag.fallback.format import SourceText

    turn = astute_user_turn("Who leads X?", [SourceText("X is led by Ann."), SourceText("Y is in Rome.")], "Bob <|im_end|>")
    lines = turn.splitlines()
    assert lines[0] == "Sources:" and lines[1].startswith("[S1] X is led by Ann.")
    assert lines[-2].startswith("Your own knowledge: Bob") and "<|im_end|>" not in turn  # inert
    assert lines[-1] == "Question: Who leads X?"


def test_fields_mode_reads_the_verdict_of_a_model_that_cannot_keep_the_format():
    """memory `fields`: closed-book memory, a forced `source:` pass, a forced `verdict:` pass whose
    first position gives the label probabilities (whatever the model writes after it)."""

    class Fields:
        def __init__(self):
            self.calls = []

        def generate(self, convs, *, adapter=None, max_new_tokens=None, top_logprobs=0, prefixes=None):
            self.calls.append((prefixes, max_new_tokens, top_logprobs))
            if prefixes is None:  # closed-book
                return [G("12", (), (), logprobs=(-0.1,)), G("7", (), (), logprobs=(-0.1,))]
            if prefixes[0].endswith("source:"):
                return [G(" 9 million | verdict: blah", (), ()), G(" 7\nmore text", (), ())]
            tops = [
                (((" conflicting", math.log(0.7)), (" supported", math.log(0.3))),),
                (((" supported", math.log(0.8)), (" outdated", math.log(0.2))),),
            ]
            return [G(" conflict-ish rambling", (" conflict",), t) for t in tops]

    gen = Fields()
    cfg = FallbackConfig(detector=FallbackConfig().detector.model_copy(update={"adapter": None}))
    det = Detector(gen, FIRST, cfg, None, memory="fields")
    fe, ok = AdvancedRAGSystem(None, det, cfg).answer_with_context(["q1", "q2"], [((), (_src("x"),))] * 2)
    assert gen.calls[1][0] == ["memory: 12 | source:", "memory: 7 | source:"]
    assert gen.calls[2][0] == ["memory: 12 | source: 9 million | verdict:", "memory: 7 | source: 7 | verdict:"]
    assert fe.trace.verdict == "conflicting" and fe.trace.verdict_score == pytest.approx(0.7)
    assert fe.trace.route == "fallback" and fe.text == "12"  # doubted source, memory known
    assert ok.trace.verdict == "supported" and ok.trace.route == "context" and ok.text == "7"
    assert det.invalid == 0
    with pytest.raises(ValueError):
        Detector(gen, FIRST, cfg, 0.3, memory="fields")  # no gate on a base model's memory


class Reader:
    """The wrapped RAGSystem's reading (rag/system.py answer_with_context); records every call."""

    def __init__(self):
        self.calls = []

    def answer_with_context(self, questions, contexts, adapter=None, *, candidates=None, max_new_tokens=None):
        self.calls.append((list(questions), [[r.chunk.text for r in c] for c in contexts], adapter, max_new_tokens))
        return [
            Answer(question=q, text=f"read {c[0].chunk.text} [S1]", cited=("S1",), sources=("doc.md",))
            for q, c in zip(questions, contexts)
        ]


def test_without_a_memory_the_base_model_reads_the_sources_whatever_the_verdict():
    """no_memory: read. The gate rejects '5' and the closed-book answer of another
    question is `unknown`: both are answered by one reading of their own sources by the base model
    (adapter None, the system's budget), though the verdicts said conflicting and irrelevant (which
    would have answered the source field and abstained). The known memory still routes by its verdict;
    an unreadable reply still follows on_invalid."""
    conflict = ["source", ":", " 9", " |", " verdict", ":", " conflicting", " |", " answer", ":", " 7"]
    empty = ["source", ":", " unknown", " |", " verdict", ":", " irrelevant", " |", " answer", ":", " unknown"]
    closed = {
        "q-known": ("7", (-0.01, -0.03)),
        "q-unseen": ("5", (-1.2, -0.6)),
        "q-declined": ("unknown", (-0.001,)),
        "q-bad": ("4", (-1.0,)),
    }
    replies = {
        ("q-known", "memory: 7 |"): _reply([" "] + conflict, 0.5, "conflicting", 0.9),
        ("q-unseen", "memory: unknown |"): _reply([" "] + conflict, 0.5, "conflicting", 0.9),
        ("q-declined", "memory: unknown |"): _reply([" "] + empty, 0.5, "irrelevant", 0.9),
        ("q-bad", "memory: unknown |"): G(" 4 4 4", (" 4", " 4", " 4"), (((" 4", -0.1),),) * 3),
    }
    cfg = FallbackConfig(gate=GateConfig(), policy=PolicyConfig(no_memory="read"))
    reader = Reader()
    det = Detector(CBGate(closed, replies), FIRST, cfg, gate_threshold=0.5, memory="closed_book")
    qs = ["q-known", "q-unseen", "q-declined", "q-bad"]
    ctxs = [((_src("cand", "c0"),), (_src(f"passage {q}"),)) for q in qs]
    known, unseen, declined, bad = AdvancedRAGSystem(reader, det, cfg, read_max_new_tokens=48).answer_with_context(qs, ctxs)
    assert reader.calls == [(["q-unseen", "q-declined"], [["passage q-unseen"], ["passage q-declined"]], None, 48)]
    assert (known.text, known.trace.route) == ("7", "fallback")
    for a, q in ((unseen, "q-unseen"), (declined, "q-declined")):
        assert a.text == f"read passage {q} [S1]" and a.cited == ("S1",) and not a.abstained
        assert a.trace.route == "context" and a.trace.memory_answer is None and READ_NOTE in a.trace.notes
        assert a.trace.verdict in ("conflicting", "irrelevant")  # the detector's reading stays on record
    assert bad.trace.verdict == "invalid" and bad.trace.route == "abstain" and READ_NOTE not in bad.trace.notes
    # the same questions routed by the verdict: the source field, and an abstention
    cfg_v = cfg.model_copy(update={"policy": PolicyConfig(no_memory="verdict")})
    det_v = Detector(CBGate(closed, replies), FIRST, cfg_v, gate_threshold=0.5, memory="closed_book")
    _, u, d, _ = AdvancedRAGSystem(Reader(), det_v, cfg_v).answer_with_context(qs, ctxs)
    assert (u.text, u.trace.route, d.trace.route, d.abstained) == ("9", "context", "abstain", True)
    # verdict_read (the default): the verdict routes, and the base model reads only where it abstains
    cfg_r = FallbackConfig(gate=GateConfig())
    assert cfg_r.policy.no_memory == "verdict_read"
    reader_r = Reader()
    det_r = Detector(CBGate(closed, replies), FIRST, cfg_r, gate_threshold=0.5, memory="closed_book")
    k, u, d, b = AdvancedRAGSystem(reader_r, det_r, cfg_r, read_max_new_tokens=48).answer_with_context(qs, ctxs)
    assert reader_r.calls == [(["q-declined"], [["passage q-declined"]], None, 48)]
    assert (k.text, u.text, u.trace.route, READ_NOTE_ROUTED in u.trace.notes) == ("7", "9", "context", False)
    assert (d.text, d.trace.route, d.abstained, d.trace.verdict) == (
        "read passage q-declined [S1]",
        "context",
        False,
        "irrelevant",
    )
    assert READ_NOTE_ROUTED in d.trace.notes and b.trace.route == "abstain"


def test_read_support_abstains_where_the_reading_is_not_in_the_sources():
    """verdict_read with read_support 1.0: the irrelevant-verdict item without a memory is read by the
    base model; its reading ("read passage q-declined [S1]") has own words 'read' and 's1' that the
    passage lacks, so it is withheld and the system abstains, with the reading noted; a reading whose
    words the passage holds is kept."""
    from lorarag.fallback.policy import UNSUPPORTED_NOTE

    empty = ["source", ":", " unknown", " |", " verdict", ":", " irrelevant", " |", " answer", ":", " unknown"]
    closed = {"q-declined": ("unknown", (-0.001,))}
    replies = {("q-declined", "memory: unknown |"): _reply([" "] + empty, 0.5, "irrelevant", 0.9)}
    cfg = FallbackConfig(gate=GateConfig(), policy=PolicyConfig(read_support=1.0))
    det = Detector(CBGate(closed, replies), FIRST, cfg, gate_threshold=0.5, memory="closed_book")
    (d,) = AdvancedRAGSystem(Reader(), det, cfg).answer_with_context(
        ["q-declined"], [((_src("cand", "c0"),), (_src("passage q-declined"),))]
    )
    assert (d.text, d.abstained, d.cited, d.trace.route) == ("", True, (), "abstain")
    assert READ_NOTE_ROUTED in d.trace.notes and UNSUPPORTED_NOTE in d.trace.notes
    det = Detector(CBGate(closed, replies), FIRST, cfg, gate_threshold=0.5, memory="closed_book")
    (k,) = AdvancedRAGSystem(Reader(), det, cfg).answer_with_context(
        ["q-declined"], [((_src("cand", "c0"),), (_src("read passage q-declined S1"),))]
    )
    assert (k.text, k.abstained, k.trace.route) == ("read read passage q-declined S1 [S1]", False, "context")


def test_a_memory_the_reply_calls_insufficient_is_routed_as_no_memory():
    """The gate keeps '40,000' (doubt 0.2 <= 0.5), but the reply's verdict is `insufficient`, the one the
    LoRA is taught only where it has no memory: by default the memory is disowned, the base model reads
    the sources, and read_support withholds a reading they do not hold (an abstention, the memory kept on
    record); `insufficient: kept` answers from the memory. An `irrelevant` verdict keeps its memory."""
    from lorarag.fallback.policy import DISOWNED_NOTE, UNSUPPORTED_NOTE

    empty = ["source", ":", " unknown", " |", " verdict", ":", " {v}", " |", " answer", ":", " unknown"]
    closed = {"q-none": ("40,000", (-0.2, -0.2)), "q-other": ("1750", (-0.2, -0.2))}
    replies = {
        ("q-none", "memory: 40,000 |"): _reply(
            [" "] + [t.format(v="insufficient") for t in empty], 0.5, "insufficient", 0.9
        ),
        ("q-other", "memory: 1750 |"): _reply([" "] + [t.format(v="irrelevant") for t in empty], 0.5, "irrelevant", 0.9),
    }
    ctxs = [((_src("cand", "c0"),), (_src("The tower was built in 1750."),))] * 2
    cfg = FallbackConfig(gate=GateConfig(), policy=PolicyConfig(read_support=1.0))
    reader = Reader()
    det = Detector(CBGate(closed, replies), FIRST, cfg, gate_threshold=0.5, memory="closed_book")
    none, other = AdvancedRAGSystem(reader, det, cfg).answer_with_context(["q-none", "q-other"], ctxs)
    assert [c[0] for c in reader.calls] == [["q-none"]]
    assert (none.text, none.abstained, none.trace.route) == ("", True, "abstain")
    assert DISOWNED_NOTE in none.trace.notes and UNSUPPORTED_NOTE in none.trace.notes
    assert none.trace.memory_answer == "40,000"  # on record for a replay under `insufficient: kept`
    assert (other.text, other.trace.route) == ("1750", "fallback") and DISOWNED_NOTE not in other.trace.notes
    kept = FallbackConfig(gate=GateConfig(), policy=PolicyConfig(read_support=1.0, insufficient="kept"))
    det = Detector(CBGate(closed, replies), FIRST, kept, gate_threshold=0.5, memory="closed_book")
    reader = Reader()
    none, _ = AdvancedRAGSystem(reader, det, kept).answer_with_context(["q-none", "q-other"], ctxs)
    assert (none.text, none.trace.route, reader.calls) == ("40,000", "fallback", [])


def test_a_confident_memory_overrides_sources_that_say_otherwise():
    """Policy rule 5: a `supported` verdict routes to the sources, unless the memory's doubt is at or
    below the override threshold and its answer differs from the sources'; a memory the gate keeps
    but is not confident of, or one the sources agree with, leaves the route to the verdict."""
    supported = ["source", ":", " 9", " |", " verdict", ":", " supported", " |", " answer", ":", " 9"]
    closed = {
        "q-sure": ("7", (-0.01, -0.01)),  # doubt 0.01 <= 0.05: confident
        "q-kept": ("7", (-0.2, -0.2)),  # doubt 0.2: kept by the gate (<= 0.5), not confident
        "q-same": ("9", (-0.01,)),  # confident, and the sources say the same
    }
    replies = {(q, f"memory: {closed[q][0]} |"): _reply([" "] + supported, 0.5, "supported", 0.9) for q in closed}
    cfg = FallbackConfig(gate=GateConfig(), policy=PolicyConfig(no_memory="verdict"))
    det = Detector(CBGate(closed, replies), FIRST, cfg, gate_threshold=0.5, override_threshold=0.05)
    sure, kept, same = AdvancedRAGSystem(None, det, cfg).answer_with_context(list(closed), [((), (_src("9"),))] * 3)
    assert (sure.trace.route, sure.text) == ("fallback", "7")
    assert OVERRIDE_NOTE in sure.trace.notes and CONFIDENT_NOTE in sure.trace.notes
    assert (kept.trace.route, kept.text) == ("context", "9") and CONFIDENT_NOTE not in kept.trace.notes
    assert (same.trace.route, same.text) == ("context", "9") and OVERRIDE_NOTE not in same.trace.notes
    # policy.override false: the confidence is recorded (a replay may use it), the verdict routes
    off = FallbackConfig(gate=GateConfig(), policy=PolicyConfig(no_memory="verdict", override=False))
    det = Detector(CBGate(closed, replies), FIRST, off, gate_threshold=0.5, override_threshold=0.05)
    (a,) = AdvancedRAGSystem(None, det, off).answer_with_context(["q-sure"], [((), (_src("9"),))])
    assert (a.trace.route, a.text) == ("context", "9") and CONFIDENT_NOTE in a.trace.notes
    # no gate in use: no override either
    det = Detector(CBGate(closed, replies), FIRST, cfg, gate_threshold=None, override_threshold=0.05)
    (a,) = AdvancedRAGSystem(None, det, cfg).answer_with_context(["q-sure"], [((), (_src("9"),))])
    assert a.trace.route == "context"
