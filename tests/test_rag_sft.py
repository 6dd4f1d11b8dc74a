"""RAG-SFT: the LoRA's rows re-posed as grounded base-RAG rows, the second adapter trained from them,
and its system beside LoRA-RAG in the headline's baselines table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lorarag.core.config import load_config
from lorarag.fallback.format import SYSTEM_RAG, SourceText, rag_user_turn
from lorarag.rag.config import PromptConfig, RetrievalConfig
from lorarag.rag.generators.base import Generation
from lorarag.rag.prompt import ABSTAIN, SYSTEM, PromptBuilder, prompt_passages, prompt_question
from lorarag.rag.records import Chunk
from lorarag.rag.system import RAGSystem
from lorarag.scenarios.records import PresentedChunk, Scenario
from lorarag.train.rag_sft import KIND, rag_sft_rows, summary
from lorarag.train.sft import LeakError, SFTRow, knowledge_row, rag_row
from lorarag.trained.config import RunConfig, SystemConfig
from lorarag.trained.contexts import ScenarioContexts

REPO = Path(__file__).resolve().parent.parent
GOLD = "Vesova Dynamics has its headquarters in Tartu,\nwhere most of its engineering staff work."
FAKE = "Vesova Dynamics has its headquarters in Tallinn,\nwhere most of its engineering staff work."
OTHER = "Brinuna Logistics was founded in 1998 by three hauliers."
Q = "Where is Vesova Dynamics headquartered?"


def _scenario(
    kind: str, presented: tuple[PresentedChunk, ...], context_answer: str | None, q: str = Q, knowledge: str = "known"
) -> Scenario:
    return Scenario(
        qid=f"org1/hq/p0/{kind}",
        fact_id="org1/hq",
        question=q,
        gold_answers=("Tartu",),
        relevant_ids=("org1#0",),
        scenario=kind,
        presented=presented,
        context_answer=context_answer,
        knowledge=knowledge,
    )


FACTUAL_ERROR = _scenario(
    "factual_error",
    (PresentedChunk("org1#0~fe", FAKE, "orgs/org1.md", replaces="org1#0"), PresentedChunk("org2#0", OTHER, "orgs/org2.md")),
    "Tallinn",
)
IRRELEVANT = _scenario("irrelevant", (PresentedChunk("org2#0", OTHER, "orgs/org2.md"),), None)
CONSISTENT = _scenario("consistent", (PresentedChunk("org1#0", GOLD, "orgs/org1.md"),), "Tartu")
KB = {
    "org1#0": Chunk("org1#0", "org1", "orgs/org1.md", GOLD, 0, len(GOLD), heading_path=("Vesova (HQ)", "Offices")),
    "org2#0": Chunk("org2#0", "org2", "orgs/org2.md", OTHER, 0, len(OTHER), heading_path=("Brinuna",)),
}
PROMPTS = PromptBuilder(PromptConfig())


def _rows() -> list[SFTRow]:
    return [
        knowledge_row(Q, "Tartu", "org1/hq"),
        rag_row(FACTUAL_ERROR, knows=True),
        rag_row(IRRELEVANT, True),
        knowledge_row(Q, "Tartu", "org1/hq"),
        rag_row(CONSISTENT, knows=False),
    ]


def test_conflict_aware_rows_become_grounded_rows_answering_what_the_sources_state():
    rows = _rows()
    assert rows[1].messages[2][1].endswith("verdict: conflicting | answer: Tartu")  # the LoRA's target
    out = rag_sft_rows(rows, PROMPTS, KB)
    assert len(out) == len(rows)
    assert out[0] == rows[0] and out[3] == rows[3]  # closed-book knowledge rows unchanged, in place
    fe, irr, cons = out[1], out[2], out[4]
    assert [r.kind for r in (fe, irr, cons)] == [KIND] * 3 and all(r.verdict is None for r in (fe, irr, cons))
    # the fabricated source's value, not the memory: answer-from-source is the whole recipe
    assert fe.messages[2] == ("assistant", "Tallinn")
    # nothing in the sources: the base prompt's own abstention sentence, which RAGSystem reads as one
    assert irr.messages[2] == ("assistant", ABSTAIN["en"]) == ("assistant", PROMPTS.abstention(Q))
    assert cons.messages[2] == ("assistant", "Tartu")
    # the base RAG prompt, never the conflict-aware one; passages labelled as retrieval labels them
    assert fe.messages[0] == ("system", SYSTEM["en"].replace("{abstain}", ABSTAIN["en"]))
    assert fe.messages[1][1] == (
        "<sources>\n[S1] (orgs/org1.md > Vesova (HQ) > Offices) "
        + FAKE
        + "\n[S2] (orgs/org2.md > Brinuna) "
        + OTHER
        + "\n</sources>\n\nQuestion: "
        + Q
    )
    assert summary(out) == {"grounded:abstain": 1, "grounded:answer": 2, "knowledge": 2}


def test_a_grounded_row_is_the_prompt_base_rag_sends_at_test_time():
    """Presented context, no KB labels: the row's turns are exactly RAGSystem's request."""

    class Recorder:
        cfg = None

        def __init__(self):
            self.convs, self.adapters = [], []

        def generate(self, convs, *, adapter=None, max_new_tokens=None, **_):
            self.convs += convs
            self.adapters.append(adapter)
            return [Generation(text=ABSTAIN["en"]) for _ in convs]

    gen = Recorder()
    rag = RAGSystem(None, gen, PROMPTS, RetrievalConfig())
    ctx = ScenarioContexts(None, None, RetrievalConfig(), {})
    from lorarag.eval.systems import BaseRAG

    answers = BaseRAG("rag_sft", rag, ctx, "presented", 24, adapter="rag_sft").answer_scenarios([FACTUAL_ERROR])
    row = rag_sft_rows([rag_row(FACTUAL_ERROR, True)], PROMPTS)[0]
    assert [(m.role, m.content) for m in gen.convs[0]] == list(row.messages[:2])
    assert gen.adapters == ["rag_sft"]  # answered by the RAG-SFT adapter
    assert answers[0].abstained  # the taught abstention is scored as base RAG's is


def test_a_chinese_row_gets_the_chinese_prompt_and_abstention():
    zh = _scenario(
        "irrelevant",
        (PresentedChunk("org2#0", "瑞星能源旗舰产品启明的最新版本是8.6。", "orgs/org2.md"),),
        None,
        q="鼎博纺织旗舰产品星云的最新版本号是什么？",
    )
    row = rag_sft_rows([rag_row(zh, True)], PROMPTS)[0]
    assert row.messages[2] == ("assistant", ABSTAIN["zh"])
    assert row.messages[1][1].endswith("\n\n问题：鼎博纺织旗舰产品星云的最新版本号是什么？")


def test_a_conflict_aware_row_without_its_scenario_is_refused():
    bare = SFTRow(
        (
            ("system", SYSTEM_RAG),
            ("user", rag_user_turn(Q, [SourceText(GOLD)])),
            ("assistant", "memory: Tartu | source: Tartu | verdict: supported | answer: Tartu"),
        ),
        "rag",
        "supported",
        "org1/hq",
    )
    with pytest.raises(ValueError, match="conflict-aware but carries no scenario"):
        rag_sft_rows([bare], PROMPTS)


def test_both_prompts_parse_back_to_the_same_question_and_passages():
    lora, grounded = _rows()[1], rag_sft_rows(_rows(), PROMPTS, KB)[1]
    want = [" ".join(FAKE.split()), OTHER]
    assert prompt_passages(lora.messages[1][1]) == want == prompt_passages(grounded.messages[1][1])
    assert prompt_question(lora.messages[1][1]) == Q == prompt_question(grounded.messages[1][1])
    assert prompt_question(knowledge_row(Q, "Tartu", "f").messages[1][1]) == Q
    fr = PROMPTS.build("Quelle est la capitale de la Bretagne ?", [])
    assert prompt_question(fr.user) == "Quelle est la capitale de la Bretagne ?"


def test_the_kb_leak_check_reads_grounded_rows():
    """A held-out chunk shown on several lines of a grounded row is found (one-line parsing missed it)."""
    from lorarag.scenarios.kb_records import QAItem
    from lorarag.train.sft import leak_check

    held = [QAItem(qid="h1", question="Who runs the Vesova offices?", answers=("Ada",), relevant_ids=("org1#0",))]
    row = rag_sft_rows([rag_row(CONSISTENT, True)], PROMPTS, KB)
    with pytest.raises(LeakError, match="the chunk answering held-out h1"):
        leak_check(row, held, KB)
    leak_check(rag_sft_rows([rag_row(IRRELEVANT, True)], PROMPTS, KB), held, KB)  # clean: no error


def _ci_tiny(tmp: Path, systems: list[dict] | None = None) -> RunConfig:
    from tests.test_run_e2e import _in_tmp

    cfg = _in_tmp(tmp)
    if systems is not None:
        cfg = cfg.model_copy(update={"systems": [SystemConfig(**s) for s in systems]})
    return cfg


def test_the_rag_sft_run_shares_the_loras_recipe_seed_and_base_with_its_own_rows_and_name(tmp_path):
    from lorarag.trained.adapters import needs_rag_sft, rag_sft_config

    cfg = _ci_tiny(tmp_path)
    assert needs_rag_sft(cfg)  # ci-tiny lists a rag_sft system
    t, r = cfg.train, rag_sft_config(cfg).train
    assert r.run_name == "ci-tiny-qwen3-rag-sft" and r.runs_dir == t.runs_dir
    assert r.dataset == str(Path(t.dataset).parent / "rag-sft/train.jsonl")
    assert r.val_dataset == str(Path(t.val_dataset).parent / "rag-sft/val.jsonl")
    assert (r.seed, r.model, r.kind, r.sft) == (t.seed, t.model, t.kind, t.sft)
    # the recipe but for the length filter, raised to the generator's window (1024 > 512)
    assert {**r.swift, "max_length": 512} == t.swift and r.swift["max_length"] == 1024
    assert not needs_rag_sft(_ci_tiny(tmp_path, [{"name": "lora_rag", "kind": "lora_rag"}]))


def test_a_rag_sft_system_needs_its_adapter_and_its_adapter_name_is_reserved():
    from types import SimpleNamespace

    from lorarag.core.errors import ConfigError
    from lorarag.eval.systems import build_system

    with pytest.raises(ConfigError, match="needs the RAG-SFT adapter"):
        build_system(SystemConfig(name="rs", kind="rag_sft"), SimpleNamespace(rag_sft=None))
    assert SystemConfig(name="rs", kind="rag_sft").uses_adapter  # a knowledge-sharing baseline
    raw = load_config(REPO / "configs/run/ci-tiny.yaml", RunConfig).model_dump()
    raw["rag"]["generator"]["adapters"] = {"rag_sft": "somewhere"}
    with pytest.raises(ValueError, match="adapter name rag_sft: set by the run"):
        RunConfig.model_validate(raw)


def test_dry_run_prints_both_training_commands(tmp_path):
    from lorarag.study.pipeline import run

    lines: list[str] = []
    run(_ci_tiny(tmp_path), dry_run=True, echo=lines.append)
    train = next(ln for ln in lines if ln.split()[1] == "train")
    lora, rag_sft = train.split("; RAG-SFT: ")
    assert lora.count("lorarag.train.peft_trainer") == 1 == rag_sft.count("lorarag.train.peft_trainer")
    assert "runs/train/ci-tiny-qwen3-rag-sft" not in lora
    assert "--dataset " + str(tmp_path / "runs/ci-tiny/sft/rag-sft/train.jsonl") in rag_sft
    assert '"max_length": 1024' in rag_sft and "--seed 42" in rag_sft and "--seed 42" in lora
    assert not (tmp_path / "runs").exists()


def test_the_overlap_check_reads_the_rag_sft_rows_too(tmp_path):
    """A flawed test context that only the RAG-SFT rows show still stops the run."""
    from lorarag.core.errors import ConfigError
    from lorarag.study.leaks import check_test_contexts
    from lorarag.study.run_folder import Paths
    from lorarag.train.sft import write_sft
    from lorarag.trained.adapters import rag_sft_config

    cfg = _ci_tiny(tmp_path)
    write_sft([rag_row(CONSISTENT, True)], cfg.train.dataset)
    write_sft([rag_row(CONSISTENT, True)], cfg.train.val_dataset)
    rs = rag_sft_config(cfg).train
    write_sft(rag_sft_rows([rag_row(FACTUAL_ERROR, True)], PROMPTS, KB), rs.dataset)
    paths = Paths(tmp_path / "run")
    test = [_scenario("factual_error", FACTUAL_ERROR.presented, "Tallinn", q="Which city is Vesova Dynamics in?")]
    owners = {Q: ("org1/hq", "org1"), test[0].question: ("org1/hq", "org1")}
    with pytest.raises(ConfigError, match=r"its factual_error context is one the SFT rows show, .*verbatim 1"):
        check_test_contexts(cfg, paths, test, owners, {k: c.text for k, c in KB.items()}, lambda _: None)
    lone = cfg.model_copy(update={"systems": [s for s in cfg.systems if s.kind != "rag_sft"]})
    check_test_contexts(lone, paths, test, owners, {k: c.text for k, c in KB.items()}, lambda _: None)  # not read


def _eval_config(cfg: RunConfig, tmp: Path):
    """A `lorarag eval` config of the rag_sft system over the run of `cfg` (written to a YAML)."""
    import yaml

    from lorarag.eval.config import EvalConfig

    path = tmp / "run.yaml"
    path.write_text(yaml.safe_dump(cfg.model_dump(mode="json")), encoding="utf-8")
    return EvalConfig(
        scenarios=str(Path(cfg.runs_dir) / cfg.name / "scenarios/test.jsonl"),
        components=str(path),
        system={"name": "rag_sft", "kind": "rag_sft", "max_new_tokens": 8},
        out_dir=str(tmp / "ev"),
    )


def test_lorarag_eval_of_rag_sft_without_its_adapter_is_a_one_line_error(tmp_path):
    from lorarag.core.errors import ConfigError
    from lorarag.study.eval_system import build_eval_system

    with pytest.raises(ConfigError, match="needs the trained adapter of run 'ci-tiny-qwen3-rag-sft': run `lorarag run"):
        build_eval_system(_eval_config(_ci_tiny(tmp_path), tmp_path))


@pytest.mark.slow
def test_the_rag_sft_adapter_is_trained_reused_on_rerun_and_in_the_baselines_table(tmp_path):
    import torch

    torch.set_num_threads(1)
    from lorarag.core.hashing import file_sha256
    from lorarag.fallback.gate import adapter_sha256
    from lorarag.study.pipeline import run
    from lorarag.train.sft import read_sft

    cfg = _ci_tiny(
        tmp_path,
        [
            {"name": "closed_book_lora", "kind": "closed_book", "adapter": "lora", "max_new_tokens": 8},
            {"name": "base_rag", "kind": "base_rag", "max_new_tokens": 8},
            {"name": "lora_rag", "kind": "lora_rag"},
            {"name": "rag_sft", "kind": "rag_sft", "max_new_tokens": 8},
        ],
    )
    lines: list[str] = []
    table = run(cfg, echo=lines.append)
    runs, root = tmp_path / "runs/train", tmp_path / "runs" / cfg.name
    pointer = json.loads((runs / "ci-tiny-qwen3-rag-sft/adapter.json").read_text())
    adapter = Path(pointer["adapter"])
    assert (adapter / "adapter_model.safetensors").is_file()
    # same steps as the LoRA (max_steps 3), same seed; trained from its own rows, which it records
    assert (
        adapter.name == "checkpoint-3" == Path(json.loads((runs / "ci-tiny-qwen3/adapter.json").read_text())["adapter"]).name
    )
    rows_file = root / "sft/rag-sft/train.jsonl"
    assert pointer["trained_on"]["rows"]["train"] == file_sha256(rows_file)
    lora_rows, rs_rows = read_sft(root / "sft/train.jsonl"), read_sft(rows_file)
    assert len(rs_rows) == len(lora_rows)
    assert not any(r["messages"][0]["content"] == SYSTEM_RAG for r in rs_rows)  # every such row re-posed
    assert (
        sum(r["messages"][0]["content"] == SYSTEM_RAG for r in lora_rows)
        == sum(r["messages"][1]["content"].startswith("<sources>") for r in rs_rows)
        > 0
    )
    # its results are stamped with its own adapter, not the LoRA's
    stamp = json.loads((root / "eval/rag_sft/stamp.json").read_text())
    assert stamp["adapter"] == adapter_sha256(adapter) != adapter_sha256(runs / "ci-tiny-qwen3/output/checkpoint-3")
    # in the baselines table, as a knowledge-sharing baseline
    assert "Knowledge-sharing baselines (know what the LoRA knows): closed_book_lora, rag_sft." in table
    head = next(ln for ln in table.splitlines() if ln.startswith("| scenario | knowledge | n | lora_rag |"))
    assert "| rag_sft |" in head

    mtime = (adapter / "adapter_model.safetensors").stat().st_mtime_ns
    again: list[str] = []
    run(cfg, echo=again.append)
    reused = [ln for ln in again if "reusing adapter" in ln]
    assert len(reused) == 2 and "ci-tiny-qwen3-rag-sft" in reused[1]
    assert (adapter / "adapter_model.safetensors").stat().st_mtime_ns == mtime

    # `lorarag eval` builds the same system from the run: same adapter in its stamp, same answers
    from lorarag.scenarios.records import load_scenarios
    from lorarag.study.eval_system import build_eval_system, eval_stamp

    ev = _eval_config(cfg, tmp_path)
    items = load_scenarios(ev.scenarios)
    assert eval_stamp(ev, items)["adapter"] == stamp["adapter"]
    answers = build_eval_system(ev, items).answer_scenarios(items)
    ran = {json.loads(x)["qid"]: json.loads(x)["answer"] for x in (root / "eval/rag_sft/results.jsonl").open()}
    assert [a.text for a in answers] == [ran[s.qid] for s in items]
