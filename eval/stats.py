"""Uncertainty: Wilson intervals for proportions, paired bootstrap CIs (item- or cluster-level), one
rate's cluster bootstrap CI, a
paired AUROC difference with a stratified cluster bootstrap, a seeds x units bootstrap, exact
McNemar tests, a cluster-level paired permutation test, and non-inferiority judged on a CI bound.

Items are not independent when they share an organisation or a document: a model that misreads
one organisation's name misreads its every fact. `clusters` (one label per item) makes a bootstrap
or a test resample whole clusters, so the CI and p reflect the number of clusters, not of items."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

Z95 = 1.959963984540054  # standard normal quantile at 0.975


def wilson_ci(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a proportion k/n (NaNs when n = 0)."""
    if n == 0:
        return (math.nan, math.nan)
    p = k / n
    den = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    # Clamp so that lo <= p <= hi also under rounding at p = 0 or 1.
    return (max(0.0, min(p, centre - half)), min(1.0, max(p, centre + half)))


@dataclass(frozen=True)
class PairedDiff:
    """Mean of B minus mean of A over paired items, with a percentile bootstrap CI."""

    a: float
    b: float
    diff: float
    lo: float
    hi: float
    n: int
    resamples: int


def _cluster_index(clusters: Sequence[str] | np.ndarray, n: int) -> tuple[np.ndarray, int]:
    """(cluster number per item, number of clusters) for a label per item."""
    labels = np.asarray(clusters)
    if labels.shape != (n,):
        raise ValueError(f"one cluster label per item needed: {labels.shape} labels for {n} items")
    if n == 0:
        return np.zeros(0, dtype=int), 0
    _, idx = np.unique(labels, return_inverse=True)
    return idx.reshape(-1), int(idx.max()) + 1


