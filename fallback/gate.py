"""The calibrated self-knowledge gate: does the model's "memory" count?

The memory-first LoRA sometimes "remembers" values for organisations it never learned (measured:
37 % over-fallback on unknown facts). The gate reads one doubt score per question (higher = more
likely never learned); above a threshold the memory counts as unknown and the reply is forced to
start `memory: unknown |`. The score (`SIGNAL`) is the mean negative log-likelihood per token
(nats) of the adapter's greedy closed-book answer: a value learned in training is produced with
confidence, an invented one is not (docs/research-log.md: dev AUROC 0.86 on the CPU demo, where
P(" unknown") at the reply's memory field stayed near chance).

The threshold is tuned on a DEV split only — a held-out dev phrasing of known facts (should keep
their memory) plus never-learned organisations (should be rejected) — and saved next to the
adapter as `gate.json`, so evaluation never sees test items while tuning.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from lorarag.core.errors import ConfigError
from lorarag.core.hashing import file_sha256
from lorarag.fallback.config import GateConfig
from lorarag.rag.config import GeneratorConfig

log = logging.getLogger(__name__)

GATE_FILE = "gate.json"
SIGNAL = "closed_book_nll"  # what the gate reads (see the module docstring)
# An empty closed-book answer is maximal doubt; finite so that gate.json stays valid JSON.
NO_ANSWER_NLL = 100.0


@dataclass(frozen=True)
class GateCalibration:
    """A tuned threshold on the gate's doubt score and how it did on the dev split."""

    threshold: float  # memory counts as unknown when the doubt score > threshold
    rule: str  # how it was chosen ("youden", "unknown_recall" or "logistic")
    n_known: int
    n_unseen: int
    known_kept: float  # share of dev known-fact items whose memory is kept
    unseen_rejected: float  # share of dev never-learned items gated to unknown
    auroc: float  # the doubt score as a detector of never-learned items, on dev
    signal: str = SIGNAL  # the doubt score it was tuned on
    generator: str = ""  # the generator that read the scores (`generator_id`)
    # dev items whose closed-book answer was itself "unknown": the memory is unknown before any
    # threshold, so they are left out of the fit and counted here (kept/rejected include them)
    known_declined: int = 0
    unseen_declined: int = 0
    adapter: str = ""  # `adapter_sha256` of the adapter whose scores were read ("": not recorded)
    dev: str = ""  # `dev_sha256` of the dev questions read ("": not recorded)
    fit: str = ""  # how the rule weighs the two kinds of dev reading (FIT); "": a file from before it was recorded
    override: float | None = None  # `gate.override`: the P(never learned) the override threshold was fitted at
    # a kept memory at or below this doubt overrides sources that disagree with it; None: no override
    override_threshold: float | None = None

    def save(self, folder: str | Path) -> Path:
        """Write `gate.json` into `folder` (normally the adapter's folder)."""
        path = Path(folder) / GATE_FILE
        path.write_text(json.dumps(asdict(self), indent=2) + "\n", encoding="utf-8")
        return path


def generator_id(cfg: GeneratorConfig) -> str:
    """What decides the gate's scores besides the adapter: kind, model, dtype, LM-head precision."""
    head = " fp32-head" if cfg.kind == "transformers" and cfg.fp32_lm_head and cfg.dtype != "float32" else ""
    attn = f" attn-{cfg.attn_impl}" if cfg.attn_impl else ""  # another kernel rounds otherwise
    cache = " prefix-cache" if cfg.kind == "transformers" and cfg.prefix_cache else ""  # so does a shared prefill
    # and a multi-token verify step (prompt_lookup) rounds its logits as a prefill does
    lookup = f" lookup-{cfg.prompt_lookup}" if cfg.kind == "transformers" and cfg.prompt_lookup else ""
    return f"{cfg.kind} {cfg.model} {cfg.dtype}{head}{attn}{cache}{lookup}"


ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")


