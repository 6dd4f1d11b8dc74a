"""SFT data from a user's knowledge base (ms-swift `messages`), and its leak check.

`kb_leak_check` proves on the written rows that nothing held out reached training: no wording
of a never-learned question (test or the gate's dev split) in any user turn, no chunk that
answers one among the numbered sources, and no test passage (a test scenario's fabricated or
perturbed source) either. Known facts are taught in every wording the set offers, so where the set
has one wording per question their test items ask it in that trained wording (the report says so).
"""

from __future__ import annotations

import re
from typing import Iterable, Sequence

from lorarag.rag.prompt import neutralise
from lorarag.rag.records import Chunk
from lorarag.scenarios.kb_records import QAItem
from lorarag.train.sft import LeakError, SFTRow

_SOURCE_LINE = re.compile(r"^\[S\d+\] (.*)$", re.M)


def shown(text: str) -> str:
    """A passage as a source line shows it (fallback/format.rag_user_turn): inert, one line."""
    return " ".join(neutralise(text).split())


def _question(text: str) -> str:
    return " ".join(text.split()).casefold()


def kb_leak_check(rows: Iterable[SFTRow | dict], held_out: Sequence[QAItem], chunks: dict[str, Chunk],
                  test_passages: Iterable[str] = ()) -> None:
    """Raise LeakError naming the first rows that show a held-out question, a chunk answering one,
    or a test passage."""
    questions = {_question(w): it.qid for it in held_out for w in it.all_wordings}
    passages = {shown(chunks[c].text): f"the chunk answering held-out {it.qid}"
                for it in held_out for c in it.relevant_ids}
    passages.update({shown(t): "a test scenario's passage" for t in test_passages})
    problems: list[str] = []
    for i, row in enumerate(rows):
        msgs = row.to_swift()["messages"] if isinstance(row, SFTRow) else row["messages"]
        for m in msgs:
            if m["role"] != "user":
                continue
            q = _question(m["content"].rsplit("Question: ", 1)[-1])
            if q in questions:
                problems.append(f"row {i}: the question of held-out {questions[q]}")
            problems += [f"row {i}: {passages[s]}" for s in _SOURCE_LINE.findall(m["content"]) if s in passages]
    if problems:
        raise LeakError(f"{len(problems)} leak(s) of held-out data into the SFT rows: " + "; ".join(problems[:5]))
