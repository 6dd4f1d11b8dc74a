"""Can the context alone give a flawed context away? A probe over scenario records.

A detector is meant to compare its memory with the sources. When a set's wrong passages differ
from its real ones in form (shorter, another style, a marker, an archive template for older
values), a model can learn the form instead, and its detection numbers say nothing about memory.
Two probes, both on the presented context only, each flawed cell's contexts (factual error,
outdated, irrelevant, unanswerable) against the consistent ones:
- `length_auroc`: the context's length in characters as the score (either way round: max of
  AUROC and 1 - AUROC), a shortcut a chunker can remove;
- `auroc`: TF-IDF (word 1-2 grams + char 2-4 grams) + logistic regression, trained on half of the
  facts and scored on the others (grouped by fact, so it cannot memorise values), mean over
  `splits` seeded splits.
0.5 is chance; above `SHORTCUT_AUROC` the report says the set's wrong passages are told by form.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lorarag.scenarios.records import Scenario

SHORTCUT_AUROC = 0.6  # the demo world's contexts probe at 0.52-0.54 (tests/test_no_shortcut.py)


@dataclass(frozen=True)
class ShortcutProbe:
    """The probes' readings on `n_pos` factual-error and `n_neg` consistent contexts."""

    n_pos: int
    n_neg: int
    auroc: float  # mean over splits; nan when too few facts to split
    auroc_splits: tuple[float, ...]
    length_auroc: float

    @property
    def flagged(self) -> bool:
        return any(a > SHORTCUT_AUROC for a in (self.auroc, self.length_auroc))  # nan: not measured


def context_text(s: Scenario) -> str:
    return " ".join(p.text for p in s.presented)


def auroc(scores: Sequence[float], labels: Sequence[int]) -> float:
    """Area under the ROC curve (ties count 1/2), the probability a positive outscores a negative."""
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(list(labels), list(scores)))


def text_auroc(texts: Sequence[str], labels: Sequence[int], groups: Sequence[str], seed: int = 0) -> float:
    """TF-IDF + logistic regression AUROC on the held-out half of the groups (see the module doc)."""
    import numpy as np
    from scipy.sparse import hstack
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GroupShuffleSplit

    y = np.asarray(labels, dtype=int)
    tr, te = next(GroupShuffleSplit(n_splits=1, test_size=0.5, random_state=seed).split(texts, y, groups))
    if len(set(y[tr])) < 2 or len(set(y[te])) < 2:
        return float("nan")
    vec_w = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True)
    vec_c = TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 4), sublinear_tf=True)
    xtr = hstack([vec_w.fit_transform([texts[i] for i in tr]), vec_c.fit_transform([texts[i] for i in tr])])
    xte = hstack([vec_w.transform([texts[i] for i in te]), vec_c.transform([texts[i] for i in te])])
    clf = LogisticRegression(C=10.0, max_iter=2000).fit(xtr, y[tr])
    return auroc(clf.predict_proba(xte)[:, 1], y[te])


FLAWED_CELLS = ("factual_error", "fabricated", "outdated", "irrelevant", "unanswerable")


def context_probe(scenarios: Sequence[Scenario], splits: int = 3, flawed: str = "factual_error") -> ShortcutProbe | None:
    """Both probes on the `flawed` vs consistent scenarios; None without both kinds."""
    import math

    pairs = [s for s in scenarios if s.scenario in (flawed, "consistent")]
    y = [int(s.scenario == flawed) for s in pairs]
    if not pairs or len(set(y)) < 2:
        return None
    texts = [context_text(s) for s in pairs]
    groups = [s.fact_id for s in pairs]
    lengths = [float(len(t)) for t in texts]
    la = auroc(lengths, y)
    runs = tuple(text_auroc(texts, y, groups, seed) for seed in range(splits)) if len(set(groups)) >= 4 else ()
    ok = [a for a in runs if not math.isnan(a)]
    return ShortcutProbe(sum(y), len(y) - sum(y), sum(ok) / len(ok) if ok else math.nan, runs, max(la, 1 - la))


def context_probes(scenarios: Sequence[Scenario], splits: int = 3) -> dict[str, ShortcutProbe]:
    """`context_probe` for every flawed cell the scenarios hold, by cell."""
    out = {cell: context_probe(scenarios, splits, cell) for cell in FLAWED_CELLS}
    return {cell: p for cell, p in out.items() if p is not None}


def probe_lines(probes: dict[str, dict]) -> list[str]:
    """Markdown lines of the probes (records as `dataclasses.asdict` wrote them, nan as None), one a
    cell, with what a reading above SHORTCUT_AUROC means."""
    out = []
    for cell, p in probes.items():
        auc = "–" if p["auroc"] is None else f"{p['auroc']:.2f}"
        line = (
            f"Context-only probe, {cell.replace('_', ' ')} (eval/shortcut.py; {p['n_pos']} {cell} vs {p['n_neg']} "
            f"consistent test contexts): TF-IDF + logistic regression on held-out facts AUROC {auc}, length "
            f"alone {p['length_auroc']:.2f} (0.5 = chance)."
        )
        if max(p["auroc"] or 0.0, p["length_auroc"]) > SHORTCUT_AUROC:
            line += (
                f" **Above {SHORTCUT_AUROC}: this cell's contexts can be told by their form**, so a detector "
                "may flag them without consulting its memory; the detection table below compares known with "
                "never-learned facts, where memory cannot help."
            )
        out.append(line)
    return out
