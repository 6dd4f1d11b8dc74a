"""RAG-SFT rows: the LoRA's own SFT rows with every conflict-aware row re-posed as a grounded one.

RAG-SFT is the standard fine-tune-for-RAG recipe (RAFT, Zhang et al. 2024): the model is taught the
domain's facts AND to answer from the sources it is given, distractor-only contexts included,
where the honest answer is that the sources hold none. Trained on the same facts as the LoRA, it
is the knowledge-sharing baseline that was never taught to doubt a source; LoRA-RAG minus RAG-SFT
is what the conflict-aware rows add.

The transform is pure and row for row (order and count kept, so one seed and one step count show
the same facts in the same batches as the LoRA's training):
- a closed-book row (knowledge, refusal, any row whose system turn is not the conflict-aware
  prompt): unchanged;
- a conflict-aware row (system turn `fallback.format.SYSTEM_RAG`): its question and passages in
  the base RAG prompt (rag/prompt.PromptBuilder: the prompt the `base_rag` and `rag_sft` systems
  answer at test time, in the question's language), replied with the value its sources state
  (`Scenario.context_answer`: the true value, a fabricated one, an older one), or with the
  prompt's abstention sentence where they state none (irrelevant, unanswerable): the sentence
  `RAGSystem` reads as an abstention, so RAG-SFT is scored as base RAG is.
The reply is the bare value, as the LoRA's `answer:` field and closed-book rows teach it: the base
prompt's `[S1]` labels are left out, since token F1 would count a label as a wrong answer token.

Passages are shown as retrieval shows them: a presented chunk that is (or stands in for) a KB chunk
of `chunks` gets that chunk's `file > heading` label and its own text; any other gets its source.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace

from lorarag.fallback.format import SYSTEM_RAG
from lorarag.rag.prompt import PromptBuilder
from lorarag.rag.records import Chunk, Retrieved
from lorarag.scenarios.records import Scenario, presented_as_retrieved
from lorarag.train.sft import SFTRow

KIND = "grounded"  # SFTRow.kind of a re-posed row


def is_conflict_aware(row: SFTRow) -> bool:
    """Whether a row is posed in the LoRA's conflict-aware prompt (the rows RAG-SFT re-poses)."""
    return bool(row.messages) and row.messages[0] == ("system", SYSTEM_RAG)


def passages(s: Scenario, chunks: Mapping[str, Chunk]) -> list[Retrieved]:
    """The scenario's presented chunks, ranked, labelled as retrieval labels them (module docstring)."""
    out = []
    for r, p in zip(presented_as_retrieved(s), s.presented):
        kb = chunks.get(p.replaces or p.chunk_id)
        out.append(r if kb is None else replace(r, chunk=replace(kb, chunk_id=p.chunk_id, text=p.text, date=p.date)))
    return out


def grounded_row(s: Scenario, prompts: PromptBuilder, chunks: Mapping[str, Chunk]) -> SFTRow:
    """The grounded RAG-SFT row of scenario `s`: base RAG prompt, reply = what the sources state."""
    built = prompts.build(s.question, passages(s, chunks))
    reply = s.context_answer or prompts.abstention(s.question)
    return SFTRow((("system", built.system), ("user", built.user), ("assistant", reply)), KIND, None, s.fact_id, s)


def rag_sft_rows(rows: Sequence[SFTRow], prompts: PromptBuilder, chunks: Mapping[str, Chunk] | None = None) -> list[SFTRow]:
    """The RAG-SFT rows of the LoRA's `rows` (module docstring). ValueError for a conflict-aware
    row that does not carry the scenario it was built from (it cannot be re-posed)."""
    chunks = chunks or {}
    out = []
    for i, r in enumerate(rows):
        if not is_conflict_aware(r):
            out.append(r)
        elif r.scenario is None:
            raise ValueError(
                f"SFT row {i} ({r.kind}, fact {r.fact_id}) is conflict-aware but carries no scenario: "
                "build it with train.sft.rag_row so RAG-SFT can re-pose it"
            )
        else:
            out.append(grounded_row(r.scenario, prompts, chunks))
    return out


def summary(rows: Sequence[SFTRow]) -> dict[str, int]:
    """Counts by kind, grounded rows by what they teach: `grounded:answer` or `grounded:abstain`."""
    c = Counter(r.kind if r.kind != KIND else f"{KIND}:{'answer' if r.scenario.context_answer else 'abstain'}" for r in rows)
    return dict(sorted(c.items()))
