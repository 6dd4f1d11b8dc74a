"""Routing policy (pure) and the gate's threshold calibration, against hand-computed cases."""

from __future__ import annotations

import json
import math

import pytest
from sklearn.metrics import roc_auc_score

from lorarag.core.errors import ConfigError
from lorarag.fallback.config import PolicyConfig
from lorarag.fallback.gate import NO_ANSWER_NLL, answer_nll, calibrate, calibrate_claimed, gate_fires, load_gate
from lorarag.fallback.policy import decide_route, route_answer

CFG = PolicyConfig(flag_threshold=0.6)


@pytest.mark.parametrize(
    "verdict,score,known,route",
    [
        ("supported", 0.9, True, "context"),
        ("supported", 0.9, False, "context"),
        ("conflicting", 0.7, True, "fallback"),
        ("conflicting", 0.5, True, "context"),  # doubt below the threshold: sources win
        ("outdated", 0.6, True, "fallback"),  # threshold is inclusive
        ("outdated", 0.9, False, "context"),  # no memory to fall back on
        ("conflicting", float("nan"), True, "context"),
        ("irrelevant", 0.99, True, "fallback"),
        ("insufficient", 0.99, False, "abstain"),
        ("invalid", 0.0, True, "abstain"),
    ],
)
def test_routes(verdict, score, known, route):
    assert decide_route(verdict, score, known, CFG) == route


def test_config_changes_the_route():
    cfg = PolicyConfig(flag_threshold=0.6, on_invalid="context", unknown_conflict="abstain")
    assert decide_route("invalid", 0.0, True, cfg) == "context"
    assert decide_route("outdated", 0.9, False, cfg) == "abstain"


def test_unknown_verdict_raises():
    with pytest.raises(ValueError):
        decide_route("maybe", 0.5, True, CFG)


def test_route_answer():
    assert route_answer("context", "12", "9") == "9"
    assert route_answer("fallback", "12", "9") == "12"
    assert route_answer("abstain", "12", "9") == ""


def test_gate_youden_threshold_hand_computed():
    known = [0.01, 0.02, 0.05, 0.30]  # P(" unknown") on dev phrasings of known facts
    unseen = [0.20, 0.60, 0.80, 0.90]  # on never-learned organisations
    cal = calibrate(known, unseen, rule="youden")
    # Between 0.05 and 0.20 (t=0.125): kept 3/4, rejected 4/4 -> J = 0.75; between 0.30 and 0.60
    # (t=0.45): kept 4/4, rejected 3/4 -> J = 0.75; tie -> the higher threshold keeps more memory.
    assert cal.threshold == pytest.approx(0.45)
    assert (cal.known_kept, cal.unseen_rejected) == (1.0, 0.75)
    assert cal.auroc == pytest.approx(roc_auc_score([0] * 4 + [1] * 4, known + unseen))


def test_declined_readings_are_left_out_of_the_fit_and_counted_in_the_rates():
    """None = the closed-book answer was "unknown": the threshold is the one of the claimed readings
    alone (the Youden case above); rates are over every item, a declined never-learned one rejected."""
    known = [0.01, None, 0.02, 0.05, 0.30]
    unseen = [0.20, None, None, 0.60, 0.80, 0.90]
    cal = calibrate_claimed(known, unseen, rule="youden")
    assert cal.threshold == pytest.approx(0.45)
    assert (cal.n_known, cal.n_unseen, cal.known_declined, cal.unseen_declined) == (5, 6, 1, 2)
    assert cal.known_kept == pytest.approx(4 / 5)  # 4 claimed, all under 0.45; the declined one is lost
    assert cal.unseen_rejected == pytest.approx(5 / 6)  # 0.60, 0.80, 0.90 over it + 2 declined
    assert cal.auroc == pytest.approx(roc_auc_score([0] * 4 + [1] * 4, [0.01, 0.02, 0.05, 0.30, 0.20, 0.60, 0.80, 0.90]))
    assert calibrate_claimed([0.1], [0.9]) == calibrate([0.1], [0.9])  # nothing declined: the same
    none_left = calibrate_claimed([0.1, 0.2], [None, None])
    assert none_left.unseen_rejected == 1.0 and none_left.known_kept == 1.0 and not none_left.auroc >= 0.5
    assert not gate_fires(0.2, none_left.threshold)