def adapter_sha256(folder: str | Path) -> str:
    """The adapter named by its content, not its path: sha256 over the sha256 of its weights and
    its config (a retrained adapter at the same path gets another name)."""
    h = hashlib.sha256()
    for name in ADAPTER_FILES:
        f = Path(folder) / name
        h.update(f"{name}:{file_sha256(f) if f.is_file() else 'absent'}\n".encode())
    return h.hexdigest()


def dev_sha256(known: Sequence[str], unseen: Sequence[str]) -> str:
    """The dev split a calibration read, by its questions in order (known, then never-learned)."""
    text = "\n".join(known) + "\n\0\n" + "\n".join(unseen)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def load_gate(folder: str | Path) -> GateCalibration:
    """Read `gate.json` from `folder`; ConfigError when missing or malformed."""
    path = Path(folder) / GATE_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return GateCalibration(**data)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no gate calibration (run `lorarag calibrate` first)") from None
    except (json.JSONDecodeError, UnicodeDecodeError, TypeError) as exc:
        raise ConfigError(f"{path}: malformed gate calibration ({exc}): run `lorarag calibrate`") from None


def gate_fires(doubt: float | None, threshold: float) -> bool:
    """True when the memory should count as unknown (None: no reading, the gate stays shut)."""
    return doubt is not None and doubt > threshold


def answer_nll(logprobs: Sequence[float]) -> float:
    """Mean negative log-likelihood per token (nats) of a generated answer; no tokens: NO_ANSWER_NLL."""
    if not logprobs:
        return NO_ANSWER_NLL
    return -sum(logprobs) / len(logprobs)


def _auroc(neg: Sequence[float], pos: Sequence[float]) -> float:
    """Mann–Whitney AUROC of `pos` scoring above `neg` (ties count one half)."""
    if not neg or not pos:
        return float("nan")
    from scipy.stats import mannwhitneyu

    return float(mannwhitneyu(pos, neg, alternative="two-sided").statistic) / (len(pos) * len(neg))


LOG_FLOOR = 1e-6  # doubt scores are NLLs >= 0; log(0) would be -inf


# The logistic fit weighs each kind of dev reading by the inverse of its count, so the threshold is
# where known and never-learned are equally likely whatever the dev split's proportions: unweighted,
# a dev split with more never-learned than known readings would put that ratio as a prior into the
# intercept and reject known memories (docs/research-log.md).
FIT = "balanced"


def logistic_threshold(known: Sequence[float], unseen: Sequence[float], p: float = 0.5) -> float:
    """The doubt at which an L2 logistic regression (C=1) of never-learned on log(doubt), each kind
    weighed by the inverse of its count (FIT), gives `p`."""
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    x = np.log(np.maximum(np.asarray(list(known) + list(unseen), dtype=float), LOG_FLOOR))[:, None]
    y = np.r_[np.zeros(len(known)), np.ones(len(unseen))]
    m = LogisticRegression(C=1.0, class_weight=FIT).fit(x, y)
    slope, icpt = float(m.coef_[0, 0]), float(m.intercept_[0])
    if slope <= 0:  # more doubt does not mean never learned: no usable threshold, keep every memory
        return float(max(list(known) + list(unseen)))
    return math.exp((math.log(p / (1 - p)) - icpt) / slope)


