"""LLM-judged metrics: faithfulness and answer relevance through an OpenAI-compatible endpoint.

A separate, cached phase after the run (metrics stay pure functions of ItemResults). Each call is
temperature 0; the judge model's name is recorded with every verdict; responses are cached on
disk under sha256(model, messages, max_tokens) so a rerun costs nothing and gives the same
numbers. A judge answer that does not parse is recorded with `parsed=False` and counted in the
summary — never fatal.

- faithfulness (RAGAS definition): the judge lists the answer's claims and marks each supported
  or not by the context; score = supported / claims (None when the answer makes no claim).
- answer relevance: the judge rates 1-5 how directly the answer addresses the question;
  score = (rating - 1) / 4 in [0, 1].
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from lorarag.eval.config import JudgeConfig
from lorarag.eval.records import ItemResult
from lorarag.rag.generators.http import JSONClient, field
from lorarag.rag.prompt import neutralise_controls
from lorarag.rag.records import read_jsonl, write_jsonl

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JudgeInput:
    """What the judge sees for one item."""

    question: str
    answer: str
    contexts: tuple[str, ...]


@dataclass(frozen=True)
class JudgeVerdict:
    """One judged metric for one item."""

    metric: str  # "faithfulness" | "answer_relevance"
    score: float | None  # in [0, 1]; None: unparsed or not applicable
    parsed: bool
    model: str
    raw: str


@dataclass(frozen=True)
class JudgedItem:
    """Both judged metrics of one item."""

    system: str
    qid: str
    faithfulness: JudgeVerdict
    answer_relevance: JudgeVerdict


FAITHFULNESS_PROMPT = """You check whether an answer is supported by a context.
List every factual claim the answer makes, and for each say whether the context supports it.
Reply with JSON only: {{"claims": [{{"claim": "...", "supported": true}}]}}

Context:
{context}

Question: {question}
Answer: {answer}"""

RELEVANCE_PROMPT = """Rate how directly the answer addresses the question, from 1 (not at all) to 5 (fully).
Reply with JSON only: {{"rating": <1-5>}}

Question: {question}
Answer: {answer}"""


def _user(content: str) -> list[dict[str, str]]:
    """The judge's one user turn; questions, answers and contexts come from data: no control strings."""
    return [{"role": "user", "content": neutralise_controls(content)}]


def faithfulness_messages(x: JudgeInput) -> list[dict[str, str]]:
    """Chat messages asking for the answer's claims and their support."""
    ctx = "\n".join(f"[S{i}] {c}" for i, c in enumerate(x.contexts, 1)) or "(none)"
    return _user(FAITHFULNESS_PROMPT.format(context=ctx, question=x.question, answer=x.answer))


def relevance_messages(x: JudgeInput) -> list[dict[str, str]]:
    """Chat messages asking for a 1-5 relevance rating."""
    return _user(RELEVANCE_PROMPT.format(question=x.question, answer=x.answer))


def _json_object(text: str) -> dict | None:
    """The first JSON object in `text` (code fences and prose around it are ignored)."""
    text = re.sub(r"```(?:json)?", "", text)
    start = text.find("{")
    while start >= 0:
        try:
            obj, _ = json.JSONDecoder().raw_decode(text[start:])
            if isinstance(obj, dict):
                return obj
        except json.JSONDecodeError:
            pass
        start = text.find("{", start + 1)
    return None


def parse_faithfulness(raw: str) -> float | None | bool:
    """Supported share of claims; None for no claims; False when the reply does not parse."""
    obj = _json_object(raw)
    claims = obj.get("claims") if obj else None
    if not isinstance(claims, list) or not all(isinstance(c, dict) and isinstance(c.get("supported"), bool) for c in claims):
        return False
    if not claims:
        return None
    return sum(c["supported"] for c in claims) / len(claims)


def parse_relevance(raw: str) -> float | bool:
    """(rating - 1) / 4; False when the reply does not parse or the rating is outside 1-5."""
    obj = _json_object(raw)
    rating = obj.get("rating") if obj else None
    if isinstance(rating, bool) or not isinstance(rating, (int, float)) or not 1 <= rating <= 5:
        return False
    return (float(rating) - 1) / 4


