"""Answer metrics: SQuAD EM/F1 for en/zh/fr, contains-gold accuracy, BLEU, ROUGE-L, citations.

Normalisation (SQuAD's, made multilingual): NFKC (full-width digits and letters become ASCII),
lower-case, delete punctuation (Unicode category P* and ASCII punctuation, as SQuAD deletes
`string.punctuation` rather than spacing it), delete the English articles a/an/the for
`language="en"` ONLY (French "la", "le" are content words to a French reader and stay), then
tokenise: every CJK character is its own token (character-level, as CMRC/DRCD score Chinese),
everything else splits on whitespace. Accents are kept ("été" != "ete").

`contains_gold` is the core of the accuracy used for short-answer conflict items: the answer counts
as correct when the normalised token sequence of some gold answer occurs contiguously in the
normalised answer ("The speed limit is 50 km/h." contains "50 km/h"; "150" does not contain "50"
because matching is at token boundaries; for Chinese, tokens are characters so this is a
substring test). A model that answers in a sentence is thus not punished as EM would be. `is_correct`
also requires the source's wrong value to be absent, so a reply naming both values is no answer.
"""

from __future__ import annotations

import math
import re
import string
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from functools import lru_cache

_CJK = re.compile(r"([\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ffff])")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_ASCII_PUNCT = set(string.punctuation)


def _is_punct(ch: str) -> bool:
    return ch in _ASCII_PUNCT or unicodedata.category(ch).startswith("P")


def normalize_text(text: str, language: str = "en") -> str:
    """SQuAD normalisation (see module doc), returned as space-joined tokens."""
    return " ".join(tokenize(text, language))


@lru_cache(maxsize=65536)
def _tokens(text: str, language: str) -> tuple[str, ...]:
    s = unicodedata.normalize("NFKC", text).lower()
    s = "".join(" " if ch.isspace() else ch for ch in s if not _is_punct(ch))
    if language == "en":
        s = _ARTICLES.sub(" ", s)
    s = _CJK.sub(r" \1 ", s)
    return tuple(s.split())


def tokenize(text: str, language: str = "en") -> list[str]:
    """Normalised tokens: CJK characters one by one, other words by whitespace."""
    return list(_tokens(text, language))


def exact_match(prediction: str, golds: Sequence[str], language: str = "en") -> float:
    """1.0 when the normalised prediction equals some normalised gold answer."""
    p = _tokens(prediction, language)
    return float(any(p == _tokens(g, language) for g in golds))


def _f1(p: Sequence[str], g: Sequence[str]) -> float:
    if not p or not g:
        return float(p == g)
    common = Counter(p) & Counter(g)
    same = sum(common.values())
    if same == 0:
        return 0.0
    prec, rec = same / len(p), same / len(g)
    return 2 * prec * rec / (prec + rec)


def token_f1(prediction: str, golds: Sequence[str], language: str = "en") -> float:
    """SQuAD token F1, the maximum over gold answers (0.0 when there is no gold answer)."""
    p = _tokens(prediction, language)
    return max((_f1(p, _tokens(g, language)) for g in golds), default=0.0)


def _contains(hay: Sequence[str], needle: Sequence[str]) -> bool:
    n = len(needle)
    if n == 0:
        return False
    first = needle[0]
    return any(hay[i] == first and tuple(hay[i : i + n]) == tuple(needle) for i in range(len(hay) - n + 1))


def contains_gold(answer: str, golds: Sequence[str], language: str = "en") -> bool:
    """True when some normalised gold answer occurs contiguously in the normalised answer."""
    a = _tokens(answer, language)
    return any(_contains(a, _tokens(g, language)) for g in golds)


def bleu(prediction: str, references: Sequence[str], language: str = "en") -> float:
    """Sentence BLEU by sacrebleu (zh tokenizer for Chinese, 13a otherwise), scaled to [0, 1]."""
    import sacrebleu

    if not references:
        return math.nan
    tok = "zh" if language == "zh" else "13a"
    return sacrebleu.sentence_bleu(prediction, list(references), tokenize=tok).score / 100.0


