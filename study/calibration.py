"""Stage 5 of a run: the self-knowledge gate's threshold, tuned on the DEV split only.

`calibrate_gate` reads the gate's doubt score (the closed-book answer's NLL) on dev known facts
(asked in wordings training left out) and never-learned facts, and saves the threshold as
gate.json next to the adapter, so test items never tune it.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from lorarag.core.errors import ConfigError
from lorarag.fallback.gate import (
    GATE_FILE,
    GateCalibration,
    adapter_sha256,
    calibrate_claimed,
    dev_sha256,
    fixed_threshold,
    generator_id,
    load_gate,
    override_in_use,
    reusable_gate,
    threshold_in_use,
)
from lorarag.fallback.system import Detector
from lorarag.scenarios.records import Scenario
from lorarag.study.run_folder import Echo
from lorarag.trained.components import Parts
from lorarag.trained.config import RunConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GateReading:
    """What stage 5 decided: the threshold the systems use and the calibration behind it."""

    threshold: float | None  # None: the gate is off
    calibration: GateCalibration | None  # None: the threshold is fixed by the config
    override: float | None = None  # the override threshold in use (policy rule 5); None: no override


def languages_without_dev_known(test: Sequence[Scenario], dev_known: Sequence[Scenario]) -> dict[str, int]:
    """{language: known test items} for each language of the test's known facts that no dev known
    reading has. The threshold is then fitted without that language's doubt, which can differ: on the
    research world, Chinese learned facts' NLL is far above the English, and a dev split with no Chinese
    known fact let the gate reject most right Chinese memories (docs/research-log.md)."""
    seen = {s.language for s in dev_known}
    return dict(sorted(Counter(s.language for s in test if s.knowledge == "known" and s.language not in seen).items()))


def calibrate_gate(
    cfg: RunConfig,
    parts: Parts,
    adapter: Path,
    dev_known: list[Scenario],
    dev_unseen: list[Scenario],
    echo: Echo,
    *,
    force: bool = False,
) -> GateReading:
    """The gate's doubt score on the dev split -> threshold, saved as gate.json next to the adapter
    (a saved one is reused only when it was read by the same rule and generator, from this adapter's
    content (`adapter_sha256`: a retrained adapter at the same path is calibrated afresh) and on
    these dev questions (`dev_sha256`, not only their counts))."""
    g = cfg.fallback.gate
    if g.threshold is not None and not force:
        return GateReading(fixed_threshold(g), None)
    adapter_id = adapter_sha256(adapter)
    dev_id = dev_sha256([x.question for x in dev_known], [x.question for x in dev_unseen])
    if (adapter / GATE_FILE).is_file() and not force:
        try:
            cal = load_gate(adapter)
        except ConfigError as exc:  # our own cache file, from an older format: read the dev split again
            log.warning("%s; calibrating afresh", exc)
        else:
            if reusable_gate(cal, g, cfg.rag.generator, len(dev_known), len(dev_unseen), adapter=adapter_id, dev=dev_id):
                echo(f"          reusing gate calibration from {adapter / GATE_FILE}")
                return GateReading(threshold_in_use(cal, g), cal, override_in_use(cal, g))
    det = Detector(parts.generator, parts.first_tokens, cfg.fallback, None)
    readings: list[list[float | None]] = []  # None: the closed-book answer declined
    for label, items in (("known", dev_known), ("never-learned", dev_unseen)):
        vals: list[float | None] = []
        for s in range(0, len(items), 32):
            vals.extend(det.gate_scores([x.question for x in items[s : s + 32]]))
            echo(f"          dev {label}: {min(s + 32, len(items))}/{len(items)}")
        readings.append(vals)
    cal = replace(
        calibrate_claimed(readings[0], readings[1], rule=g.rule, target=g.target, override=g.override),
        generator=generator_id(cfg.rag.generator),
        adapter=adapter_id,
        dev=dev_id,
    )
    if cal.known_declined or cal.unseen_declined:
        echo(
            f'          declined closed-book ("unknown", left out of the fit): known '
            f"{cal.known_declined}/{cal.n_known}, never-learned {cal.unseen_declined}/{cal.n_unseen}"
        )
    cal.save(adapter)
    return GateReading(threshold_in_use(cal, g), cal, override_in_use(cal, g))
