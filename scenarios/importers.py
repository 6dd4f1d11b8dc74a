"""Importers: the shared conflict data sets (../shared/data) into Scenario records + KB chunks.

- ConflictNQ (`conflictnq/{test,val}.jsonl`): per question one real passage (the KB chunk) and
  five fabricated passages that assert a fake answer. Scenarios: `consistent` (the real
  passage) and `factual_error` (each fabricated passage stands in for the real one).
- ConflictQA (`conflictqa/strategyqa-chatgpt.jsonl`): yes/no questions with evidence aligned
  with ChatGPT's parametric memory and with a counter-answer. Which evidence is true follows
  from the ground truth and the polarity of the memory answer (a negation word means "no");
  items whose two answers have the same polarity are skipped, as their truth is ambiguous.
Both are `unknown` knowledge for our LoRA (it was never trained on them).
"""

from __future__ import annotations

import re
from pathlib import Path

from lorarag.core import outputs
from lorarag.core.errors import RecordError
from lorarag.core.inputs import check_input_file
from lorarag.rag.records import Chunk, iter_jsonl_lines, write_jsonl
from lorarag.scenarios.records import PresentedChunk, Scenario, save_scenarios, validate_against_kb

_NEG = re.compile(r"\b(not|no|never|cannot|neither|nor)\b|n't\b", re.IGNORECASE)


def _rows(path: Path) -> list[tuple[int, dict]]:
    """(line, row) of an upstream JSONL file: UTF-8 JSON objects, at least one (an empty file is
    an error, not 0 scenarios); RecordError names file:line."""
    if not path.exists():
        raise FileNotFoundError(f"{path}: not found (the shared data folder is ../shared/data)")
    rows = list(iter_jsonl_lines(check_input_file(path, "conflict set file")))
    if not rows:
        raise RecordError(f"{path}: no rows (empty file)")
    return rows


def _unique(path: Path, line: int, key: str, first: dict[str, int]) -> None:
    """RecordError when an upstream row repeats an id (it would write duplicate qids)."""
    if key in first:
        raise RecordError(f"{path}:{line}: duplicate id {key!r} (first at line {first[key]})")
    first[key] = line


def _chunk(cid: str, text: str) -> Chunk:
    return Chunk(cid, cid.rsplit("/", 1)[0], cid.rsplit("/", 1)[0], text, 0, len(text))


def conflictnq(path: Path) -> tuple[list[Scenario], list[Chunk]]:
    """ConflictNQ rows -> (scenarios, KB chunks of the real passages)."""
    scenarios: list[Scenario] = []
    chunks: list[Chunk] = []
    first: dict[str, int] = {}
    for line, r in _rows(path):
        try:
            qid, q = str(r["id"]), r.get("cleaned_question") or r["question"]
            real = [p["passage"] for p in r["real_passages"]]
            fake = [p["passage"] for p in r["fake_passages"]]
            gold, wrong = r["real_short_answer"], r["fake_short_answer"]
        except (KeyError, TypeError) as exc:
            raise RecordError(f"{path}:{line}: ConflictNQ row without {exc}") from None
        _unique(path, line, qid, first)
        texts = {"question": q, "real_short_answer": gold, "fake_short_answer": wrong}
        texts.update({f"passage {i}": t for i, t in enumerate(real + fake)})
        bad = next((k for k, v in texts.items() if not isinstance(v, str)), None)
        if bad is not None or not real:
            raise RecordError(
                f"{path}:{line}: ConflictNQ row {qid}: " + (f"{bad} is not text" if bad else "no real passage")
            )
        if " ".join(wrong.split()).casefold() == " ".join(gold.split()).casefold():
            raise RecordError(
                f"{path}:{line}: ConflictNQ row {qid}: fake_short_answer is the real short answer "
                "(its factual-error items would assert the truth)"
            )
        real_ids = tuple(f"conflictnq/{qid}/real{i}" for i in range(len(real)))
        chunks += [_chunk(cid, t) for cid, t in zip(real_ids, real)]
        base = dict(
            fact_id=f"conflictnq/{qid}",
            question=q,
            gold_answers=(gold,),
            relevant_ids=real_ids,
            knowledge="unknown",
            language="en",
            source_set="conflictnq",
        )
        scenarios.append(
            Scenario(
                qid=f"conflictnq/{qid}/consistent",
                scenario="consistent",
                presented=tuple(PresentedChunk(c, t) for c, t in zip(real_ids, real)),
                context_answer=gold,
                **base,
            )
        )
        for j, t in enumerate(fake):
            pc = PresentedChunk(f"{real_ids[0]}~fake{j}", t, replaces=real_ids[0])
            scenarios.append(
                Scenario(
                    qid=f"conflictnq/{qid}/factual_error/{j}",
                    scenario="factual_error",
                    presented=(pc,),
                    context_answer=wrong,
                    **base,
                )
            )
    return scenarios, chunks