def test_gate_unknown_recall_rule():
    cal = calibrate([0.01, 0.02, 0.05, 0.30], [0.20, 0.60, 0.80, 0.90], rule="unknown_recall", target=1.0)
    assert cal.threshold == pytest.approx(0.125) and cal.unseen_rejected == 1.0 and cal.known_kept == 0.75


def test_gate_fires_and_round_trip(tmp_path):
    cal = calibrate([0.1], [0.9])
    assert gate_fires(0.95, cal.threshold) and not gate_fires(0.05, cal.threshold)
    assert not gate_fires(None, cal.threshold)
    cal.save(tmp_path)
    assert load_gate(tmp_path) == cal
    with pytest.raises(ConfigError, match="gate.json"):
        load_gate(tmp_path / "nope")
    with pytest.raises(ValueError):
        calibrate([], [0.5])


def test_answer_nll_hand_computed():
    assert answer_nll([-0.5, -1.5]) == pytest.approx(1.0)  # (0.5 + 1.5) / 2 nats per token
    assert answer_nll([-0.1]) == pytest.approx(0.1)
    assert answer_nll([]) == NO_ANSWER_NLL  # no answer tokens: maximal doubt, finite for JSON


def test_gate_json_round_trips_and_records_its_signal(tmp_path):
    cal = calibrate([0.02, 0.05], [0.9, 1.4])
    assert cal.signal == "closed_book_nll" and cal.auroc == 1.0
    cal.save(tmp_path)
    assert load_gate(tmp_path) == cal
    data = json.loads((tmp_path / "gate.json").read_text())
    data["lenient_rule"] = ""  # a field this version does not know: malformed, never half-read
    (tmp_path / "gate.json").write_text(json.dumps(data))
    with pytest.raises(ConfigError, match="malformed gate calibration"):
        load_gate(tmp_path)


def test_saved_gate_is_reused_only_for_the_generator_that_read_it():
    from dataclasses import replace

    from lorarag.fallback.config import GateConfig
    from lorarag.fallback.gate import generator_id, reusable_gate
    from lorarag.rag.config import GeneratorConfig

    bf16 = GeneratorConfig(kind="transformers", model="m", dtype="bfloat16")
    g = GateConfig(rule="youden")
    cal = replace(calibrate([0.02, 0.05], [0.9, 1.4], override=g.override), generator=generator_id(bf16))
    assert reusable_gate(cal, g, bf16, 2, 2)
    assert not reusable_gate(cal, g, bf16.model_copy(update={"dtype": "float32"}), 2, 2)
    assert not reusable_gate(cal, g, bf16.model_copy(update={"fp32_lm_head": False}), 2, 2)
    assert not reusable_gate(cal, g, bf16.model_copy(update={"attn_impl": "eager"}), 2, 2)  # another kernel
    assert generator_id(bf16) == "transformers m bfloat16 fp32-head"  # unset: the id of gates saved before it
    assert not reusable_gate(cal, g, bf16, 3, 2)  # another dev split
    assert not reusable_gate(replace(cal, generator=""), g, bf16, 2, 2)  # a file from before the field


def test_gate_mismatch_names_what_the_saved_calibration_was_made_with():
    """`lorarag eval` refuses a gate.json tuned by another rule/signal/generator; the run itself
    recalibrates on the same list."""
    from dataclasses import replace

    from lorarag.fallback.config import GateConfig
    from lorarag.fallback.gate import fixed_threshold, gate_mismatch, generator_id, reusable_gate
    from lorarag.rag.config import GeneratorConfig

    gen = GeneratorConfig(kind="transformers", model="m", dtype="bfloat16")
    cal = replace(calibrate([0.02, 0.05], [0.9, 1.4], rule="youden", override=0.3), generator=generator_id(gen))
    g = GateConfig(rule="youden")
    assert gate_mismatch(cal, g, gen) == []
    logistic = g.model_copy(update={"rule": "logistic"})
    assert gate_mismatch(cal, logistic, gen) == ["rule 'youden' (config: 'logistic')"]
    assert not reusable_gate(cal, logistic, gen, 2, 2)
    both = gate_mismatch(cal, logistic, gen.model_copy(update={"dtype": "float32"}))
    assert [m.split()[0] for m in both] == ["rule", "generator"]
    assert fixed_threshold(g.model_copy(update={"threshold": 0.3})) == 0.3
    assert fixed_threshold(g.model_copy(update={"threshold": 0.3, "enabled": False})) is None


