"""Verdict reading from one scored pass: label position, renormalisation, gate input, invalid."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from lorarag.fallback.verdict import INVALID, forced_unknown_prefix, label_first_tokens, read_verdict

FIRST = {
    "supported": " supported",
    "conflicting": " conflicting",
    "outdated": " outdated",
    "irrelevant": " irrelevant",
    "insufficient": " insufficient",
    "unknown": " unknown",
}


@dataclass(frozen=True)
class Gen:
    """The fields of rag.generate.Generation that the verdict reader uses."""

    text: str
    tokens: tuple[str, ...]
    top_logprobs: tuple


def _gen(tokens: list[str], tops: dict[int, dict[str, float]]) -> Gen:
    filler = {"x": -0.1}
    return Gen("".join(tokens), tuple(tokens), tuple(tops.get(i, filler) for i in range(len(tokens))))


REPLY = [
    " 12",
    " million",
    " |",
    " source",
    ":",
    " 9",
    " million",
    " |",
    " verdict",
    ":",
    " conflicting",
    " |",
    " answer",
    ":",
    " 12",
    " million",
]
VERDICT_POS = 10


def test_label_probabilities_renormalised_over_the_five_labels():
    tops = {
        VERDICT_POS: {
            " conflicting": math.log(0.6),
            " supported": math.log(0.2),
            " outdated": math.log(0.1),
            " other": math.log(0.05),
        },
        0: {" 12": math.log(0.7), " unknown": math.log(0.25)},
    }
    v = read_verdict(_gen(REPLY, tops), FIRST, prefix="memory:")
    assert v.label == "conflicting"
    # hand: 0.6 / (0.6 + 0.2 + 0.1) = 2/3; missing labels count 0
    assert v.score == pytest.approx(2 / 3)
    probs = dict(v.probs)
    assert probs["supported"] == pytest.approx(0.2 / 0.9)
    assert probs["irrelevant"] == 0.0
    assert v.flag_score == pytest.approx(1 - 0.2 / 0.9)
    assert v.p_unknown == pytest.approx(0.25)
    assert (v.memory, v.source, v.answer) == ("12 million", "9 million", "12 million")
    assert v.raw.startswith("memory: 12 million |")


def test_backend_text_that_includes_the_prefix_gives_the_same_verdict():
    tops = {VERDICT_POS: {" conflicting": -0.1, " supported": -3.0}, 0: {" unknown": math.log(0.4)}}
    g = _gen(REPLY, tops)
    with_prefix = Gen("memory:" + g.text, g.tokens, g.top_logprobs)
    a = read_verdict(g, FIRST, prefix="memory:")
    b = read_verdict(with_prefix, FIRST, prefix="memory:")
    assert a == b


def test_forced_unknown_prefix_is_parsed_with_the_generated_tail():
    toks = [" source", ":", " 9", " |", " verdict", ":", " supported", " |", " answer", ":", " 9"]
    v = read_verdict(_gen(toks, {6: {" supported": -0.05, " conflicting": -3.0}}), FIRST, prefix=forced_unknown_prefix())
    assert v.label == "supported" and v.memory == "unknown" and v.source == "9"
    assert v.score == pytest.approx(math.exp(-0.05) / (math.exp(-0.05) + math.exp(-3.0)))


@pytest.mark.parametrize(
    "tokens",
    [
        ["I", " think", " it", " is", " 12"],  # free text
        [" 12", " |", " verdict", ":", " maybe", " |", " answer", ":", " 12"],  # missing field + bad label
        [],  # empty reply
    ],
)
def test_unparseable_output_is_invalid_not_an_error(tokens):
    v = read_verdict(_gen(tokens, {}), FIRST, prefix="memory:")
    assert v.label == INVALID and not v.valid and v.probs == () and v.score == 0.0
    assert math.isnan(v.flag_score)


def test_no_label_among_top_logprobs_is_invalid():
    v = read_verdict(_gen(REPLY, {VERDICT_POS: {" banana": -0.1}}), FIRST, prefix="memory:")
    assert v.label == INVALID


def test_label_first_tokens_on_a_real_tokenizer(tiny_models):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_models["lm"])
    first = label_first_tokens(tok)
    for label, t in first.items():
        ids = tok.encode(" " + label, add_special_tokens=False)
        assert t == tok.decode(ids[:1]) and t  # the decoded first token, non-empty
