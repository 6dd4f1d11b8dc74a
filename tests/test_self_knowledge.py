"""`lorarag self-knowledge`: the paired AUROC statistic against hand-computed values, the hidden
states the probe reads against a plain transformers forward pass, the probe's training questions
(training-visible only) and its grouped-CV choice, and the command's refusals."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lorarag.eval.stats import paired_auroc


def test_paired_auroc_matches_hand_computed_values():
    # B separates perfectly (1.0). A: positives {1, 4} vs negatives {2, 3}: 4 beats both, 1 neither -> 2/4
    y = np.array([1, 1, 0, 0])
    a, b = np.array([1.0, 4.0, 2.0, 3.0]), np.array([3.0, 4.0, 1.0, 2.0])
    d = paired_auroc(a, b, y, ["p", "p", "n", "n"])
    assert (d.a, d.b, d.diff, d.n) == (0.5, 1.0, 0.5, 4)
    assert math.isnan(d.lo) and math.isnan(d.hi)  # one cluster per class: no CI
    # ties count one half: all equal -> 0.5
    assert paired_auroc(a, np.ones(4), y, ["p", "p", "n", "n"]).b == 0.5


def test_paired_auroc_ci_resamples_clusters_within_each_class():
    rng = np.random.default_rng(0)
    y = np.r_[np.ones(40), np.zeros(40)].astype(int)
    clusters = [f"c{i // 4}" for i in range(80)]  # 10 clusters per class, 4 items each
    a = rng.normal(size=80) + y  # informative
    d_same = paired_auroc(a, a, y, clusters, resamples=300)
    assert d_same.diff == 0 and d_same.lo == 0 and d_same.hi == 0
    d = paired_auroc(a, a + 10 * y, y, clusters, resamples=300)  # B separates perfectly
    assert d.b == 1.0 and d.lo > 0 and d.lo <= d.diff <= d.hi


@pytest.mark.parametrize("adapter", [None, "sft"])
def test_last_token_states_match_a_plain_forward_pass_alone_and_padded(tiny_models, lora, adapter):
    """The state at a prompt's last token after layer l equals transformers' hidden_states[l][-1]
    for that prompt alone (the reference), also when a longer prompt left-pads it in the batch."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from lorarag.fallback.system import closed_book_conversation
    from lorarag.rag.config import GeneratorConfig
    from lorarag.rag.generators.registry import build_generator

    cfg = GeneratorConfig(
        kind="transformers",
        model=str(tiny_models["lm"]),
        adapters={"sft": str(lora)},
        max_model_len=512,
        max_new_tokens=8,
        batch_size=4,
    )
    gen = build_generator(cfg)
    short, long = "Who leads Kestuna?", "In which city does the robotics maker Kestuna Robotics have its headquarters?"
    layers = [0, 1, 2]
    states = gen.last_token_states([closed_book_conversation(q) for q in (short, long)], adapter=adapter, layers=layers)
    assert states.shape == (2, 3, gen.inner.model.config.hidden_size) and states.dtype == np.float32

    ref_model = AutoModelForCausalLM.from_pretrained(str(tiny_models["lm"]), dtype=torch.float32)
    if adapter is not None:
        ref_model = PeftModel.from_pretrained(ref_model, str(lora))
    ref_model.eval()
    for row, q in enumerate((short, long)):
        ids = gen.inner._encode(closed_book_conversation(q), "", cfg.max_new_tokens)[0]
        with torch.inference_mode():
            hs = ref_model(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states
        for j, layer in enumerate(layers):
            np.testing.assert_allclose(states[row, j], hs[layer][0, -1].numpy(), atol=2e-5, rtol=1e-4)
    other = gen.last_token_states([closed_book_conversation(short)], adapter=None if adapter else "sft", layers=[2])
    assert not np.allclose(other[0, 0], states[0, 2])  # the adapter changes the states it reads
    gen.close()


def test_probe_reads_training_visible_questions_only(tmp_path):
    """Known facts in their trained wordings (never the held-out test wording), context-only facts
    in every wording; nothing of the gate's dev, the test or never-learned facts."""
    from lorarag.rag.config import ChunkerConfig
    from lorarag.scenarios.config import SplitConfig
    from lorarag.scenarios.kb_splits import split_by_fact
    from lorarag.scenarios.kb_wordings import plan_wordings
    from lorarag.study.kb import KB
    from lorarag.study.self_knowledge import probe_questions
    from tests.test_world import load_world_kb

    kb = load_world_kb(tmp_path / "world", ChunkerConfig(), seed=0, n_orgs=12, wordings=4)
    groups = split_by_fact(kb.items, SplitConfig(seed=0))
    plan = plan_wordings(groups, seed=0)
    qs, ys, clusters = probe_questions(KB(kb.corpus, groups, kb.older, []), plan)
    learned = {q for q, y in zip(qs, ys) if y == 0}
    never = {q for q, y in zip(qs, ys) if y == 1}
    assert learned and never and not learned & never
    tested = {plan[it.qid].test for it in groups["known"] if plan[it.qid].held_out}
    assert tested and not tested & learned
    off_limits = {w for g in ("known_dev", "unseen", "unseen_dev") for it in groups[g] for w in it.all_wordings}
    assert not off_limits & set(qs)
    assert never == {w for it in groups["context_only"] for w in it.all_wordings}
    assert set(clusters) <= {it.cluster for items in groups.values() for it in items}


def test_probe_choice_by_grouped_cv_finds_the_informative_layer():
    from lorarag.study.self_knowledge import fit_probe

    rng = np.random.default_rng(1)
    n, hidden = 120, 16
    y = [i % 2 for i in range(n)]
    x = rng.normal(size=(n, 3, hidden)).astype(np.float32)
    x[:, 1, 0] += 3.0 * np.array(y)  # only layer index 1 carries the label
    j, model, fit = fit_probe(x, y, [f"g{i // 6}" for i in range(n)], [4, 8, 12], seed=0)
    assert (j, fit.layer) == (1, 8) and fit.cv_auroc > 0.9
    assert (fit.n_learned, fit.n_never, fit.n_clusters) == (60, 60, 20)
    assert model.predict_proba(x[:, 1])[:, 1][np.array(y) == 1].mean() > 0.8


def test_self_knowledge_refuses_other_generators_and_missing_adapters(cli, tmp_path):
    import yaml

    from tests.test_run_e2e import REPO

    cfg = yaml.safe_load((REPO / "configs/run/ci-tiny.yaml").read_text())
    cfg.update(runs_dir=str(tmp_path / "runs"))
    cfg["train"]["runs_dir"] = str(tmp_path / "runs/train")
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    code, _, err = cli("self-knowledge", str(path))
    assert code != 0 and "no trained adapter for run 'ci-tiny-qwen3'" in err
    cfg["rag"]["generator"]["kind"] = "vllm"
    path.write_text(yaml.safe_dump(cfg))
    code, _, err = cli("self-knowledge", str(path))
    assert code != 0 and "hidden states of a transformers generator" in err
    code, _, err = cli("self-knowledge", str(path), "--split", "val")
    assert code != 0 and "--split is dev or test" in err


def test_disagreement_exact_and_by_token_f1_hand_computed():
    from lorarag.study.self_knowledge import disagreement

    greedy = "The Vice President"
    # "the vice president." normalises equal (F1 1); "the president" F1 = 2*1*(1/2)/(1+1/2) = 2/3
    # (articles dropped: {president} vs {vice, president}); "Ron Paul" F1 0
    exact, f1 = disagreement(greedy, ["the vice president.", "the president", "Ron Paul", "The Vice President"], "en")
    assert exact == pytest.approx(1 - 2 / 4)
    assert f1 == pytest.approx(1 - (1 + 2 / 3 + 0 + 1) / 4)
    assert disagreement(greedy, [greedy] * 3, "en") == (0.0, 0.0)


def test_summarise_reads_every_signal_on_claimed_memories_only():
    from lorarag.study.self_knowledge import SIGNALS, Reading, summarise

    def r(i: int, learned: bool, **s: float) -> Reading:
        base = dict(nll=0.0, probe=0.0, agreement=0.0, agreement_f1=0.0)
        base.update(s)
        return Reading(f"q{i}", f"f{i}", f"c{i}", learned, "a", False, **base)

    # agreement: learned 0.1, 0.4; never 0.3, 0.9 -> pairs (never > learned): 0.3>0.1, 0.9>0.1, 0.9>0.4 = 3 of 4
    # agreement_f1: learned 0.5, 0.2; never 0.6, 0.1 -> 0.6>0.5, 0.6>0.2 = 2 of 4
    rs = [
        r(0, True, nll=0.1, agreement=0.1, agreement_f1=0.5),
        r(1, True, nll=0.2, agreement=0.4, agreement_f1=0.2),
        r(2, False, nll=0.3, agreement=0.3, agreement_f1=0.6),
        r(3, False, nll=0.4, agreement=0.9, agreement_f1=0.1),
    ]
    declined = Reading("q4", "f4", "c4", True, "unknown", True, 9.0, 0.0, 9.0, 0.0)  # left out
    s = summarise(rs + [declined], seed=0)
    assert set(s["signals"]) == set(SIGNALS)
    assert s["signals"]["nll"]["auroc"] == pytest.approx(1.0)
    assert s["signals"]["agreement"]["auroc"] == pytest.approx(0.75)
    assert s["signals"]["agreement_f1"]["auroc"] == pytest.approx(0.5)
    assert s["signals"]["agreement"]["diff_vs_nll"] == pytest.approx(-0.25)
    assert (s["n_learned"], s["n_never"], s["declined_learned"]) == (2, 2, 1)
