"""`lorarag self-knowledge RUN_CONFIG`: which doubt signal tells a fact the LoRA learned from one it
never learned, read on the gate's dev split of a trained run.

Four signals (SIGNALS), each read on the same questions and higher = more likely never learned:
- `nll`: the gate's own (fallback/gate.py), the mean NLL (nats/token) of the greedy closed-book answer;
- `probe`: P(never learned) from a logistic probe on the LoRA's hidden state at the closed-book
  prompt's last token (a P(IK)-style probe: read before any answer token). It is trained on
  training-visible questions only: known (taught and tested) facts in the wordings their SFT rows
  use, against context-only facts (shown in RAG rows beside their source, never taught as a
  memory). Its layer and L2 strength are chosen by grouped 5-fold CV on those, never on dev;
- `agreement`: 1 - the share of `samples` sampled closed-book answers (temperature `temperature`)
  equal to the greedy one after SQuAD normalisation (a semantic-consistency signal);
- `agreement_f1`: 1 - the mean token F1 of the sampled answers against the greedy one: agreement
  that credits a sampled sentence for the words it shares, where exact agreement needs all of them.

The gate judges only memories the LoRA claims, so each AUROC is over dev items whose greedy answer
is not "unknown"; the difference against `nll` has a 95 % CI from a stratified cluster bootstrap
(eval/stats.paired_auroc: an organisation's questions move together). `--split test` reads the
test split's consistent known and never-learned questions instead, to report once.

Written to `<run>/self_knowledge/<split>.{jsonl,json}`: one reading per question and the summary,
stamped with the adapter's content hash, the generator and the settings.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np

from lorarag.core.errors import ConfigError, UserError
from lorarag.eval.answer_metrics import normalize_text, token_f1
from lorarag.eval.stats import paired_auroc
from lorarag.fallback.format import is_unknown
from lorarag.fallback.gate import adapter_sha256, generator_id
from lorarag.fallback.system import closed_book, closed_book_conversation
from lorarag.rag.generators.registry import build_generator
from lorarag.scenarios.records import Scenario
from lorarag.study.kb import KB, wording_plan
from lorarag.study.pipeline import studied_run
from lorarag.study.run_folder import Echo
from lorarag.trained.components import build_parts, with_adapter_name
from lorarag.trained.config import RunConfig

SIGNALS = ("nll", "probe", "agreement", "agreement_f1")
LAYER_FRACTIONS = (0.25, 0.5, 0.75, 1.0)  # of the model's depth: the probe's candidate layers
PROBE_C = (0.01, 0.1, 1.0)  # candidate inverse L2 strengths (features standardised first)
ADAPTER = "lora"  # the trained adapter's name in the generator (trained/components.py)


@dataclass(frozen=True)
class Reading:
    """One question's doubt readings (SIGNALS)."""

    question: str
    fact_id: str
    cluster: str
    learned: bool  # a taught fact (known dev / known test) rather than a never-learned one
    answer: str  # the greedy closed-book answer
    declined: bool  # that answer is "unknown": no memory for the gate to judge
    nll: float
    probe: float
    agreement: float  # 1 - share of sampled answers equal to the greedy one
    agreement_f1: float  # 1 - mean token F1 of the sampled answers against the greedy one


@dataclass(frozen=True)
class ProbeFit:
    """The chosen probe and how it was chosen (grouped CV on training-visible questions)."""

    layer: int
    c: float
    cv_auroc: float
    n_learned: int
    n_never: int
    n_clusters: int


def probe_questions(kb: KB, plan: dict) -> tuple[list[str], list[int], list[str]]:
    """Training-visible questions for the probe: (question, 1 = never learned, cluster). Known
    (tested) facts in the wordings their SFT rows use; context-only facts in every wording. No gate
    dev, test or never-learned fact is read."""
    qs, ys, cl = [], [], []
    for it in kb.groups.get("known", []):
        p = plan.get(it.qid)
        for w in p.trained if p is not None else it.all_wordings:
            qs.append(w), ys.append(0), cl.append(it.cluster or it.qid)
    for it in kb.groups.get("context_only", []):
        for w in it.all_wordings:
            qs.append(w), ys.append(1), cl.append(it.cluster or it.qid)
    if not (0 in ys and 1 in ys):
        raise UserError(
            "the probe needs known and context-only training facts: this split has "
            f"{ys.count(0)} known and {ys.count(1)} context-only questions"
        )
    return qs, ys, cl


