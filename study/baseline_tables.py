"""LoRA-RAG against the baselines that know what the LoRA knows, per scenario x knowledge cell.

A base-vs-LoRA table wins every known-fact cell by knowing, not by detecting. This table sets
LoRA-RAG beside every system of the run on the same items and context mode: closed-book LoRA
(always memory), base RAG (always the context), and the knowledge-sharing baselines
(`memory_or_context`, `rag_sft`: the same facts fine-tuned to answer from the sources, and
astute_rag / prompted_detection / closed_book with `adapter: lora`).
Per cell it names the best deployable system (the `oracle` kind reads the gold chunk and is left
out) and gives LoRA-RAG minus the best knowledge-sharing baseline with a paired 95 % CI that
resamples clusters (organisations or documents).

The per-item oracle router takes, for each item, closed-book LoRA's answer when it is right, else
base RAG's: the most a router between the adapter's memory and base RAG's reading of the context
can score. `captured` is the share of its gain over the better pure strategy that LoRA-RAG realises:
(LoRA-RAG − best pure) / (router − best pure); 1 is a perfect router, 0 or less no better than always
taking one side. It is left out where the router gains less than `MIN_ROUTER_GAIN` (a ratio over a
gain of one or two items in 120 says nothing: 0.37 / 0.02 read 15.3 on research.yaml's consistent
never-learned cell). LoRA-RAG reads the context with the adapter, so it can score above the router
(a better reader than base RAG, not a better router); such a cell says `> router (+d)`.

`label` writes the knowledge column from a cell's items: the KB headline marks known cells asked
in a wording training used (study/headline.wording_label).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from lorarag.eval.records import ItemResult
from lorarag.eval.scoring import Score
from lorarag.eval.stats import paired_bootstrap
from lorarag.scenarios.records import SCENARIO_TYPES
from lorarag.trained.config import RunConfig, SystemConfig

# the oracle router's gain over the better pure strategy below which `captured` is not reported
MIN_ROUTER_GAIN = 0.05
# LoRA-RAG's lead over the router from which `captured` says `> router`: half the column's last digit
ROUTER_LEAD = 0.005

Label = Callable[[str, Sequence[ItemResult]], str]  # (knowledge, a cell's items) -> the knowledge column


def _cell(items: Sequence[ItemResult], s: str, k: str) -> dict[str, ItemResult]:
    return {r.qid: r for r in items if r.scenario == s and r.knowledge == k}


def _n(x: float) -> str:
    return "–" if x is None or math.isnan(x) else f"{x:.2f}"


def comparable(cfg: RunConfig, results: Mapping[str, Sequence[ItemResult]], ctx: str, lora: str) -> list[SystemConfig]:
    """The systems read on the same context mode as `lora` (closed-book ones need none)."""
    return [
        s
        for s in cfg.systems
        if s.name in results and s.name != lora and (s.kind == "closed_book" or s.context == ctx or s.kind == "oracle")
    ]


def captured(mean: float, router: float, pure: Sequence[float]) -> str:
    """The `captured` column: (LoRA-RAG − best pure) / (router − best pure), `> router (+d)` where
    LoRA-RAG scores above the router by at least ROUTER_LEAD (a lead that prints as +0.00 is none),
    `–` without both pure strategies or where the router gains under MIN_ROUTER_GAIN over the better
    of them. Accuracies in [0, 1]."""
    if not pure:
        return "–"
    if mean - router >= ROUTER_LEAD - 1e-9:
        return f"> router ({mean - router:+.2f})"
    if router - max(pure) >= MIN_ROUTER_GAIN - 1e-9:
        return _n((mean - max(pure)) / (router - max(pure)))
    return "–"


def router_scores(
    memory: Mapping[str, ItemResult], context: Mapping[str, ItemResult], qids: Sequence[str], score: Score
) -> np.ndarray:
    """Per item: the better of the memory's and the context's score (the oracle router)."""
    return np.array([max(score(memory[q]), score(context[q])) for q in qids])


def baseline_table(
    cfg: RunConfig,
    results: Mapping[str, Sequence[ItemResult]],
    ctx: str,
    base: str,
    lora: str,
    score: Score,
    label: Label | None = None,
) -> list[str]:
    """Markdown lines: each system per cell, the oracle router, the best system, LoRA-RAG minus the
    best knowledge-sharing baseline [paired 95 % CI] and the share of the router's gain captured."""
    others = comparable(cfg, results, ctx, lora)
    sharing = [s.name for s in others if s.uses_adapter and s.kind != "lora_rag"]  # a policy variant is LoRA-RAG
    cb_lora = next((s.name for s in others if s.kind == "closed_book" and s.adapter is not None), None)
    names = [s.name for s in others]
    head = [
        "scenario",
        "knowledge",
        "n",
        lora,
        *names,
        "oracle router",
        "best (deployable)",
        f"{lora} − best knowledge-sharing [95% CI]",
        "captured",
    ]
    lines = [
        f"### {lora} against every baseline ({ctx} context)",
        "",
        "Knowledge-sharing baselines (know what the LoRA knows): "
        + (", ".join(sharing) or "none in this run")
        + ". The oracle router takes closed-book LoRA's answer where it is right, else base RAG's.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for s in SCENARIO_TYPES:
        for k in ("known", "unknown"):
            mine = _cell(results[lora], s, k)
            if not mine:
                continue
            cells = {n: _cell(results[n], s, k) for n in names}
            qids = [q for q in sorted(mine) if all(q in c for c in cells.values())]
            if not qids:
                continue
            sc = {n: float(np.mean([score(cells[n][q]) for q in qids])) for n in names}
            own = np.array([score(mine[q]) for q in qids])
            mean = float(own.mean())
            router = math.nan
            pure: list[float] = []
            if cb_lora and base in cells:
                router = float(router_scores(cells[cb_lora], cells[base], qids, score).mean())
                pure = [sc[cb_lora], sc[base]]
            deployable = {
                lora: mean,
                **{n: v for n, v in sc.items() if next(x for x in others if x.name == n).kind != "oracle"},
            }
            top = max(deployable.values())
            tied = [n for n, v in deployable.items() if v >= top - 1e-9]
            best = tied[0] if len(tied) == 1 else f"tie: {', '.join(tied[:3])}" + (" …" if len(tied) > 3 else "")
            diff = "–"
            rivals = [n for n in sharing if n in sc]
            if rivals:
                rival = max(rivals, key=lambda n: sc[n])
                d = paired_bootstrap(
                    np.array([score(cells[rival][q]) for q in qids]),
                    own,
                    resamples=cfg.eval.bootstrap,
                    seed=cfg.eval.seed,
                    clusters=[mine[q].unit for q in qids],
                )
                ci = "" if math.isnan(d.lo) else f" [{d.lo:+.2f}, {d.hi:+.2f}]"
                diff = f"{d.diff:+.2f}{ci} vs {rival}"
            cell = label(k, [mine[q] for q in qids]) if label else k
            lines.append(
                "| "
                + " | ".join(
                    [
                        s,
                        cell,
                        str(len(qids)),
                        _n(mean),
                        *(_n(sc[n]) for n in names),
                        _n(router),
                        best,
                        diff,
                        captured(mean, router, pure),
                    ]
                )
                + " |"
            )
    return lines + [""]


def abstention_table(
    cfg: RunConfig, per_seed: Sequence[Mapping[str, Sequence[ItemResult]]], ctx: str, lora: str, label: Label | None = None
) -> list[str]:
    """`declined_table` for `lora` and every deployable system of its baseline table, over one
    run's results (`[results]`) or several seeds' (`lorarag seeds`)."""
    names = [lora, *(s.name for s in comparable(cfg, per_seed[0], ctx, lora) if s.kind != "oracle")]
    return declined_table(per_seed, names, ctx, label)


def declined_table(
    per_seed: Sequence[Mapping[str, Sequence[ItemResult]]], names: Sequence[str], ctx: str, label: Label | None = None
) -> list[str]:
    """Markdown lines: per cell, how many answerable items each system declined (abstained on),
    summed over the seeds, out of the cell's items over the seeds. The scores count an abstention as
    a miss; this says which misses were declines, since a reader taught to decline sources without
    the answer (RAG-SFT) can decline right ones too. Declining an irrelevant source is defensible;
    declining a consistent one is over-fallback. A cell keeps the items every system answered at
    that seed; `names[0]` is the system whose items define the cells. [] when nothing is declined."""
    rows, anyone = [], False
    for s in SCENARIO_TYPES:
        for k in ("known", "unknown"):
            n, declined, first = 0, [0] * len(names), None
            for results in per_seed:
                cells = [_cell(results[m], s, k) for m in names]
                qids = [q for q in sorted(cells[0]) if all(q in c for c in cells) and cells[0][q].gold_answers]
                n += len(qids)
                declined = [d + sum(c[q].abstained for q in qids) for d, c in zip(declined, cells)]
                first = first or [cells[0][q] for q in qids]
            if not n:
                continue
            anyone = anyone or any(declined)
            rows.append("| " + " | ".join([s, label(k, first) if label else k, str(n), *map(str, declined)]) + " |")
    if not anyone:
        return []
    over = f", summed over {len(per_seed)} seeds" if len(per_seed) > 1 else ""
    return [
        f"### Declined answerable items ({ctx} context{over})",
        "",
        "Abstentions on items that have an answer, each counted as a miss above: declining an irrelevant "
        "source is defensible, declining a consistent one is over-fallback.",
        "",
        "| scenario | knowledge | n | " + " | ".join(names) + " |",
        "|" + "---|" * (3 + len(names)),
        *rows,
        "",
    ]


def variant_table(
    cfg: RunConfig,
    results: Mapping[str, Sequence[ItemResult]],
    ctx: str,
    lora: str,
    score: Score,
    label: Label | None = None,
) -> list[str]:
    """Markdown lines: each policy variant of `lora` (a lora_rag system with its own `policy`, on the
    same verdicts: eval/reroute.py) minus LoRA-RAG per cell [paired 95 % CI over clusters], and how
    many items it routes or answers differently. [] when the run lists none."""
    variants = [s for s in cfg.systems if s.kind == "lora_rag" and s.is_variant and s.context == ctx and s.name in results]
    if not variants:
        return []
    lines = [
        f"### Routing ablations of {lora} ({ctx} context)",
        "",
        "The same verdicts, doubt and gate, routed by another policy. "
        + "; ".join(
            f"{v.name}: "
            + ", ".join(
                f"{k}={val}" for k, val in v.policy.model_dump().items() if val != cfg.fallback.policy.model_dump()[k]
            )
            for v in variants
        )
        + ".",
        "",
        "| scenario | knowledge | n | "
        + lora
        + " | "
        + " | ".join(f"{v.name} | {v.name} − {lora} [95% CI] | answered otherwise" for v in variants)
        + " |",
        "|" + "---|" * (4 + 3 * len(variants)),
    ]
    for s in SCENARIO_TYPES:
        for k in ("known", "unknown"):
            mine = _cell(results[lora], s, k)
            cells = {v.name: _cell(results[v.name], s, k) for v in variants}
            qids = [q for q in sorted(mine) if all(q in c for c in cells.values())]
            if not qids:
                continue
            own = np.array([score(mine[q]) for q in qids])
            row = [s, label(k, [mine[q] for q in qids]) if label else k, str(len(qids)), _n(float(own.mean()))]
            for v in variants:
                theirs = np.array([score(cells[v.name][q]) for q in qids])
                d = paired_bootstrap(
                    own, theirs, resamples=cfg.eval.bootstrap, seed=cfg.eval.seed, clusters=[mine[q].unit for q in qids]
                )
                ci = "" if math.isnan(d.lo) else f" [{d.lo:+.2f}, {d.hi:+.2f}]"
                moved = sum(
                    (cells[v.name][q].route, cells[v.name][q].answer) != (mine[q].route, mine[q].answer) for q in qids
                )
                row += [_n(float(theirs.mean())), f"{d.diff:+.2f}{ci}", str(moved)]
            lines.append("| " + " | ".join(row) + " |")
    return lines + [""]
