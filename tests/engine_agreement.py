"""What two generator engines must read alike (tests/test_engine_agree.py, tests/test_engine_ct2.py):
greedy answers with the same text, tokens and finish reason; the closed-book NLL (fallback.gate.
answer_nll over the chosen tokens' logprobs) within TOL nats; at every position the same top-k
tokens with probabilities within TOL (the verdict probabilities are read from them)."""

from __future__ import annotations

import math

import pytest

from lorarag.fallback.gate import answer_nll
from lorarag.rag.generators.base import Generation, Message

TOL = 1e-4  # nats (NLL) and probability (top-k)
K = 5  # top logprobs read, as a verdict pass reads its label tokens' probabilities
REPEAT = "the company was founded in 1998 in Berlin and moved to Milan. " * 4
CONVS = [
    [Message("system", "Answer from the sources."), Message("user", q)]
    for q in (
        "When was the company founded?",
        REPEAT + "Where is it now?",
        "Quelle est la capitale de la France ?",
        REPEAT,
        "初次申领机动车号牌的，应当向哪个部门申请？",
    )
]


def assert_read_alike(want: list[Generation], got: list[Generation]) -> None:
    assert len(got) == len(want)
    for r, g in zip(want, got):
        assert (g.text, g.tokens, g.finish_reason) == (r.text, r.tokens, r.finish_reason)
        assert answer_nll(g.logprobs) == pytest.approx(answer_nll(r.logprobs), abs=TOL)
        assert len(g.top_logprobs) == len(r.top_logprobs) == len(r.tokens)
        for rt, gt in zip(r.top_logprobs, g.top_logprobs):
            assert [t for t, _ in gt] == [t for t, _ in rt]
            assert [math.exp(v) for _, v in gt] == pytest.approx([math.exp(v) for _, v in rt], abs=TOL)