class Judge:
    """Calls the judge endpoint with a disk cache; one instance per judge config."""

    def __init__(self, cfg: JudgeConfig) -> None:
        self.cfg = cfg
        self.cache = Path(cfg.cache_dir)
        self.cache.mkdir(parents=True, exist_ok=True)
        self.client = JSONClient(
            cfg.base_url, timeout_s=cfg.timeout_s, max_retries=cfg.max_retries, api_key_env=cfg.api_key_env
        )
        self.calls = 0  # endpoint calls made (cache misses)

    def close(self) -> None:
        """Close the HTTP client."""
        self.client.close()

    def complete(self, messages: list[dict[str, str]]) -> str:
        """The judge's reply text (cached by hash of model, messages and max_tokens)."""

        key_src = json.dumps(
            {"model": self.cfg.model, "messages": messages, "max_tokens": self.cfg.max_tokens},
            sort_keys=True,
            ensure_ascii=False,
        )
        path = self.cache / (hashlib.sha256(key_src.encode()).hexdigest() + ".json")
        if path.exists():
            return json.loads(path.read_text(encoding="utf-8"))["raw"]
        resp = self.client.post(
            "/chat/completions",
            {"model": self.cfg.model, "messages": messages, "temperature": 0, "max_tokens": self.cfg.max_tokens},
        )
        self.calls += 1
        raw = field(resp, "choices", 0, "message", "content", endpoint=self.cfg.base_url)
        raw = raw if isinstance(raw, str) else ""
        tmp = path.with_suffix(".tmp")
        tmp.write_text(
            json.dumps({"model": self.cfg.model, "messages": messages, "raw": raw}, ensure_ascii=False), encoding="utf-8"
        )
        tmp.replace(path)
        return raw

    def judge(self, r: ItemResult) -> JudgedItem:
        """Faithfulness and answer relevance of one item (abstentions are not applicable)."""
        x = JudgeInput(r.question, r.answer, r.final_texts)
        m = self.cfg.model
        if r.abstained or not r.answer.strip():
            na = JudgeVerdict("faithfulness", None, True, m, "")
            return JudgedItem(r.system, r.qid, na, JudgeVerdict("answer_relevance", None, True, m, ""))
        raw_f = self.complete(faithfulness_messages(x))
        f = parse_faithfulness(raw_f)
        raw_r = self.complete(relevance_messages(x))
        rel = parse_relevance(raw_r)
        if f is False or rel is False:
            log.warning(
                "%s: judge reply did not parse (%s)",
                r.qid,
                ", ".join(n for n, v in (("faithfulness", f), ("relevance", rel)) if v is False),
            )
        return JudgedItem(
            r.system,
            r.qid,
            JudgeVerdict("faithfulness", None if f is False else f, f is not False, m, raw_f),
            JudgeVerdict("answer_relevance", None if rel is False else rel, rel is not False, m, raw_r),
        )


def judge_items(
    items: Sequence[ItemResult], cfg: JudgeConfig, out_path: str | Path | None = None, *, progress: bool = True
) -> list[JudgedItem]:
    """Judge every item (cached); optionally write them as JSONL to `out_path`."""

    judge = Judge(cfg)
    seq = items
    if progress:
        from tqdm import tqdm

        seq = tqdm(items, desc=f"judge {cfg.model}", unit="item")
    try:
        out = [judge.judge(r) for r in seq]
    finally:
        judge.close()
    if out_path is not None:
        write_jsonl(out_path, out)
    return out


JUDGED_FILE = "judged.jsonl"


def load_judged(path: str | Path) -> list[JudgedItem]:
    """Read judged items written by `judge_items` (RecordError names file:line on a bad line)."""
    return read_jsonl(path, JudgedItem, tolerate_torn_tail=True)


def judge_summary(judged: Sequence[JudgedItem]) -> dict[str, float | str]:
    """Mean faithfulness and relevance over parsed, applicable items; unparsed replies counted."""

    def mean(xs):
        xs = [x for x in xs if x is not None]
        return sum(xs) / len(xs) if xs else math.nan

    return {
        "faithfulness": mean(j.faithfulness.score for j in judged),
        "answer_relevance": mean(j.answer_relevance.score for j in judged),
        "unparsed_faithfulness": sum(not j.faithfulness.parsed for j in judged),
        "unparsed_relevance": sum(not j.answer_relevance.parsed for j in judged),
        "n": len(judged),
        "model": judged[0].faithfulness.model if judged else "",
    }
