"""Quick measurement of a base model or adapter on the demo world (transformers + peft, greedy).

Closed-book accuracy on facts asked with a given phrasing, and conflict-aware verdict/answer
accuracy on scenarios. This is the training-side check written into docs/research-log.md;
the full evaluation with retrieval, routing and CIs lives in eval/ and fallback/.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from lorarag.fallback.format import (
    SYSTEM_CLOSED_BOOK,
    SYSTEM_RAG,
    SourceText,
    closed_book_user_turn,
    parse_reply,
    rag_user_turn,
)
from lorarag.scenarios.perturb import index_world, world_scenarios
from lorarag.scenarios.records import Scenario
from lorarag.scenarios.world import TEST_PHRASING, build_world
from lorarag.train.sft import target
from lorarag.train.runs import find_adapter


def normalize(text: str) -> str:
    """Lower-case, drop punctuation and spaces at the edges (for answer matching)."""
    return re.sub(r"[\s.,;:!?。，；：！？'\"$]+", " ", text.lower()).strip()


def matches(pred: str, gold: Sequence[str]) -> bool:
    """True when a gold answer appears in the prediction (normalised containment)."""
    p = normalize(pred)
    return any(normalize(g) and normalize(g) in p for g in gold)


def load(model_dir: str, adapter: str | None = None):
    """(model, tokenizer) in fp32 eval mode, with the adapter applied when given."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    if adapter:
        from peft import PeftModel

        # Merged for speed: generation through unmerged r=32 all-linear LoRA costs ~2x on CPU.
        model = PeftModel.from_pretrained(model, adapter).merge_and_unload()
    return model.eval(), tok


def generate(model, tok, chats: list[list[dict]], max_new_tokens: int, batch_size: int = 32) -> list[str]:
    """Greedy replies for a batch of chats (left padding)."""
    import torch
    from tqdm import tqdm

    out: list[str] = []
    for s in tqdm(range(0, len(chats), batch_size), desc="generate", unit="batch"):
        texts = [tok.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in chats[s:s + batch_size]]
        enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            gen = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False,
                                 pad_token_id=tok.pad_token_id, eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"))
        out += tok.batch_decode(gen[:, enc.input_ids.shape[1]:], skip_special_tokens=True)
    return [o.strip() for o in out]


@dataclass(frozen=True)
class ProbeRow:
    """One probed item: what was asked, what came back, and whether it was right."""

    qid: str
    kind: str  # "closed_book" or a scenario type
    knowledge: str
    output: str
    expected_verdict: str | None
    verdict: str | None
    answer_correct: bool
    verdict_correct: bool | None


def closed_book(model, tok, items: Sequence[tuple[str, str, Sequence[str]]]) -> list[ProbeRow]:
    """items: (qid, question, gold answers) -> rows with answer_correct."""
    chats = [[{"role": "system", "content": SYSTEM_CLOSED_BOOK},
              {"role": "user", "content": closed_book_user_turn(q)}] for _, q, _ in items]
    outs = generate(model, tok, chats, 16)
    return [ProbeRow(qid, "closed_book", "", o, None, None, matches(o, gold), None)
            for (qid, _, gold), o in zip(items, outs)]


def conflict_aware(model, tok, scenarios: Sequence[Scenario]) -> list[ProbeRow]:
    """Reply to each scenario; verdict vs the SFT target's verdict, answer vs the right answer."""

    chats = [[{"role": "system", "content": SYSTEM_RAG},
              {"role": "user", "content": rag_user_turn(s.question, [SourceText(p.text, p.date) for p in s.presented])}]
             for s in scenarios]
    outs = generate(model, tok, chats, 48)
    rows = []
    for s, o in zip(scenarios, outs):
        knows = s.knowledge == "known"
        want_verdict, _ = target(s, knows)
        parsed = parse_reply(o)
        right = ([s.context_answer] if not knows and s.context_answer else list(s.gold_answers))
        ok = matches(parsed.answer, right) if right else parsed.answer.strip().lower() in ("unknown", "none", "")
        rows.append(ProbeRow(s.qid, s.scenario, s.knowledge, o, want_verdict, parsed.verdict, ok,
                             parsed.verdict == want_verdict))
    return rows


def summarize(rows: Sequence[ProbeRow]) -> dict[str, float | int]:
    """Accuracy by (kind, knowledge): answer and verdict, with counts."""
    from collections import defaultdict

    groups: dict[str, list[ProbeRow]] = defaultdict(list)
    for r in rows:
        groups[f"{r.kind}/{r.knowledge}" if r.knowledge else r.kind].append(r)
    out: dict[str, float | int] = {}
    for k, rs in sorted(groups.items()):
        out[f"{k}/n"] = len(rs)
        out[f"{k}/answer_acc"] = round(sum(r.answer_correct for r in rs) / len(rs), 4)
        if rs[0].verdict_correct is not None:
            out[f"{k}/verdict_acc"] = round(sum(bool(r.verdict_correct) for r in rs) / len(rs), 4)
    return out


def probe_run(cfg, *, base: bool = False, limit: int = 0, out=None, conflicts: bool = True) -> dict:
    """Probe a train config's adapter (or its base) on the world's held-out test phrasing."""
    import json
    import random
    from pathlib import Path


    if cfg.world is None:
        raise ValueError(f"{cfg.run_name}: probe needs a world: section")
    world = build_world(cfg.world)
    adapter = None if base else str(find_adapter(cfg.run_name, cfg.runs_dir))
    model, tok = load(cfg.model, adapter)
    known = world.by_group("known")
    items = [(f.fact_id, f.questions[TEST_PHRASING], f.gold_answers) for f in known]
    rows = closed_book(model, tok, items)
    sc = world_scenarios(world, index_world(world), ("known", "unknown"), "test", seed=cfg.world.seed,
                         undated_fraction=cfg.world.undated_outdated_fraction)
    if limit and limit < len(sc):
        sc = random.Random(0).sample(sc, limit)
    if conflicts:
        rows += conflict_aware(model, tok, sc)
    # Never-learned organisations, closed-book: a model that "remembers" them is inventing.
    unseen = [(f.fact_id, f.questions[TEST_PHRASING], f.gold_answers) for f in world.by_group("unknown")]
    rows += [ProbeRow(r.qid, "closed_book_unknown", "", r.output, None, None, r.answer_correct, None)
             for r in closed_book(model, tok, unseen)]
    summary = {"adapter": adapter or "(base)", **summarize(rows)}
    if out is not None:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        with Path(out).open("w", encoding="utf-8") as fh:
            for r in rows:
                fh.write(json.dumps(r.__dict__, ensure_ascii=False) + "\n")
    return summary
