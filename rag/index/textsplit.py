"""BM25 tokenisation for Chinese, French and English text.

Chinese has no spaces, so a word tokenizer sees one huge "word" per sentence; overlapping
character bigrams are the classic, dictionary-free answer (a query word of two characters
matches exactly one bigram). Latin-script text is cut into lowercased words; accents are kept
(`élève` != `eleve`) because French queries and pages write them the same way.

Kinds (BM25Config.tokenizer):
- `char_bigram`: overlapping bigrams of all non-space characters, lowercased (the baseline).
- `word`: lowercased `\\w+` words.
- `auto`: script-aware: CJK runs -> bigrams plus unigrams, other runs -> words, punctuation
  dropped, French and English function words (bm25s's lists, plus the one-letter elisions
  l' d' j' ...) dropped. Works for mixed text (Chinese with article numbers, French with digits).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable

# CJK Unified Ideographs (+ext A, compatibility), kana and hangul: scripts written without spaces.
_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af"
_RUN = re.compile(rf"[{_CJK}]+|[^\W{_CJK}]+", re.UNICODE)  # a CJK run or a word run
_CJK_RUN = re.compile(rf"[{_CJK}]+")
_WORD = re.compile(r"\w+", re.UNICODE)
_SPACE = re.compile(r"\s+")


def char_bigrams(text: str) -> list[str]:
    """Overlapping bigrams of the non-space characters of `text` (lowercased)."""
    s = _SPACE.sub("", text.lower())
    if len(s) == 1:
        return [s]
    return [s[i : i + 2] for i in range(len(s) - 1)]


def words(text: str) -> list[str]:
    """Lowercased word tokens (letters, digits, underscore), accents kept."""
    return _WORD.findall(text.lower())


@functools.lru_cache(maxsize=1)
def _stopwords() -> frozenset[str]:
    from bm25s.stopwords import STOPWORDS_EN, STOPWORDS_FRENCH

    letters = {c for c in "abcdefghijklmnopqrstuvwxyz"}  # l' d' j' s' n' c' m' t' qu' ...
    return frozenset(STOPWORDS_EN) | frozenset(STOPWORDS_FRENCH) | letters


def mixed(text: str) -> list[str]:
    """CJK runs -> unigrams + bigrams; other scripts -> lowercased words without function
    words; punctuation dropped."""
    stop = _stopwords()
    out: list[str] = []
    for m in _RUN.finditer(text.lower()):
        run = m.group(0)
        if _CJK_RUN.fullmatch(run):
            out.extend(run)  # unigrams: single-character query words (车, 路) still match
            out.extend(run[i : i + 2] for i in range(len(run) - 1))
        elif run not in stop:
            out.append(run)
    return out


TOKENIZERS: dict[str, Callable[[str], list[str]]] = {"char_bigram": char_bigrams, "word": words, "auto": mixed}


def tokenize(texts: list[str], kind: str) -> list[list[str]]:
    """Tokenise a batch of texts with the tokenizer named `kind`."""
    try:
        fn = TOKENIZERS[kind]
    except KeyError:
        raise ValueError(f"unknown BM25 tokenizer {kind!r} (known: {', '.join(TOKENIZERS)})") from None
    return [fn(t) for t in texts]
