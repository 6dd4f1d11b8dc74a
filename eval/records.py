"""The evaluation record: one `ItemResult` per (system, scenario item), and its JSONL form.

Built by exactly one function, `item_result(system, scenario, answer, closed_book_answer)`,
from the Scenario (what was asked and what is true), the system's Answer (what it said and its
Trace) and the same model's closed-book answer (for the ClashEval-style bias metrics). Every
metric in `eval/` is a pure function over lists of these records.

Chunk ids: retrieval is judged against `target_ids` = the scenario's `relevant_ids` still present
in its world (not in `removes`) plus any presented chunk that *replaces* a relevant chunk (the
perturbed copy of the gold chunk in a factual_error/outdated world sits where the gold chunk
would be, so finding it is a retrieval success; judging it is the detector's job).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from lorarag.core.errors import RecordError, UserError
from lorarag.core.inputs import check_input_file
from lorarag.rag.records import Answer, read_jsonl_lines, write_jsonl


class EvalError(UserError, ValueError):
    """Results that cannot be evaluated, compared or reported as asked (one line, exit 2)."""


ROUTES = ("context", "fallback", "abstain")
WRONG_VALUE_SCENARIOS = ("factual_error", "fabricated", "outdated")  # context asserts a wrong value


@dataclass(frozen=True)
class ItemResult:
    """What one system did on one scenario item, with everything the metrics need."""

    system: str
    qid: str
    fact_id: str
    scenario: str  # one of scenarios.records.SCENARIO_TYPES
    knowledge: str  # "known" | "unknown"
    language: str
    question: str
    gold_answers: tuple[str, ...]  # empty: unanswerable
    context_answer: str | None  # the value the presented context asserts (None: none)
    relevant_ids: tuple[str, ...]  # KB chunk ids holding the true, current answer
    target_ids: tuple[str, ...]  # ids that count as relevant for retrieval (see module doc)
    retrieved_ids: tuple[str, ...]  # before rerank (top-N), rank order
    final_ids: tuple[str, ...]  # given to the model (top-k), rank order; [S i] = final_ids[i-1]
    final_texts: tuple[str, ...]  # texts of final_ids (for citations, judging, RAGAS export)
    answer: str
    abstained: bool
    cited: tuple[str, ...]  # source labels like "S1"
    bad_citations: tuple[str, ...]  # labels cited that were not given
    verdict: str | None  # detector verdict (None: system has no detector)
    verdict_score: float | None  # probability of that verdict
    flag_score: float | None  # 1 - P(supported): probability the context is flawed
    route: str | None  # "context" | "fallback" | "abstain" | None (no routing)
    context_answer_model: str | None  # the model's answer read from the context
    memory_answer: str | None  # the model's answer from its own knowledge
    closed_book_answer: str | None  # same model, no context (ClashEval prior)
    latency_s: float | None
    phrasing: int = 0
    source_set: str = "demo"
    notes: tuple[str, ...] = ()  # the trace's notes (gate reading and decision, invalid replies)
    raw_output: str = ""  # the generator's reply before parsing (the run explorer shows it)
    verdict_probs: tuple[tuple[str, float], ...] = ()  # (label, probability) at the verdict token
    cluster: str = ""  # the scenario's cluster (organisation or document); "" in older results: the fact
    superseded: tuple[str, ...] = ()  # `update`: the values the newer context replaces (a stale answer)
    # (part, hash) of what produced the row: item, index, prompt, model (eval/stamps.py); () in older results
    made_by: tuple[tuple[str, str], ...] = ()

    @property
    def unit(self) -> str:
        """The resampling unit: the item's cluster, else its fact."""
        return self.cluster or self.fact_id


def _flag_score(probs: tuple[tuple[str, float], ...]) -> float | None:
    """1 - P(supported) from the verdict distribution; None when there is none.

    A distribution without a "supported" entry means the label was not among the alternatives
    read (top-logprobs), i.e. its probability is negligible: P(supported) = 0.
    """
    if not probs:
        return None
    return float(min(1.0, max(0.0, 1.0 - dict(probs).get("supported", 0.0))))


