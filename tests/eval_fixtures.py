"""Hand-built ItemResult records for the eval tests (defaults: a correct consistent item)."""

from __future__ import annotations

from typing import Any

from lorarag.eval.records import ItemResult

_DEFAULTS: dict[str, Any] = dict(
    system="sys",
    qid="q1",
    fact_id="f1",
    scenario="consistent",
    knowledge="known",
    language="en",
    question="What is the speed limit?",
    gold_answers=("50 km/h",),
    context_answer="50 km/h",
    relevant_ids=("kb1",),
    target_ids=("kb1",),
    retrieved_ids=("kb1", "kb2", "kb3"),
    final_ids=("kb1", "kb2"),
    final_texts=("The limit is 50 km/h.", "Other text."),
    answer="50 km/h",
    abstained=False,
    cited=("S1",),
    bad_citations=(),
    verdict=None,
    verdict_score=None,
    flag_score=None,
    route=None,
    context_answer_model=None,
    memory_answer=None,
    closed_book_answer=None,
    latency_s=0.1,
)


def make_item(**over: Any) -> ItemResult:
    """An ItemResult with test defaults overridden by keyword."""
    data = dict(_DEFAULTS)
    data.update(over)
    return ItemResult(**data)


SYNTHETIC_SYSTEMS = ("closed_book_base", "closed_book_lora", "base_rag", "lora_rag", "prompted_detection", "oracle")
_CITIES = ("Aarhus", "Busan", "Leipzig", "Porto", "Nagoya", "Tartu", "Lyon", "Quito", "Perth", "Cork")
_VERDICTS = ("supported", "conflicting", "outdated", "irrelevant", "insufficient")


def synthetic_run(n_items: int, systems: tuple[str, ...] = SYNTHETIC_SYSTEMS, seed: int = 0) -> dict[str, list[ItemResult]]:
    """{system: [ItemResult]} for `n_items` made-up items of the demo world's shape (two given chunks,
    a perturbed copy of the gold chunk in factual_error/outdated items, verdicts and gate readings
    for the LoRA systems), with rates of right answers loosely like the CPU demo's. For the browser
    test's scale run and the docs' screenshots; no model is involved."""
    import random

    rng = random.Random(seed)
    scen = ("consistent", "factual_error", "outdated", "irrelevant")
    out: dict[str, list[ItemResult]] = {s: [] for s in systems}
    for i in range(n_items):
        sc, kn = scen[i % 4], ("known", "unknown")[(i // 4) % 2]
        lang = "zh" if i % 7 == 0 else "en"
        org, gold = f"org{i // 8:05d}", _CITIES[(i // 8) % 10]  # one fact per org, asked 8 ways
        wrong = _CITIES[(i // 8 + 3) % 10]
        gid = f"orgs/{org}/profile.md#2"
        gold_text = f"{org.capitalize()} Labs has its headquarters in {gold}, where it moved after its founding."
        if sc in ("factual_error", "outdated"):
            first = (gid + ("~fe" if sc == "factual_error" else "~old2021"), gold_text.replace(gold, wrong))
        elif sc == "irrelevant":
            first = (
                f"orgs/{org}/profile.md#4",
                f"For its most recent fiscal year, {org} reported a profit of $15.1 million.",
            )
        else:
            first = (gid, gold_text)
        other = (f"orgs/{org}/archive-2021.md#1", f"In 2021, {org} Labs opened an office in {_CITIES[(i // 8 + 5) % 10]}.")
        target = (first[0],) if sc != "irrelevant" else ()
        q = f"Which city is home to {org} Labs's headquarters? (item {i})"
        for s in systems:
            closed = s.startswith("closed_book")
            lora = s in ("lora_rag", "prompted_detection")
            p_right = {"consistent": 0.95, "factual_error": 0.1, "outdated": 0.15, "irrelevant": 0.3}[sc]
            if lora and kn == "known":
                p_right = {"consistent": 0.93, "factual_error": 0.85, "outdated": 0.9, "irrelevant": 0.9}[sc]
            if closed:
                p_right = 0.8 if (kn == "known" and s.endswith("lora")) else 0.05
            right = rng.random() < p_right
            answer = gold if right else (wrong if sc in ("factual_error", "outdated") and rng.random() < 0.7 else "unknown")
            flawed = sc != "consistent"
            flag = min(0.999, max(0.001, rng.betavariate(5, 2) if flawed else rng.betavariate(2, 5))) if lora else None
            verdict = (rng.choice(_VERDICTS[1:]) if flag > 0.5 else "supported") if lora else None
            # the chosen flawed label takes most of P(flawed); supported keeps 1 - P(flawed)
            probs = (
                (
                    (("supported", round(1 - flag, 4)),)
                    + tuple(
                        (
                            v,
                            round(
                                flag * (0.7 if v == verdict or (verdict == "supported" and v == "conflicting") else 0.1), 4
                            ),
                        )
                        for v in _VERDICTS[1:]
                    )
                )
                if lora
                else ()
            )
            route = ("fallback" if flag > 0.5 else "context") if lora else None
            doubt = max(0.05, rng.gauss(1.0, 0.35) if kn == "known" else rng.gauss(2.1, 0.55))
            notes = (
                (
                    ("p_unknown=0.0100", f"gate doubt (closed_book_nll)={doubt:.4f}")
                    + (("gate: memory 'x' -> unknown",) if doubt > 1.6 else ())
                )
                if s == "lora_rag"
                else ()
            )
            raw = (
                (
                    f"memory: {gold if kn == 'known' else 'unknown'} | source: {wrong if flawed else gold} | "
                    f"verdict: {verdict} | answer: {answer}"
                )
                if lora
                else answer
            )
            final = () if closed else (first, other)
            out[s].append(
                make_item(
                    system=s,
                    qid=f"{org}/headquarters/p{i % 3}/{sc}/{i}",
                    fact_id=f"{org}/headquarters",
                    scenario=sc,
                    knowledge=kn,
                    language=lang,
                    question=q,
                    gold_answers=(gold,),
                    context_answer=None if sc == "irrelevant" else (wrong if sc in ("factual_error", "outdated") else gold),
                    relevant_ids=(gid,),
                    target_ids=target,
                    retrieved_ids=()
                    if closed
                    else (
                        first[0],
                        other[0],
                        f"orgs/{org}/profile.md#3",
                        f"orgs/{org}/archive-2023.md#2",
                        "orgs/org00001/profile.md#1",
                    ),
                    final_ids=tuple(c for c, _ in final),
                    final_texts=tuple(t for _, t in final),
                    answer=answer,
                    abstained=False,
                    cited=("S1",) if final else (),
                    verdict=verdict,
                    verdict_score=dict(probs)[verdict] if lora else None,
                    flag_score=None if flag is None else round(flag, 4),
                    route=route,
                    closed_book_answer=answer,
                    notes=notes,
                    raw_output=raw,
                    verdict_probs=probs,
                    latency_s=round(rng.uniform(0.02, 0.4), 3),
                )
            )
    return out