def test_logistic_rule_sits_at_the_centre_of_mirror_image_dev_readings():
    """known and never-learned readings mirror each other around log(0.1) in log space, so the
    fitted 1/2 crossing is 0.1 exactly (by symmetry, whatever the L2 strength on the slope)."""
    from lorarag.fallback.gate import logistic_threshold

    known, unseen = [0.01, 0.02, 0.04], [0.25, 0.5, 1.0]
    assert logistic_threshold(known, unseen) == pytest.approx(0.1, rel=1e-4)
    cal = calibrate(known, unseen, rule="logistic")
    assert cal.rule == "logistic" and cal.threshold == pytest.approx(0.1, rel=1e-4)
    assert (cal.known_kept, cal.unseen_rejected) == (1.0, 1.0)
    # Youden puts its threshold at the edge (just under the lowest never-learned reading)
    assert calibrate(known, unseen, rule="youden").threshold == pytest.approx((0.04 + 0.25) / 2)
    # doubt that falls with "never learned": no usable threshold, every memory is kept
    assert logistic_threshold([0.5, 0.6], [0.01, 0.02]) == 0.6


def test_logistic_rule_does_not_move_with_the_dev_split_proportions():
    """Each kind of reading is weighed by the inverse of its count, so four copies of every
    never-learned reading are the mirror-image set again (each copy weighs 1/4): the crossing stays
    at 0.1 (up to lbfgs's stopping tolerance, 1e-3 relative here). Unweighted, the 12:3 proportion
    would pull it towards the known readings."""
    from lorarag.fallback.config import GateConfig
    from lorarag.fallback.gate import FIT, GateCalibration, gate_mismatch, generator_id, logistic_threshold
    from lorarag.rag.config import GeneratorConfig

    known, unseen = [0.01, 0.02, 0.04], [0.25, 0.5, 1.0]
    assert logistic_threshold(known, unseen * 4) == pytest.approx(0.1, rel=1e-3)
    assert logistic_threshold(known * 5, unseen) == pytest.approx(0.1, rel=1e-3)
    cal = calibrate(known, unseen * 4, rule="logistic", override=0.3)
    assert cal.fit == FIT == "balanced"
    # a gate.json written before the weighting was recorded is calibrated afresh, not reused
    gen = GeneratorConfig(kind="transformers", model="m")
    same = GateCalibration(**{**cal.__dict__, "generator": generator_id(gen)})
    g = GateConfig(enabled=True, rule="logistic")
    assert gate_mismatch(same, g, gen) == []
    assert gate_mismatch(GateCalibration(**{**same.__dict__, "fit": ""}), g, gen) == ["fit '' (config: 'balanced')"]


def test_the_base_model_reads_where_a_valid_reply_has_no_memory_and_the_rule_says_so():
    """verdict_read (the default): only where the verdict's route is abstain; read: whatever the route;
    verdict: never. A known memory or an invalid reply is never read."""
    from lorarag.fallback.policy import reads_sources

    routed, read, verdict = PolicyConfig(), PolicyConfig(no_memory="read"), PolicyConfig(no_memory="verdict")
    assert routed.no_memory == "verdict_read"
    cases = [(True, False, "abstain"), (True, False, "context"), (True, True, "abstain"), (False, False, "abstain")]
    assert [reads_sources(v, k, route, routed) for v, k, route in cases] == [True, False, False, False]
    assert [reads_sources(v, k, route, read) for v, k, route in cases] == [True, True, False, False]
    assert not any(reads_sources(v, k, route, verdict) for v, k, route in cases)


def test_answers_disagree_only_where_neither_holds_the_other():
    from lorarag.fallback.policy import disagrees, overrides

    assert not disagrees("Durban", "durban.")  # case and punctuation
    assert not disagrees("1983", "In 1983") and not disagrees("The Acme Co", "acme co")  # one inside the other
    assert disagrees("Genoa", "Durban") and disagrees("上海", "北京")
    assert not disagrees("北京", "北京市")  # CJK characters as words
    assert not disagrees("unknown", "Durban") and not disagrees("", "Durban")  # nothing to disagree with
    assert disagrees("19", "1983")  # whole words: "19" is not a word of "1983"
    assert overrides("context", True, "Genoa", "Durban")
    assert not overrides("abstain", True, "Genoa", "Durban") and not overrides("context", False, "Genoa", "Durban")