def paired_bootstrap(
    a: np.ndarray,
    b: np.ndarray,
    *,
    den_a: np.ndarray | None = None,
    den_b: np.ndarray | None = None,
    resamples: int = 2000,
    seed: int = 0,
    alpha: float = 0.05,
    clusters: Sequence[str] | np.ndarray | None = None,
) -> PairedDiff:
    """Percentile bootstrap CI of B's rate minus A's rate, resampling paired items.

    Without denominators the rates are means of `a` and `b` (NaN pairs dropped). With
    `den_a`/`den_b` (0/1 per item: is the item in that system's denominator?) each rate is
    sum(num) / sum(den) on every resample — the right form for conditional rates such as context
    bias, whose denominator (closed-book right) differs between the two models. Resamples where
    a denominator is empty are dropped. With `clusters` (a label per item) whole clusters are
    resampled: each rate is the sum over drawn clusters of their numerators over their denominators.
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"paired arrays differ in shape: {a.shape} vs {b.shape}")
    labels = np.arange(len(a)) if clusters is None else np.asarray(clusters)
    if den_a is None:
        keep = ~(np.isnan(a) | np.isnan(b))
        a, b, labels = a[keep], b[keep], labels[keep]
        da, db = np.ones_like(a), np.ones_like(b)
    else:
        da, db = np.asarray(den_a, np.float64), np.asarray(den_b, np.float64)
        a, b = np.nan_to_num(a) * da, np.nan_to_num(b) * db
    n = len(a)
    # Sum every quantity per cluster (one item a cluster without `clusters`); a resample draws clusters.
    idx, k = _cluster_index(labels, n)
    a, b, da, db = (np.bincount(idx, weights=x, minlength=k) for x in (a, b, da, db))
    ra = a.sum() / da.sum() if da.sum() else math.nan
    rb = b.sum() / db.sum() if db.sum() else math.nan
    if math.isnan(ra) or math.isnan(rb):  # one side undefined: report both rates, no difference
        return PairedDiff(float(ra), float(rb), math.nan, math.nan, math.nan, n, resamples)
    if k < 2:  # one cluster: every resample is the sample itself, a zero-width CI that claims certainty
        return PairedDiff(float(ra), float(rb), float(rb - ra), math.nan, math.nan, n, resamples)
    rng = np.random.default_rng(seed)
    diffs = np.empty(resamples)
    step = max(1, 2_000_000 // k)  # bound the (resamples, clusters) index matrix
    for s in range(0, resamples, step):
        draw = rng.integers(0, k, size=(min(step, resamples - s), k))
        with np.errstate(invalid="ignore", divide="ignore"):
            diffs[s : s + len(draw)] = b[draw].sum(1) / db[draw].sum(1) - a[draw].sum(1) / da[draw].sum(1)
    diffs = diffs[np.isfinite(diffs)]
    lo, hi = np.quantile(diffs, [alpha / 2, 1 - alpha / 2]) if len(diffs) else (math.nan, math.nan)
    return PairedDiff(float(ra), float(rb), float(rb - ra), float(lo), float(hi), n, resamples)


def cluster_rate(
    hits: np.ndarray, clusters: Sequence[str] | np.ndarray, *, resamples: int = 2000, seed: int = 0, alpha: float = 0.05
) -> tuple[float, float, float]:
    """(rate, lo, hi): a share of items with a percentile bootstrap CI that resamples whole clusters
    (each resample's rate is its hits over its items). One system's rate, where `paired_bootstrap`
    takes two: the same resampling, against a system that never hits."""
    hits = np.asarray(hits, dtype=np.float64)
    d = paired_bootstrap(np.zeros_like(hits), hits, resamples=resamples, seed=seed, alpha=alpha, clusters=clusters)
    return d.b, d.lo, d.hi


def _auc(pos: np.ndarray, neg: np.ndarray) -> float:
    """P(a positive scores above a negative), ties 1/2 (Mann-Whitney U over the pairs)."""
    if not len(pos) or not len(neg):
        return math.nan
    gt = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return float(gt / (len(pos) * len(neg)))


def paired_auroc(
    a: np.ndarray,
    b: np.ndarray,
    labels: np.ndarray,
    clusters: Sequence[str] | np.ndarray,
    *,
    resamples: int = 2000,
    seed: int = 0,
    alpha: float = 0.05,
) -> PairedDiff:
    """AUROC of score B minus AUROC of score A for telling `labels` 1 from 0, on the same items,
    with a percentile CI from a stratified cluster bootstrap: the clusters of each class are
    drawn with replacement within that class (whole clusters, so items of one organisation move
    together; within a class, so no resample loses a class). A class of one cluster gives no CI."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    y = np.asarray(labels).astype(bool)
    idx, _ = _cluster_index(clusters, len(y))
    groups = [[np.flatnonzero((idx == c) & (y == cls)) for c in np.unique(idx[y == cls])] for cls in (True, False)]
    auc_a, auc_b = _auc(a[y], a[~y]), _auc(b[y], b[~y])
    if min(len(groups[0]), len(groups[1])) < 2:
        return PairedDiff(auc_a, auc_b, auc_b - auc_a, math.nan, math.nan, len(y), resamples)
    rng = np.random.default_rng(seed)
    diffs = np.empty(resamples)
    for r in range(resamples):
        pos, neg = (np.concatenate([g[i] for i in rng.integers(0, len(g), len(g))]) for g in groups)
        diffs[r] = _auc(b[pos], b[neg]) - _auc(a[pos], a[neg])
    lo, hi = np.quantile(diffs, [alpha / 2, 1 - alpha / 2])
    return PairedDiff(auc_a, auc_b, auc_b - auc_a, float(lo), float(hi), len(y), resamples)


def crossed_bootstrap(
    stat: Callable[[np.ndarray, np.ndarray], Sequence[float]],
    n_seeds: int,
    n_units: int,
    *,
    resamples: int = 1000,
    seed: int = 0,
    alpha: float = 0.05,
) -> list[tuple[float, float]]:
    """Percentile CIs of statistics read on every (training seed, unit) pair, resampling both.

    A recipe's number moves with the training seed and with the items it is read on. Each resample
    draws `n_seeds` seed indices and `n_units` unit indices with replacement, independently (the
    design is crossed: every seed is read on every unit), and `stat(seed_idx, unit_idx)` returns the
    statistics on that resample. A unit is the cluster items come in (a fact asked in two wordings
    is one unit), so items that share a fact are never counted as independent. Non-finite readings
    are dropped per statistic; a statistic with none left gets (NaN, NaN).
    """
    if n_seeds < 1 or n_units < 1:
        raise ValueError(f"crossed bootstrap needs seeds and units, got {n_seeds} x {n_units}")
    rng = np.random.default_rng(seed)
    draws = np.array(
        [
            np.asarray(stat(rng.integers(0, n_seeds, n_seeds), rng.integers(0, n_units, n_units)), dtype=np.float64)
            for _ in range(resamples)
        ]
    )
    out = []
    for col in draws.T:
        col = col[np.isfinite(col)]
        out.append(
            tuple(float(q) for q in np.quantile(col, [alpha / 2, 1 - alpha / 2])) if len(col) else (math.nan, math.nan)
        )
    return out


def cluster_permutation_test(
    a: np.ndarray, b: np.ndarray, clusters: Sequence[str] | np.ndarray, *, resamples: int = 10000, seed: int = 0
) -> tuple[int, float]:
    """Paired permutation test of B's total minus A's at the cluster level: (clusters, two-sided p).

    Under "no difference", the two systems' results of one cluster are exchangeable, so each
    cluster's summed difference d_c = sum(b - a) keeps or flips its sign. The statistic is sum(d_c);
    p = P(|sum(±d_c)| >= |sum(d_c)|), counted exactly over all 2^m sign patterns of the m <= 16
    clusters whose difference is not 0 (the others cannot change the sum), else from `resamples`
    random patterns as (hits + 1) / (resamples + 1). It is scipy's
    `permutation_test(..., permutation_type="samples")` on the cluster differences; with one item a
    cluster it is the paired randomisation test of the items. NaN pairs are dropped.
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    keep = ~(np.isnan(a) | np.isnan(b))
    idx, k = _cluster_index(np.asarray(clusters)[keep], int(keep.sum()))
    if k == 0:
        return 0, math.nan
    d = np.bincount(idx, weights=(b - a)[keep], minlength=k)
    d = d[d != 0]  # a cluster without difference is the same under either sign
    observed = abs(d.sum())
    tol = 1e-9 * max(1.0, observed)
    m = len(d)
    if m <= 16:
        signs = 1 - 2 * ((np.arange(2**m)[:, None] >> np.arange(m)) & 1)
        return k, float(np.mean(np.abs(signs @ d) >= observed - tol))
    rng = np.random.default_rng(seed)
    hits = 0
    for s in range(0, resamples, 1000):
        signs = rng.choice((-1.0, 1.0), size=(min(1000, resamples - s), m))
        hits += int(np.sum(np.abs(signs @ d) >= observed - tol))
    return k, (hits + 1) / (resamples + 1)


def one_per_cluster(clusters: Sequence[str], keys: Sequence[str]) -> np.ndarray:
    """Indices of one item per cluster, the one with the smallest key (a qid): McNemar on these
    counts each cluster once, where two wordings of one fact would otherwise be two pairs."""
    best: dict[str, int] = {}
    for i, (c, key) in enumerate(zip(clusters, keys)):
        if c not in best or key < keys[best[c]]:
            best[c] = i
    return np.array(sorted(best.values()), dtype=int)


def noninferior(lower: float, base: float, rel_margin: float) -> tuple[float, bool]:
    """(margin, met) for "B is not worse than A by more than `rel_margin` of A's rate": met only
    when the lower 95 % CI bound of B − A is above −rel_margin × base (a mean above it is not
    enough). NaN inputs are not met."""
    margin = rel_margin * base
    return margin, bool(not math.isnan(lower) and not math.isnan(margin) and lower > -margin)


def mcnemar_exact(a_correct: np.ndarray, b_correct: np.ndarray) -> tuple[int, int, float]:
    """Exact McNemar test: (A-only correct, B-only correct, two-sided p).

    The p-value is the two-sided binomial test of the discordant pairs against 1/2:
    min(1, 2 * P[X <= min(b, c)]) with X ~ Binomial(b + c, 1/2); 1.0 when there is no discordant pair.
    """
    from scipy.stats import binom

    a = np.asarray(a_correct, dtype=bool)
    b = np.asarray(b_correct, dtype=bool)
    only_a = int(np.sum(a & ~b))
    only_b = int(np.sum(~a & b))
    n = only_a + only_b
    if n == 0:
        return only_a, only_b, 1.0
    p = min(1.0, 2.0 * float(binom.cdf(min(only_a, only_b), n, 0.5)))
    return only_a, only_b, p


def nan_to_none(x):
    """NaN -> None, recursively, so metrics.json is strict JSON."""
    if isinstance(x, float) and math.isnan(x):
        return None
    if isinstance(x, dict):
        return {k: nan_to_none(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [nan_to_none(v) for v in x]
    return x


def ci_text(diff: float, lo: float, hi: float, *, none: str = "one cluster: no CI") -> str:
    """A signed difference with its CI as the tables print it, `+0.12 [+0.03, +0.21]`; without a CI
    (one cluster: every resample is the sample) `+0.12 (one cluster: no CI)`; no difference `–`."""
    if diff is None or math.isnan(diff):
        return "–"
    if lo is None or hi is None or math.isnan(lo) or math.isnan(hi):
        return f"{diff:+.2f} ({none})"
    return f"{diff:+.2f} [{lo:+.2f}, {hi:+.2f}]"


def counts_text(counts, fmt: str = "{k} {v}") -> str:
    """A mapping as words, `answer 40, title 3` (each pair by `fmt`), for the notes of a table (a dict's
    repr is no sentence); anything else as it is, "" for None or an empty mapping."""
    if counts is None or (isinstance(counts, dict) and not counts):
        return ""
    if isinstance(counts, dict):
        return ", ".join(fmt.format(k=k, v=v) for k, v in counts.items())
    return str(counts)
