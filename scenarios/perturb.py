"""What the scenario builders share: the searchers distractors come from, and type-preserving
substitution of an answer span (a factual error that looks exactly like a real chunk, in the
manner of Longpre et al.'s entity substitution: numbers keep their format, years stay years,
names and places come from other answers of the same type and language, and of a question of the
same class: a person for a "who" question, a place for a "where", so a fake cannot be told by its
type).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence

from lorarag.core.errors import RecordError
from lorarag.rag.config import BM25Config
from lorarag.rag.index.bm25_faiss import BM25Part
from lorarag.rag.records import Chunk
from lorarag.rag.retrieve import Retriever


class PerturbationError(RecordError):
    """The answer span cannot be found or substituted in the gold text."""


Searcher = Callable[[list[str], int], list[list[str]]]  # queries, depth -> ranked chunk ids


def bm25_searcher(chunks: Sequence[Chunk]) -> Searcher:
    """A BM25 searcher over `chunks` (rag.index.BM25Part, auto tokenizer: CJK bigrams)."""

    part = BM25Part.build([c.text for c in chunks], BM25Config())
    ids = [c.chunk_id for c in chunks]

    def search(queries: list[str], depth: int) -> list[list[str]]:
        return [[ids[int(i)] for i in rows] for rows, _ in part.search(queries, depth)]

    return search


def retriever_searcher(retriever: Retriever, allowed: Collection[str] | None = None) -> Searcher:
    """The run's own retriever as a Searcher (rag.retrieval.mode: dense or hybrid distractors with
    the run's embedder), limited to the chunk ids in `allowed` when given (the SFT pool, so a
    held-out chunk never becomes a training distractor; it over-fetches by the chunks left out)."""
    ids = [c.chunk_id for c in retriever.chunks]
    left_out = 0 if allowed is None else len(ids) - len(set(ids) & set(allowed))

    def search(queries: list[str], depth: int) -> list[list[str]]:
        ranked = retriever.rank(list(queries), min(len(ids), depth + left_out))
        return [[ids[int(r)] for r in rows if allowed is None or ids[int(r)] in allowed][:depth] for rows, _ in ranked]

    return search


# ---------------------------------------------------------------------------------------
# Type-preserving substitution of an answer span (any corpus).
# ---------------------------------------------------------------------------------------
_YEAR = re.compile(r"^(1[5-9]|20)\d\d$")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_CJK = re.compile(r"[\u4e00-\u9fff]")


def answer_type(answer: str) -> str:
    """Coarse type of an answer string: year, number, cjk, entity (capitalised), or text."""
    a = answer.strip()
    if _YEAR.match(a):
        return "year"
    if _NUMBER.search(a) and len(_NUMBER.sub(" ", a).split()) <= 3:  # "$12.4 million", "58.9亿元"
        return "number"
    if _CJK.search(a):
        return "cjk"
    if a[:1].isupper():
        return "entity"
    return "text"


def _new_number(num: str, rng: random.Random) -> str:
    """A different number with the same format (digit count, separators, decimals)."""
    for _ in range(50):
        out = []
        for i, ch in enumerate(num):
            if ch.isdigit():
                lo = 1 if i == 0 else 0
                out.append(str(rng.randint(lo, 9)))
            else:
                out.append(ch)
        new = "".join(out)
        if new != num:
            return new
    raise PerturbationError(f"cannot find another number like {num!r}")


_CLASSES = (  # (class, pattern on the question): the first that matches names what the answer is
    ("person", re.compile(r"^\W*(who|whom|whose)\b|\b(which|what) (person|man|woman)\b|谁", re.I)),
    (
        "place",
        re.compile(
            r"^\W*where\b|\b(which|what) (city|country|town|place|region|state|island|river)\b"
            r"|哪里|哪儿|何处|哪个(城市|国家|地方)|哪座城市|位于哪",
            re.I,
        ),
    ),
    ("time", re.compile(r"^\W*when\b|\b(which|what) (year|decade|century|month|day)\b|哪一?年|何时|什么时候", re.I)),
)


def question_class(question: str) -> str | None:
    """What a question asks for: person, place or time (English and Chinese wh-words), else None."""
    return next((name for name, pat in _CLASSES if pat.search(question)), None)


def answer_pool(items: Iterable) -> dict[str, str | None]:
    """Each item's first answer -> the class of its question (`question_class`): the values
    `substitute_value` draws a fake from."""
    out: dict[str, str | None] = {}
    for it in items:
        for a in it.answers[:1]:
            out.setdefault(a, question_class(it.question))
    return out


def same_class(pool: Mapping[str, str | None], question: str) -> list[str]:
    """The answers of `pool` asked by a question of `question`'s class, where there are two or more;
    else every answer (a set whose questions name no class)."""
    cls = question_class(question)
    same = [a for a, c in pool.items() if cls is not None and c == cls]
    return same if len(same) >= 2 else list(pool)


def substitute_value(answer: str, rng: random.Random, pool: Sequence[str] = ()) -> str:
    """A plausible different value of the same type: years ±1–30, numbers re-drawn in the same
    format, names/places drawn from `pool` (other answers of the same type and language)."""
    kind = answer_type(answer)
    if kind == "year":
        for _ in range(50):
            y = int(answer) + rng.choice([-1, 1]) * rng.randint(1, 30)
            if y != int(answer) and y <= 2025:
                return str(y)
    if kind in ("year", "number"):
        m = list(_NUMBER.finditer(answer))
        span = max(m, key=lambda x: len(x.group()))
        return answer[: span.start()] + _new_number(span.group(), rng) + answer[span.end() :]
    same = sorted(
        {
            p
            for p in pool
            if p != answer and answer_type(p) == kind and p.lower() not in answer.lower() and answer.lower() not in p.lower()
        }
    )
    if not same:
        raise PerturbationError(f"no substitute of type {kind} for {answer!r} in the pool")
    return rng.choice(same)