def test_override_threshold_is_the_logistic_fit_at_its_probability_and_never_above_the_gate():
    import math

    import numpy as np
    from sklearn.linear_model import LogisticRegression

    known, unseen = [0.01, 0.02, 0.05, 0.3], [0.1, 0.4, 0.9, 1.4]
    cal = calibrate(known, unseen, rule="logistic", override=0.3)
    # by hand: the balanced L2 logistic fit of never-learned on log(doubt), solved for P = 0.3
    x = np.log(np.asarray(known + unseen))[:, None]
    m = LogisticRegression(C=1.0, class_weight="balanced").fit(x, np.r_[np.zeros(4), np.ones(4)])
    want = math.exp((math.log(0.3 / 0.7) - m.intercept_[0]) / m.coef_[0, 0])
    assert cal.override == 0.3 and cal.override_threshold == pytest.approx(want) and want < cal.threshold
    assert calibrate(known, unseen, rule="logistic", override=0.5).override_threshold == pytest.approx(cal.threshold)
    # youden keeps the strictest of the two: the override is never above the gate's own threshold
    y = calibrate(known, unseen, rule="youden", override=0.9)
    assert y.override_threshold <= y.threshold
    assert calibrate(known, unseen).override_threshold is None  # no override asked for


def test_a_gate_fitted_without_the_override_is_refitted():
    from lorarag.fallback.config import GateConfig
    from lorarag.fallback.gate import gate_mismatch, override_in_use
    from lorarag.rag.config import GeneratorConfig

    gen = GeneratorConfig(kind="transformers", model="m")
    old = calibrate([0.02, 0.05], [0.9, 1.4], rule="logistic")  # a gate.json from before the override
    assert any(m.startswith("override") for m in gate_mismatch(old, GateConfig(), gen))
    new = calibrate([0.02, 0.05], [0.9, 1.4], rule="logistic", override=0.3)
    assert override_in_use(new, GateConfig()) == new.override_threshold
    assert override_in_use(new, GateConfig(override=None)) is None
    assert override_in_use(new, GateConfig(enabled=False)) is None


def test_the_gate_goes_off_only_where_dev_shows_it_carries_no_information():
    """A small dev split whose AUROC falls under `gate.min_auroc` by chance keeps the gate; a large one
    that pins the AUROC near chance switches it off. The bound is Hanley & McNeil's (1982), hand-computed."""
    from dataclasses import replace

    from lorarag.fallback.config import GateConfig
    from lorarag.fallback.gate import GateCalibration, auroc_upper, gate_state, override_in_use, threshold_in_use

    small = GateCalibration(0.045, "logistic", 10, 20, 0.5, 0.65, 0.505, override=0.3, override_threshold=0.01)
    # A = 0.505, 20 never-learned (positives), 10 known: Q1 = A/(2-A) = 0.337793, Q2 = 2A^2/(1+A) = 0.338904,
    # SE^2 = (0.249975 + 19 (Q1 - A^2) + 9 (Q2 - A^2)) / 200 = 0.0128874, upper = 0.505 + 1.96 * 0.113522
    assert auroc_upper(small) == pytest.approx(0.727500, abs=2e-4)
    assert threshold_in_use(small, GateConfig()) == 0.045
    # the override (a memory beating its sources) asks the estimate itself to reach min_auroc
    assert override_in_use(small, GateConfig()) is None
    assert override_in_use(replace(small, auroc=0.6), GateConfig()) == 0.01
    large = replace(small, n_known=400, n_unseen=400)  # the same estimate on 800 readings: chance, shown
    assert auroc_upper(large) < 0.6
    assert threshold_in_use(large, GateConfig()) is None
    assert override_in_use(large, GateConfig()) is None
    # declined readings are not in the AUROC: 18 of 20 never-learned declined leave 2 readings, a wide bound
    assert auroc_upper(replace(large, n_unseen=20, unseen_declined=18)) > auroc_upper(replace(large, n_unseen=20))
    assert math.isnan(auroc_upper(replace(small, auroc=float("nan"))))
    assert threshold_in_use(replace(small, auroc=float("nan")), GateConfig()) is None
    # the seeds report's words for each case
    assert gate_state(small, GateConfig()) == "on, no override"
    assert gate_state(replace(small, auroc=0.6), GateConfig()) == "on"
    assert gate_state(large, GateConfig()) == "off: no information on dev"
    assert gate_state(small, GateConfig(enabled=False)) == "off"
