"""Abstention on unanswerable questions: recall and precision per system with Wilson CIs
(eval/abstention.py), the target on its lower bound (study/targets.py), the headline's table, and a
SQuAD 2.0-shaped knowledge base through the KB path: its unanswerable questions become test
scenarios, and a replayed routing with `read_support` abstains where the base model's reading of
them is not in the sources. Expected intervals are the Wilson score interval's, worked by hand:
8/10 -> [0.4902, 0.9433], 10/10 -> [0.7225, 1], 10/15 -> [0.4171, 0.8482], 9/10 -> [0.5958, 0.9821]."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lorarag.core.config import load_config
from lorarag.eval.abstention import NO_UNANSWERABLE, abstention, abstention_lines
from lorarag.trained.config import RunConfig
from tests.eval_fixtures import make_item

REPO = Path(__file__).resolve().parent.parent


def _items(system: str, unanswerable: int, abstained: int, answerable: int, declined: int) -> list:
    """`unanswerable` items without a gold answer (the first `abstained` abstained on), `answerable`
    consistent items (the first `declined` declined, the others answered right)."""
    un = [
        make_item(
            system=system,
            qid=f"u{i}",
            fact_id=f"u{i}",
            scenario="unanswerable",
            gold_answers=(),
            context_answer=None,
            answer="" if i < abstained else "About 300.",
            abstained=i < abstained,
        )
        for i in range(unanswerable)
    ]
    return un + [
        make_item(
            system=system, qid=f"a{i}", fact_id=f"a{i}", answer="" if i < declined else "50 km/h", abstained=i < declined
        )
        for i in range(answerable)
    ]


def test_recall_and_precision_count_abstentions_by_hand():
    """10 unanswerable, 8 abstained; 20 answerable, 2 declined: recall 8/10, precision 8/(8 + 2)."""
    a = abstention("lora_rag", _items("lora_rag", 10, 8, 20, 2))
    assert (a.unanswerable, a.answerable, a.declined) == (10, 20, 2)
    assert (a.recall.k, a.recall.n, a.precision.k, a.precision.n) == (8, 10, 8, 10)
    assert a.recall.value == pytest.approx(0.8) and a.precision.value == pytest.approx(0.8)
    assert (a.recall.lo, a.recall.hi) == (pytest.approx(0.4902, abs=1e-4), pytest.approx(0.9433, abs=1e-4))
    # every unanswerable abstained on, but 5 of 20 answerable declined too: recall 10/10, precision 10/15
    b = abstention("verdict", _items("verdict", 10, 10, 20, 5))
    assert (b.recall.value, b.recall.lo, b.recall.hi) == (1.0, pytest.approx(0.7225, abs=1e-4), 1.0)
    assert b.precision.value == pytest.approx(10 / 15)
    assert (b.precision.lo, b.precision.hi) == (pytest.approx(0.4171, abs=1e-4), pytest.approx(0.8482, abs=1e-4))
    # never abstains: recall 0/10, no precision (no abstention to be right or wrong)
    c = abstention("base_rag", _items("base_rag", 10, 0, 20, 0))
    assert c.recall.value == 0.0 and c.precision.n == 0 and c.precision.value != c.precision.value


def test_the_table_puts_each_systems_recall_beside_its_precision_or_says_there_is_nothing_to_count():
    results = {"lora_rag": _items("lora_rag", 10, 8, 20, 2), "base_rag": _items("base_rag", 10, 0, 20, 0)}
    lines = abstention_lines(results, ["lora_rag", "base_rag", "not_run"], "presented")
    assert lines[0] == "### Abstention on unanswerable questions (presented context)"
    assert "| lora_rag | 10 | 0.80 [0.49, 0.94] (8/10) | 20 | 2 | 0.80 [0.49, 0.94] (8/10) |" in lines
    assert "| base_rag | 10 | 0.00 [0.00, 0.28] (0/10) | 20 | 0 | – |" in lines  # Wilson 0/10: upper 0.2775
    assert not any("not_run" in ln for ln in lines)
    answerable_only = {k: [r for r in v if r.gold_answers] for k, v in results.items()}
    none = abstention_lines(answerable_only, ["lora_rag", "base_rag"], "presented")
    assert none[2] == f"The `unanswerable` cell has no items: {NO_UNANSWERABLE}." and not any("|" in ln for ln in none)
    not_asked = abstention_lines(answerable_only, ["lora_rag"], "presented", asked=False)
    assert "does not evaluate the `unanswerable` scenario" in not_asked[2]


def test_the_abstention_target_is_met_on_the_wilson_lower_bound_not_the_rate():
    from lorarag.study.targets import ABSTAIN_TARGET, abstention_rows, target_rows

    (met,) = abstention_rows(_items("l", 10, 10, 20, 0))  # lower 0.7225 >= 0.70
    assert (met.name, met.value, met.met) == (ABSTAIN_TARGET, 1.0, True) and met.bound == "lower 0.72 (Wilson)"
    (missed,) = abstention_rows(_items("l", 10, 9, 20, 0))  # 0.90, but the lower bound is 0.5958
    assert missed.value == pytest.approx(0.9) and not missed.met and missed.bound == "lower 0.60 (Wilson)"
    answerable = _items("l", 0, 0, 20, 0)
    assert abstention_rows(answerable) == []  # a set without unanswerable questions has no such target
    (asked,) = abstention_rows(answerable, asked=True)  # a resample that drew none: undefined, never met
    assert asked.value != asked.value and not asked.met
    # among the demo's targets where the items hold unanswerable ones
    assert ABSTAIN_TARGET in {t.name for t in target_rows([], _items("l", 10, 10, 20, 0))}
    assert ABSTAIN_TARGET not in {t.name for t in target_rows([], answerable)}


def test_every_headline_shows_the_table_world_and_kb_and_the_target_beside_the_others():
    from lorarag.study.headline import headline_markdown, kb_targets, target_values

    def run(system: str, abstained: int, declined: int) -> list:
        out = _items(system, 10, abstained, 20, declined)
        return [make_item(**{**r.__dict__, "knowledge": "unknown" if i % 2 else "known"}) for i, r in enumerate(out)]

    results = {"base_rag": run("base_rag", 0, 0), "lora_rag": run("lora_rag", 8, 2)}
    for name in ("run/cpu-demo.yaml", "run/conflictnq-kb.yaml"):  # the world (contains) and a KB (token F1)
        cfg = load_config(REPO / "configs" / name, RunConfig)
        md = headline_markdown(cfg, results, {})
        assert "### Abstention on unanswerable questions (presented context)" in md, name
        assert "| lora_rag | 10 | 0.80 [0.49, 0.94] (8/10) | 20 | 2 | 0.80 [0.49, 0.94] (8/10) |" in md, name
        assert "| LoRA-RAG, abstains on unanswerable >= 0.70 | 0.80 | lower 0.49 (Wilson) | **MISSED** |" in md, name
        names = [n for n, _, _ in kb_targets(cfg, results["base_rag"], results["lora_rag"])]
        assert names == [n for n, _ in target_values(cfg, results["base_rag"], results["lora_rag"])], name
    # the same KB without unanswerable questions (ConflictNQ's own): the table says so, no target
    answerable = {k: [r for r in v if r.gold_answers] for k, v in results.items()}
    md = headline_markdown(cfg, answerable, {})
    assert f"The `unanswerable` cell has no items: {NO_UNANSWERABLE}." in md
    assert "abstains on unanswerable" not in md


def test_a_squad_shaped_kb_asks_its_unanswerable_questions_and_read_support_abstains_on_them(tmp_path, tiny_models):
    """SQuAD 2.0-shaped paragraphs (tests/squad_shaped.py: one unanswerable question a paragraph)
    through the shipped KB recipe: the test scenarios hold `unanswerable` items in both knowledge
    splits, with no gold answer and sources from the knowledge base. Replayed (eval/reroute.py): the
    verdict calls such sources insufficient and there is no memory, so the default routing has base
    RAG read them; base RAG invents a visitor count the sources do not hold. With `read_support` the
    reading becomes an abstention, an answerable item's reading that the sources hold is kept;
    without it the invented count stands."""
    from lorarag.eval.reroute import reroute
    from lorarag.fallback.config import PolicyConfig
    from lorarag.scenarios.records import load_scenarios
    from lorarag.study.pipeline import prepare_rows
    from tests.squad_shaped import write_squad
    from tests.test_held_out_twins import kb_recipe

    cfg = kb_recipe(tmp_path, write_squad(tmp_path / "data", lang="en", tokens=40), tiny_models["lm"])
    assert "unanswerable" in cfg.eval.scenarios  # the shipped recipe asks them
    assert cfg.fallback.policy.read_support == 1.0  # and its LoRA-RAG keeps only readings the sources hold
    prepare_rows(cfg, echo=lambda _: None)
    test = load_scenarios(Path(cfg.runs_dir) / cfg.name / "scenarios/test.jsonl")
    un = [s for s in test if s.scenario == "unanswerable"]
    assert {s.knowledge for s in un} == {"known", "unknown"}
    assert all(not s.gold_answers and s.presented and s.question.startswith("How many visitors") for s in un)
    (s,) = un[:1]
    (a,) = [x for x in test if x.scenario == "consistent"][:1]

    def lora(sc, verdict: str) -> object:  # no memory after the gate; the verdict alone would abstain
        return make_item(
            system="lora_rag",
            qid=sc.qid,
            fact_id=sc.fact_id,
            scenario=sc.scenario,
            knowledge=sc.knowledge,
            question=sc.question,
            gold_answers=sc.gold_answers,
            context_answer=sc.context_answer,
            final_texts=tuple(p.text for p in sc.presented),
            verdict=verdict,
            flag_score=0.9,
            verdict_probs=(("supported", 0.1), (verdict, 0.9)),
            route="abstain",
            memory_answer=None,
            context_answer_model=None,
            answer="",
            abstained=True,
        )

    records = [lora(s, "insufficient"), lora(a, "irrelevant")]
    readings = {
        s.qid: make_item(system="base_rag", qid=s.qid, answer="About 25,000 visitors a year."),
        a.qid: make_item(system="base_rag", qid=a.qid, answer=f"It is {a.gold_answers[0]}."),
    }
    assert a.gold_answers[0] in " ".join(p.text for p in a.presented)  # the reading the sources hold
    checked = {r.qid: r for r in reroute(records, PolicyConfig(read_support=1.0), "lora_rag_supported", readings)}
    assert (checked[s.qid].route, checked[s.qid].abstained) == ("abstain", True)
    assert (checked[a.qid].route, checked[a.qid].answer) == ("context", f"It is {a.gold_answers[0]}.")
    unchecked = {r.qid: r for r in reroute(records, PolicyConfig(), "lora_rag", readings)}
    assert (unchecked[s.qid].abstained, unchecked[s.qid].answer) == (False, "About 25,000 visitors a year.")
    # the table counts it: the checked routing abstains on the unanswerable item, the default does not
    assert abstention("v", list(checked.values())).recall.k == 1
    assert abstention("d", list(unchecked.values())).recall.k == 0


def test_a_run_warns_where_read_support_meets_sentence_answers_and_not_on_spans():
    """Hand-built dev splits. Span answers ("Ana Ruiz", "2019": 2 and 1 words of their own) draw no
    warning; sentence answers ("It was released on August 8, 2014 via Desura": 6 own words once the
    function words and the question's go, and a 4-word one) do, with the median (5) and the share in
    use. With read_support null, or with no LoRA-RAG to route, there is nothing to warn of."""
    from lorarag.scenarios.records import Scenario
    from lorarag.study.kb_source import read_support_cost

    def item(i: int, question: str, answer: str) -> Scenario:
        return Scenario(
            qid=f"q{i}",
            fact_id=f"f{i}",
            question=question,
            gold_answers=(answer,),
            relevant_ids=(),
            scenario="consistent",
            presented=(),
            context_answer=answer,
        )

    spans = [item(0, "Who leads Vesova?", "Ana Ruiz"), item(1, "When was Vesova founded?", "2019")]
    sentences = [
        item(2, "when was the game made", "It was released on August 8, 2014 via Desura"),
        item(3, "who wrote the song", "Written by Paul Simon in 1964"),
    ]
    cfg = load_config(REPO / "configs/run/conflictnq-kb.yaml", RunConfig)
    assert cfg.fallback.policy.read_support == 1.0
    assert read_support_cost(cfg, spans) is None
    warning = read_support_cost(cfg, sentences)
    assert warning is not None and "(5 words of their own, median)" in warning and "read_support (1)" in warning
    off = cfg.model_copy(
        update={
            "fallback": cfg.fallback.model_copy(
                update={"policy": cfg.fallback.policy.model_copy(update={"read_support": None})}
            )
        }
    )
    assert read_support_cost(off, sentences) is None
    no_lora = cfg.model_copy(update={"systems": [s for s in cfg.systems if s.kind != "lora_rag"]})
    assert read_support_cost(no_lora, sentences) is None


def _widened(squad: Path, sentences: int) -> Path:
    """The SQuAD file with every answer widened to the sentence that holds it and, with `sentences` 2,
    the sentence after it (a longer answer, as Natural Questions' are); still an exact span."""
    data = json.loads(squad.read_text())
    for article in data["data"]:
        for para in article["paragraphs"]:
            text = para["context"]
            for qa in para["qas"]:
                for a in qa["answers"]:
                    start = text.rfind(". ", 0, a["answer_start"])
                    start = 0 if start < 0 else start + 2
                    end = a["answer_start"] + len(a["text"]) - 1
                    for _ in range(sentences):
                        end = text.find(".", end + 1) if end + 1 < len(text) else -1
                        if end < 0:
                            end = len(text) - 1
                            break
                    a["text"], a["answer_start"] = text[start : end + 1], start
    out = squad.with_name(f"sentences{sentences}.json")
    out.write_text(json.dumps(data))
    return out


def test_a_run_says_so_before_training_where_the_kb_answers_at_length(tmp_path, tiny_models):
    """The SQuAD-shaped KB through the shipped KB recipe three ways: as spans; each answer widened to
    its sentence ("The Clock Tower of Arden was completed in 1812.", whose words but the year are the
    question's, so `read_support` checks the year alone); and widened to two sentences, the second one
    the answer's own words. Stage 3 warns on the two-sentence answers only, before any training."""
    from lorarag.study.pipeline import prepare_rows
    from tests.squad_shaped import write_squad
    from tests.test_held_out_twins import kb_recipe

    squad = write_squad(tmp_path / "data", lang="en", tokens=40)
    sets = {"spans": squad, "sentences": _widened(squad, 1), "two sentences": _widened(squad, 2)}
    said: dict[str, list[str]] = {}
    for kind, path in sets.items():
        cfg = kb_recipe(tmp_path / kind, path, tiny_models["lm"])
        lines: list[str] = []
        prepare_rows(cfg, echo=lines.append)
        said[kind] = [ln.strip() for ln in lines if "read_support" in ln]
    assert said["spans"] == [] and said["sentences"] == []
    assert len(said["two sentences"]) == 1 and said["two sentences"][0].startswith("warning: the dev split's answers")