def calibrate(
    p_known: Sequence[float],
    p_unseen: Sequence[float],
    *,
    rule: str = "youden",
    target: float = 0.95,
    signal: str = SIGNAL,
    override: float | None = None,
) -> GateCalibration:
    """Choose the threshold from dev doubt scores of known-fact items and never-learned items.

    - `youden`: maximise known_kept + unseen_rejected − 1 (ties: the highest threshold, which
      keeps more memories);
    - `unknown_recall`: the highest threshold that still rejects ≥ `target` of never-learned items;
    - `logistic`: where a logistic regression of "never learned" on log(doubt), fitted to every dev
      reading (L2, C=1, each kind weighed by the inverse of its count), crosses 1/2 — set by both
      distributions, not by the one or two readings at the edge that decide Youden's threshold, so
      it moves less between training seeds, and not by how many readings of each kind dev holds.
    Candidate thresholds lie midway between consecutive distinct scores (plus both ends).
    `override` (`gate.override`): the override threshold is where the logistic fit gives that
    probability of never learned, capped at the threshold (whatever the rule); None: no override.
    """
    if not p_known or not p_unseen:
        raise ValueError("gate calibration needs dev items of both known and never-learned facts")
    known = [float(x) for x in p_known]
    unseen = [float(x) for x in p_unseen]
    values = sorted(set(known + unseen))
    cands = [values[0] - 1e-6] + [(a + b) / 2 for a, b in zip(values, values[1:])] + [values[-1]]

    def rates(t: float) -> tuple[float, float]:
        kept = sum(x <= t for x in known) / len(known)
        rejected = sum(x > t for x in unseen) / len(unseen)
        return kept, rejected

    if rule == "youden":
        best = max(cands, key=lambda t: (sum(rates(t)), t))
    elif rule == "unknown_recall":
        ok = [t for t in cands if rates(t)[1] >= target]
        best = max(ok) if ok else min(cands)
    elif rule == "logistic":
        best = logistic_threshold(known, unseen)
    else:
        raise ValueError(f"unknown gate rule {rule!r} (youden | unknown_recall | logistic)")
    kept, rejected = rates(best)
    auc = _auroc(known, unseen)
    # no override where more doubt does not mean never learned (the fit's slope would be meaningless)
    strict = None if override is None or not auc > 0.5 else min(logistic_threshold(known, unseen, override), best)
    return GateCalibration(
        best,
        rule,
        len(known),
        len(unseen),
        kept,
        rejected,
        auc if not math.isnan(auc) else float("nan"),
        signal,
        fit=FIT,
        override=override,
        override_threshold=strict,
    )


def calibrate_claimed(
    known: Sequence[float | None],
    unseen: Sequence[float | None],
    *,
    rule: str = "youden",
    target: float = 0.95,
    signal: str = SIGNAL,
    override: float | None = None,
) -> GateCalibration:
    """`calibrate` over the readings of claimed memories only; None marks an item whose closed-book
    answer declined ("unknown"), which the gate never has to judge. Rates and counts stay over
    every dev item: a declined never-learned item counts as rejected, a declined known one as lost."""
    k = [x for x in known if x is not None]
    u = [x for x in unseen if x is not None]
    if not known or not unseen:
        raise ValueError("gate calibration needs dev items of both known and never-learned facts")
    if not k or not u:  # nothing left to separate: keep every claimed memory, AUROC undefined (gate off)
        return GateCalibration(
            NO_ANSWER_NLL,
            rule,
            len(known),
            len(unseen),
            len(k) / len(known),
            1 - len(u) / len(unseen),
            float("nan"),
            signal,
            known_declined=len(known) - len(k),
            unseen_declined=len(unseen) - len(u),
            fit=FIT,
            override=override,
        )
    cal = calibrate(k, u, rule=rule, target=target, signal=signal, override=override)
    return replace(
        cal,
        n_known=len(known),
        n_unseen=len(unseen),
        known_kept=cal.known_kept * len(k) / len(known),
        unseen_rejected=(cal.unseen_rejected * len(u) + len(unseen) - len(u)) / len(unseen),
        known_declined=len(known) - len(k),
        unseen_declined=len(unseen) - len(u),
    )


# --- which threshold a system uses ---------------------------------------------------------------


def fixed_threshold(g: GateConfig) -> float | None:
    """The threshold the config fixes (`gate.threshold` set); None when the gate is off."""
    return g.threshold if g.enabled else None