def fit_probe(x: np.ndarray, y: list[int], groups: list[str], layers: list[int], seed: int):
    """(fitted scaler+logistic pipeline, ProbeFit): the (layer, C) of best mean AUROC over grouped
    5-fold CV (folds never split a cluster), refitted on every row. x: (rows, layers, hidden)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score
    from sklearn.model_selection import GroupKFold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    y_arr, g_arr = np.asarray(y), np.asarray(groups)
    folds = list(GroupKFold(n_splits=min(5, len(set(groups)))).split(x, y_arr, g_arr))

    def model(c: float):
        return make_pipeline(
            StandardScaler(), LogisticRegression(C=c, class_weight="balanced", max_iter=5000, random_state=seed)
        )

    best: tuple[float, int, float] | None = None
    for j in range(len(layers)):
        for c in PROBE_C:
            aucs = [
                roc_auc_score(y_arr[te], model(c).fit(x[tr, j], y_arr[tr]).predict_proba(x[te, j])[:, 1])
                for tr, te in folds
                if len(set(y_arr[te])) == 2 and len(set(y_arr[tr])) == 2
            ]
            score = float(np.mean(aucs)) if aucs else float("nan")
            if best is None or score > best[0]:
                best = (score, j, c)
    assert best is not None
    score, j, c = best
    fit = ProbeFit(layers[j], c, score, int((y_arr == 0).sum()), int((y_arr == 1).sum()), len(set(groups)))
    return j, model(c).fit(x[:, j], y_arr), fit


def _items(
    split: str, test: list[Scenario], dev_known: list[Scenario], dev_unseen: list[Scenario]
) -> list[tuple[Scenario, bool]]:
    if split == "dev":
        return [(s, True) for s in dev_known] + [(s, False) for s in dev_unseen]
    seen: set[str] = set()
    out = []
    for s in test:
        if s.scenario == "consistent" and s.question not in seen:
            seen.add(s.question)
            out.append((s, s.knowledge == "known"))
    return out


def compare_signals(
    cfg: RunConfig, *, split: Literal["dev", "test"] = "dev", samples: int = 8, temperature: float = 1.0, echo: Echo = print
) -> dict:
    """Read the SIGNALS on `split` of the run's trained adapter; write and return the summary."""
    if cfg.rag.generator.kind != "transformers":
        raise ConfigError(
            f"the probe reads hidden states of a transformers generator; rag.generator.kind is {cfg.rag.generator.kind!r}"
        )
    if samples < 2 or temperature <= 0:
        raise UserError("agreement needs --samples >= 2 and --temperature > 0")
    run = studied_run(cfg, echo)
    paths, adapter, src = run.paths, run.adapter, run.src
    items = _items(split, run.test, run.dev_known, run.dev_unseen)
    owners = src.owners()
    questions = [s.question for s, _ in items]
    gen = build_parts(cfg, run.retriever, adapter, src.chunks).generator
    n_layers = gen.inner.model.config.num_hidden_layers
    layers = sorted({max(1, round(n_layers * f)) for f in LAYER_FRACTIONS})

    echo(f"greedy closed-book answers and NLL: {len(questions)} {split} questions")
    cb = closed_book(gen, ADAPTER, questions)
    pq, py, pg = probe_questions(src.kb, wording_plan(cfg, src.kb))
    echo(f"probe: hidden states of {len(pq)} training-visible questions at layers {layers}")
    x_train = gen.last_token_states([closed_book_conversation(q) for q in pq], adapter=ADAPTER, layers=layers)
    j, probe, fit = fit_probe(x_train, py, pg, layers, cfg.eval.seed)
    echo(f"          chosen: layer {fit.layer}, C {fit.c} (grouped CV AUROC {fit.cv_auroc:.3f})")
    x_eval = gen.last_token_states([closed_book_conversation(q) for q in questions], adapter=ADAPTER, layers=layers)
    p_never = probe.predict_proba(x_eval[:, j])[:, 1]
    gen.close()

    echo(f"agreement: {samples} samples at temperature {temperature} per question")
    import torch

    torch.manual_seed(cfg.eval.seed)
    sampler = build_generator(
        with_adapter_name(cfg.rag.generator, str(adapter)).model_copy(update={"temperature": temperature})
    )
    drawn = []
    for s in range(0, len(questions), 16):
        drawn += closed_book(sampler, ADAPTER, [q for q in questions[s : s + 16] for _ in range(samples)])
        echo(f"          {min(s + 16, len(questions))}/{len(questions)} questions sampled")
    sampler.close()
    readings = []
    for i, ((s, learned), c) in enumerate(zip(items, cb)):
        exact, f1 = disagreement(c.answer, [d.answer for d in drawn[i * samples : (i + 1) * samples]], s.language)
        readings.append(
            Reading(
                s.question,
                s.fact_id,
                s.cluster or owners.get(s.question, (s.fact_id, s.fact_id))[1],
                learned,
                c.answer,
                is_unknown(c.answer),
                c.nll,
                float(p_never[i]),
                exact,
                f1,
            )
        )
    summary = summarise(readings, seed=cfg.eval.seed)
    summary.update(
        split=split,
        probe=asdict(fit),
        samples=samples,
        temperature=temperature,
        adapter=adapter_sha256(adapter),
        generator=generator_id(cfg.rag.generator),
    )
    out = paths.root / "self_knowledge"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{split}.jsonl").write_text(
        "".join(json.dumps(asdict(r), ensure_ascii=False) + "\n" for r in readings), encoding="utf-8"
    )
    (out / f"{split}.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    echo(table(summary))
    echo(f"written: {out / split}.jsonl, .json")
    return summary


def disagreement(greedy: str, sampled: list[str], language: str) -> tuple[float, float]:
    """(1 - share of `sampled` equal to `greedy` after SQuAD normalisation, 1 - their mean token F1
    against `greedy`): the `agreement` and `agreement_f1` readings of one question."""
    g = normalize_text(greedy, language)
    same = sum(normalize_text(a, language) == g for a in sampled)
    f1 = sum(token_f1(a, [greedy], language) for a in sampled)
    return 1 - same / len(sampled), 1 - f1 / len(sampled)


def summarise(readings: list[Reading], *, seed: int = 0) -> dict:
    """Per signal: AUROC on claimed memories (never learned = positive) and its paired difference
    from `nll` with a stratified cluster-bootstrap 95 % CI; plus the counts behind them."""
    claimed = [r for r in readings if not r.declined]
    y = np.array([not r.learned for r in claimed])
    clusters = [r.cluster for r in claimed]
    base = np.array([r.nll for r in claimed])
    out: dict = {
        "n_learned": int((~y).sum()),
        "n_never": int(y.sum()),
        "clusters_learned": len({r.cluster for r in claimed if r.learned}),
        "clusters_never": len({r.cluster for r in claimed if not r.learned}),
        "declined_learned": sum(r.declined and r.learned for r in readings),
        "declined_never": sum(r.declined and not r.learned for r in readings),
        "signals": {},
    }
    for name in SIGNALS:
        d = paired_auroc(base, np.array([getattr(r, name) for r in claimed]), y, clusters, seed=seed)
        out["signals"][name] = {"auroc": d.b, "diff_vs_nll": d.diff, "lo": d.lo, "hi": d.hi}
    return out


def table(summary: dict) -> str:
    """The summary as a markdown table."""
    lines = [
        f"{summary.get('split', '')} claimed memories: {summary['n_learned']} learned "
        f"({summary['clusters_learned']} clusters) vs {summary['n_never']} never learned "
        f"({summary['clusters_never']} clusters); declined: {summary['declined_learned']} learned, "
        f"{summary['declined_never']} never learned",
        "",
        "| signal | AUROC | vs nll [95 % CI] |",
        "|---|---|---|",
    ]
    for name, s in summary["signals"].items():
        diff = "—" if name == "nll" else f"{s['diff_vs_nll']:+.3f} [{s['lo']:+.3f}, {s['hi']:+.3f}]"
        lines.append(f"| {name} | {s['auroc']:.3f} | {diff} |")
    return "\n".join(lines)
