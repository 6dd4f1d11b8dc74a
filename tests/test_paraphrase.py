"""Generated wordings for single-wording sets (study/paraphrase.py): the checks, the KB they give,
the cache, and the real generator path on a tiny Qwen3."""

from __future__ import annotations

import pytest

from lorarag.rag.generators.base import Generation
from lorarag.scenarios.kb_records import QAItem
from lorarag.study.paraphrase import Paraphrase, clean, paraphrases_for, rejection, single_wording, tally, with_paraphrases

Q = QAItem("q1", "Who designed the Dunmore bridge?", ("Tom Reed",), ("c6",))


def _groups():
    return {
        "known": [Q, QAItem("q2", "When was it built?", ("1911",), ("c1",), wordings=("What year was it built?",))],
        "known_dev": [],
        "context_only": [],
        "unseen_dev": [],
        "unseen": [QAItem("q3", "Who kept the lighthouse?", ("Ada Moss",), ("c3",))],
    }


def test_clean_and_the_checks_in_order():
    assert clean('Question: "Who was the Dunmore bridge designed by?"\nmore') == "Who was the Dunmore bridge designed by?"
    assert rejection(Q, "") == "empty"
    assert rejection(Q, "Tell me the designer") == "not a question"
    assert rejection(Q, "who designed the Dunmore bridge ?") == "the original"
    assert rejection(Q, "Was it Tom Reed who designed the Dunmore bridge?") == "holds the answer"
    assert rejection(Q, "Who?") == "length"
    assert rejection(Q, "Who was the Dunmore bridge designed by?") == ""


def test_only_taught_single_wording_questions_get_kept_paraphrases():
    groups = _groups()
    assert [it.qid for it in single_wording(groups)] == ["q1"]  # q2 has a wording, q3 is never learned
    rows = [
        Paraphrase("q1", 0, "Who was the Dunmore bridge designed by?"),
        Paraphrase("q1", 1, "Who?", "length"),
        Paraphrase("q1", 2, "Who was the Dunmore bridge designed by?"),
    ]  # a repeat is kept once
    new = with_paraphrases(groups, rows)
    assert new["known"][0].wordings == ("Who was the Dunmore bridge designed by?",)
    assert new["known"][0].question == Q.question  # the test still asks the set's own wording
    assert new["known"][1] == groups["known"][1] and new["unseen"] == groups["unseen"]
    assert groups["known"][0].wordings == ()  # nothing shared was changed
    assert tally(rows) == {"questions": 1, "replies": 3, "kept": 2, "rejected": {"length": 1}, "questions_with_one": 1}


class _Canned:
    def __init__(self, replies):
        self.replies, self.calls, self.closed = replies, 0, False

    def generate(self, conversations, **kw):
        self.calls += 1
        return [Generation(self.replies[i % len(self.replies)]) for i in range(len(conversations))]

    def close(self):
        self.closed = True


def test_paraphrases_are_read_back_under_the_same_stamp_only(tmp_path):
    gen = _Canned(["Who was the Dunmore bridge designed by?", "Tom Reed?"])
    rows = paraphrases_for(_groups(), tmp_path, {"model": "m"}, 2, lambda: gen, 32)
    assert [p.why_not for p in rows] == ["", "holds the answer"] and gen.calls == 1 and gen.closed
    again = _Canned(["x?"])
    assert paraphrases_for(_groups(), tmp_path, {"model": "m"}, 2, lambda: again, 32) == rows
    assert again.calls == 0  # same stamp: read from <run>/data/paraphrases.jsonl
    paraphrases_for(_groups(), tmp_path, {"model": "other"}, 2, lambda: again, 32)
    assert again.calls == 1  # other generator settings: generated anew


@pytest.mark.slow
def test_the_real_generator_path_on_a_tiny_qwen3(tmp_path, tiny_models):
    import torch

    torch.set_num_threads(1)
    from lorarag.rag.config import GeneratorConfig
    from lorarag.rag.generators.registry import build_generator

    cfg = GeneratorConfig(kind="transformers", model=str(tiny_models["lm"]), dtype="float32", max_new_tokens=12)
    rows = paraphrases_for(_groups(), tmp_path, cfg.model_dump(), 3, lambda: build_generator(cfg), 12)
    assert [(p.qid, p.prompt) for p in rows] == [("q1", 0), ("q1", 1), ("q1", 2)]
    # a random tiny model writes no usable question: every reply is refused, with its reason
    assert all(p.why_not == rejection(Q, p.text) for p in rows)
    assert (tmp_path / "paraphrases.jsonl").is_file()