class _RougeTokenizer:
    """rouge-score tokenizer keeping CJK characters and accented letters (its default drops them)."""

    def __init__(self, language: str) -> None:
        self.language = language

    def tokenize(self, text: str) -> list[str]:
        # No article stripping here: ROUGE counts every word, as rouge-score itself does.
        return list(_tokens(text, "none"))


@lru_cache(maxsize=8)
def _scorer(language: str):
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rougeL"], tokenizer=_RougeTokenizer(language))


def rouge_l(prediction: str, references: Sequence[str], language: str = "en") -> float:
    """ROUGE-L F-measure by rouge-score, the maximum over references."""
    if not references:
        return math.nan
    sc = _scorer(language)
    return max(sc.score(ref, prediction)["rougeL"].fmeasure for ref in references)


def citation_accuracy(item) -> float:
    """Share of cited [S#] sources that hold a relevant chunk id or contain a gold answer.

    Citations of labels that were never given (`bad_citations`) count as wrong. NaN when the
    answer cites nothing (excluded from means).
    """
    total = len(item.cited) + len(item.bad_citations)
    if total == 0:
        return math.nan
    relevant = set(item.relevant_ids)
    ok = 0
    for label in item.cited:
        m = re.fullmatch(r"S(\d+)", label)
        i = int(m.group(1)) - 1 if m else -1
        if 0 <= i < len(item.final_ids) and (
            item.final_ids[i] in relevant
            or (i < len(item.final_texts) and contains_gold(item.final_texts[i], item.gold_answers, item.language))
        ):
            ok += 1
    return ok / total


def names_wrong_value(item) -> bool:
    """The answer also states a value that is not the answer: the one the source asserts
    (`context_answer`: the perturbed or older value) or, on an update, the value the newer source
    supersedes (`superseded`), where that value is not part of a gold answer. "It was 80 km/h, now
    50 km/h" names both the gold 50 km/h and the outdated 80 km/h: it does not say which holds, so it
    is not an answer. A wrong value that a gold answer contains ("50" in "50 km/h") cannot be told
    apart and is ignored."""
    if not item.gold_answers:
        return False
    wrongs = [w for w in (getattr(item, "context_answer", None), *getattr(item, "superseded", ())) if w]
    return any(
        contains_gold(item.answer, (w,), item.language)
        for w in wrongs
        if not any(contains_gold(g, (w,), item.language) for g in item.gold_answers)
    )


def is_correct(item) -> bool:
    """Item accuracy: answerable -> not abstained, contains a gold answer and not the source's wrong
    value (`names_wrong_value`); unanswerable -> abstained."""
    if not item.gold_answers:
        return bool(item.abstained)
    return (
        (not item.abstained) and contains_gold(item.answer, item.gold_answers, item.language) and not names_wrong_value(item)
    )


def _nanmean(xs: Iterable[float]) -> float:
    vals = [x for x in xs if not math.isnan(x)]
    return sum(vals) / len(vals) if vals else math.nan


def answer_summary(items: Sequence, *, with_text_metrics: bool = True) -> dict[str, float]:
    """Mean answer metrics over items (EM/F1/BLEU/ROUGE-L over answerable items only).

    abstain_correct: P(abstained | unanswerable); abstain_wrong: P(abstained | answerable).
    """
    ans = [r for r in items if r.gold_answers]
    unans = [r for r in items if not r.gold_answers]
    out: dict[str, float] = {
        "n": len(items),
        "accuracy": _nanmean(float(is_correct(r)) for r in items),
        "contains_gold": _nanmean(float(contains_gold(r.answer, r.gold_answers, r.language)) for r in ans),
        "exact_match": _nanmean(exact_match(r.answer, r.gold_answers, r.language) for r in ans),
        "f1": _nanmean(token_f1(r.answer, r.gold_answers, r.language) for r in ans),
        "citation_accuracy": _nanmean(citation_accuracy(r) for r in items),
        "abstain_correct": _nanmean(float(r.abstained) for r in unans),
        "abstain_wrong": _nanmean(float(r.abstained) for r in ans),
    }
    if with_text_metrics:
        out["bleu"] = _nanmean(bleu(r.answer, r.gold_answers, r.language) for r in ans)
        out["rouge_l"] = _nanmean(rouge_l(r.answer, r.gold_answers, r.language) for r in ans)
    return out