def item_result(
    system: str,
    scenario,
    answer: Answer,
    closed_book_answer: str | None = None,
    *,
    latency_s: float | None = None,
    made_by: tuple[tuple[str, str], ...] = (),
) -> ItemResult:
    """Build the ItemResult of one (Scenario, Answer, closed-book answer) triple.

    `latency_s` defaults to the sum of the trace's stage timings; `made_by`: the row's stamp
    (eval/stamps.py), given by the runner.
    """
    tr = answer.trace
    retrieved = tuple(r.chunk.chunk_id for r in tr.retrieved) if tr else ()
    final_chunks = (tr.reranked or tr.retrieved) if tr else ()
    final_ids = tuple(r.chunk.chunk_id for r in final_chunks)
    final_texts = tuple(r.chunk.text for r in final_chunks)
    removed = set(scenario.removes)
    rel = set(scenario.relevant_ids)
    targets = [c for c in scenario.relevant_ids if c not in removed]
    targets += [p.chunk_id for p in scenario.presented if p.replaces in rel and p.chunk_id not in targets]
    if latency_s is None and tr is not None and tr.timings_s:
        latency_s = float(sum(t for _, t in tr.timings_s))
    route = tr.route if tr else None
    if route is not None and route not in ROUTES:
        raise RecordError(f"{scenario.qid}: unknown route {route!r} (expected one of {', '.join(ROUTES)})")
    return ItemResult(
        system=system,
        qid=scenario.qid,
        fact_id=scenario.fact_id,
        scenario=scenario.scenario,
        knowledge=scenario.knowledge,
        language=scenario.language,
        question=scenario.question,
        gold_answers=tuple(scenario.gold_answers),
        context_answer=scenario.context_answer,
        relevant_ids=tuple(scenario.relevant_ids),
        target_ids=tuple(targets),
        retrieved_ids=retrieved,
        final_ids=final_ids,
        final_texts=final_texts,
        answer=answer.text,
        abstained=bool(answer.abstained or route == "abstain"),
        cited=tuple(answer.cited),
        bad_citations=tuple(answer.bad_citations),
        verdict=tr.verdict if tr else None,
        verdict_score=tr.verdict_score if tr else None,
        flag_score=_flag_score(tr.verdict_probs) if tr else None,
        route=route,
        context_answer_model=tr.context_answer if tr else None,
        memory_answer=tr.memory_answer if tr else None,
        closed_book_answer=closed_book_answer,
        latency_s=latency_s,
        phrasing=scenario.phrasing,
        source_set=scenario.source_set,
        notes=tuple(tr.notes) if tr else (),
        raw_output=tr.raw_output if tr else "",
        verdict_probs=tuple(tr.verdict_probs) if tr else (),
        cluster=scenario.cluster or scenario.fact_id,
        superseded=tuple(scenario.superseded),
        made_by=tuple(made_by),
    )


RESULTS_FILE = "results.jsonl"


def results_path(run: str | Path) -> Path:
    """`run/results.jsonl` for a run directory, or the path itself for a .jsonl file."""
    p = Path(run)
    return p if p.suffix == ".jsonl" else p / RESULTS_FILE


def load_results(run: str | Path, *, system: str | None = None) -> list[ItemResult]:
    """The one reader of a run's results (a run dir or a results .jsonl): every field's type
    checked, one system per file (`system`, or the first row's), each qid once; RecordError names
    file:line. A torn last line (an interrupted write) is ignored."""
    path = results_path(run)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no results file")
    check_input_file(path, "results file")  # a FIFO would block the read, a device exhaust memory
    rows = read_jsonl_lines(path, ItemResult, tolerate_torn_tail=True)
    want = system if system is not None else (rows[0][1].system if rows else None)
    first: dict[str, int] = {}
    for line, r in rows:
        if r.system != want:
            raise RecordError(
                f"{path}:{line}: a result of system {r.system!r} in a file of {want!r} "
                "(one system per results file; use another out_dir)"
            )
        if r.qid in first:
            raise RecordError(f"{path}:{line}: duplicate result for qid {r.qid!r} (first at line {first[r.qid]})")
        first[r.qid] = line
    return [r for _, r in rows]


def check_unique(items: Iterable[ItemResult], where: str) -> None:
    """RecordError when results given in memory (not read by `load_results`) mix systems or repeat a
    qid: every metric counts each item once."""
    items = list(items)
    systems = sorted({r.system for r in items})
    if len(systems) > 1:
        raise RecordError(f"{where}: results of several systems in one list ({', '.join(systems)})")
    seen: set[str] = set()
    for r in items:
        if r.qid in seen:
            raise RecordError(f"{where}: duplicate result for qid {r.qid!r}")
        seen.add(r.qid)


def output_dir(path: str | Path) -> Path:
    """`path` as a folder to write into (created); EvalError when a file is in the way."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise EvalError(f"{path}: is a file; the output must be a folder (give another --out)")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise EvalError(f"{path}: a file is in the way of this output folder") from None
    return path


def save_results(path: str | Path, items: Iterable[ItemResult]) -> int:
    """Write results atomically (for fixtures and exports; the runner appends instead)."""
    return write_jsonl(path, items)


def closed_book_map(items: Iterable[ItemResult]) -> dict[str, str]:
    """qid -> answer of a closed-book run, plus question -> answer for items asked elsewhere."""
    out: dict[str, str] = {}
    for r in items:
        out[r.qid] = r.answer
        out.setdefault("q:" + r.question, r.answer)
    return out


def lookup_closed_book(cb: Mapping[str, str] | None, qid: str, question: str) -> str | None:
    """The closed-book answer for an item: by qid, else by identical question text."""
    if not cb:
        return None
    return cb.get(qid, cb.get("q:" + question))