def _polarity(answer: str) -> bool:
    """True for an affirmative statement, False when it carries a negation word."""
    return not _NEG.search(answer)


def conflictqa(path: Path) -> tuple[list[Scenario], list[Chunk]]:
    """ConflictQA (StrategyQA) rows -> (scenarios, KB chunks of the true evidence)."""
    scenarios: list[Scenario] = []
    chunks: list[Chunk] = []
    for i, (line, r) in enumerate(_rows(path)):
        try:
            truth = r["ground_truth"][0] == "True"
            mem_pol, ctr_pol = _polarity(r["memory_answer"]), _polarity(r["counter_answer"])
            mem_ev, ctr_ev = r["parametric_memory_aligned_evidence"], r["counter_memory_aligned_evidence"]
            q = r["question"]
        except (KeyError, TypeError, IndexError) as exc:
            raise RecordError(f"{path}:{line}: ConflictQA row without {exc}") from None
        if not all(isinstance(v, str) for v in (q, mem_ev, ctr_ev)):
            raise RecordError(f"{path}:{line}: ConflictQA row: question and evidence must be text")
        if mem_pol == ctr_pol:
            continue
        true_ev, false_ev = (mem_ev, ctr_ev) if mem_pol == truth else (ctr_ev, mem_ev)
        qid = f"conflictqa/{i:05d}"
        gold = ("yes", "true") if truth else ("no", "false")
        cid = f"{qid}/evidence"
        chunks.append(_chunk(cid, true_ev))
        base = dict(
            fact_id=qid,
            question=q,
            gold_answers=gold,
            relevant_ids=(cid,),
            knowledge="unknown",
            language="en",
            source_set="conflictqa",
        )
        scenarios.append(
            Scenario(
                qid=f"{qid}/consistent",
                scenario="consistent",
                presented=(PresentedChunk(cid, true_ev),),
                context_answer=gold[0],
                **base,
            )
        )
        scenarios.append(
            Scenario(
                qid=f"{qid}/factual_error",
                scenario="factual_error",
                presented=(PresentedChunk(f"{cid}~counter", false_ev, replaces=cid),),
                context_answer="no" if truth else "yes",
                **base,
            )
        )
    return scenarios, chunks


def set_file(name: str, folder: str | Path, split: str = "test") -> Path:
    """The file of conflict set `name` inside its own folder (e.g. ../shared/data/conflictnq)."""
    if name == "conflictnq":
        if split not in ("test", "val"):
            raise RecordError(f"conflictnq split must be test or val, not {split!r}")
        return Path(folder) / f"{split}.jsonl"
    if name == "conflictqa":
        return Path(folder) / "strategyqa-chatgpt.jsonl"
    raise RecordError(f"unknown conflict set {name!r} (conflictnq or conflictqa)")


def load_set(name: str, folder: str | Path, split: str = "test") -> tuple[list[Scenario], list[Chunk]]:
    """(scenarios, KB chunks) of conflict set `name` read from its folder, checked against the KB."""
    reader = conflictnq if name == "conflictnq" else conflictqa
    path = set_file(name, folder, split)
    scenarios, chunks = reader(path)
    if not scenarios:
        raise RecordError(f"{path}: no usable rows (0 scenarios)")
    validate_against_kb(scenarios, {c.chunk_id for c in chunks})
    return scenarios, chunks


def import_set(name: str, data_dir: str | Path, out: str | Path, split: str = "test", *, force: bool = False) -> int:
    """Write `<out>` (scenarios) and `<out stem>.chunks.jsonl` (KB); returns the scenario count.
    Existing files are replaced only when lorarag wrote them (core/outputs.py) or with `force`;
    the data set's own file never."""
    folder = Path(data_dir) / name
    scenarios, chunks = load_set(name, folder, split)
    out = Path(out)
    kb = out.with_name(out.stem + ".chunks.jsonl")
    outputs.claim([out, kb], force=force, inputs=[set_file(name, folder, split)])
    write_jsonl(kb, chunks)
    n = save_scenarios(out, scenarios)
    outputs.record([out, kb])
    return n