def threshold_in_use(cal: GateCalibration, g: GateConfig) -> float | None:
    """The threshold the system uses from a dev calibration: None when the gate is off or dev shows
    it carries no information (even the upper 95 % bound of its AUROC is under `gate.min_auroc`: it
    would only discard real memories)."""
    if not g.enabled:
        return None
    if not _informative(cal, g):
        log.warning(
            "gate OFF: %s separates known from never-learned dev items with AUROC %.3f (95%% upper bound %.3f < %s)",
            cal.signal,
            cal.auroc,
            auroc_upper(cal),
            g.min_auroc,
        )
        return None
    return cal.threshold


def auroc_upper(cal: GateCalibration) -> float:
    """The upper 95 % bound of the dev AUROC: Hanley & McNeil's (1982) standard error over the readings
    the AUROC was computed on (never-learned the positives; declined readings left out); NaN without both kinds.
    A few dozen dev readings put a point estimate of 0.5 within reach of a useful gate, so the gate is
    switched off only where the bound, not the estimate, falls short."""
    a = cal.auroc
    n_pos, n_neg = cal.n_unseen - cal.unseen_declined, cal.n_known - cal.known_declined
    if math.isnan(a) or n_pos < 1 or n_neg < 1:
        return float("nan")
    q1, q2 = a / (2 - a), 2 * a * a / (1 + a)
    var = (a * (1 - a) + (n_pos - 1) * (q1 - a * a) + (n_neg - 1) * (q2 - a * a)) / (n_pos * n_neg)
    return min(1.0, a + 1.959964 * math.sqrt(max(var, 0.0)))


def gate_state(cal: GateCalibration, g: GateConfig) -> str:
    """How a system uses this calibration, in words (the seeds report prints it beside each run's gate)."""
    if not g.enabled:
        return "off"
    if not _informative(cal, g):
        return "off: no information on dev"
    return "on" if override_in_use(cal, g) is not None else "on, no override"


def _informative(cal: GateCalibration, g: GateConfig) -> bool:
    """Dev does not show the calibration unable to separate known from never-learned readings."""
    return auroc_upper(cal) >= g.min_auroc


def override_in_use(cal: GateCalibration, g: GateConfig) -> float | None:
    """The override threshold the system uses from a dev calibration: None where `gate.override` or the
    gate is off, or the dev AUROC itself is under `gate.min_auroc`. A memory that beats its sources asks
    more than a gate that only withholds memories: a near-flat dev fit would call most memories sure."""
    if g.override is None or not g.enabled or not cal.auroc >= g.min_auroc:
        return None
    return cal.override_threshold


def gate_mismatch(cal: GateCalibration, g: GateConfig, gen_cfg: GeneratorConfig, adapter: str | None = None) -> list[str]:
    """What a saved calibration was made with that the config no longer asks for: rule, signal,
    generator (a bf16 model reads other NLLs than an fp32 one) and, given its `adapter_sha256`,
    the adapter (a retrained one reads other scores; a file without the record counts as another)."""
    pairs = {
        "rule": (cal.rule, g.rule),
        "signal": (cal.signal, SIGNAL),
        "generator": (cal.generator, generator_id(gen_cfg)),
        "fit": (cal.fit, FIT),
        "override": (cal.override, g.override),
    }
    out = [f"{k} {saved!r} (config: {want!r})" for k, (saved, want) in pairs.items() if saved != want]
    if adapter is not None and cal.adapter != adapter:
        out.append(f"adapter {cal.adapter[:12] or '(not recorded)'} (in use: {adapter[:12]})")
    return out


def reusable_gate(
    cal: GateCalibration,
    g: GateConfig,
    gen_cfg: GeneratorConfig,
    n_known: int,
    n_unseen: int,
    *,
    adapter: str | None = None,
    dev: str | None = None,
) -> bool:
    """A saved calibration still applies: nothing in gate_mismatch, same dev sizes and, when given,
    the same adapter content (`adapter_sha256`) and dev questions (`dev_sha256`)."""
    return (
        not gate_mismatch(cal, g, gen_cfg, adapter)
        and (cal.n_known, cal.n_unseen) == (n_known, n_unseen)
        and (dev is None or cal.dev == dev)
    )
