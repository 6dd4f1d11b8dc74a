"""How much of the test's contexts training has shown, per scenario x knowledge cell.

A detector that remembers "this chunk was labelled outdated" scores on a flawed test context it
was trained on without comparing anything with its memory. So every test item's context is looked
up in the SFT rows as they are on disk (train and val), as the sources the rows show:
- factual_error / outdated / update / consistent: the passage asserting the item's context value
  (the perturbed copy, the older or the newer version, the gold chunk);
- irrelevant: each shown chunk *with its question's fact*: the (question, chunk) pair, since a
  chunk shown for another question teaches nothing about this one. Irrelevant contexts are KB
  chunks as they are, so the pair is matched verbatim (a near copy is some other chunk).
`verbatim`: the passage is a training source line exactly; `near`: at least NEAR of its word
8-grams occur in one training source shown with a question of the item's cluster (organisation or
document): a copy with a changed date or value is still a copy, but a templated sentence about
another organisation is another passage. The item's own true chunk is left out of the near
comparison of a flawed context: a perturbed or older copy of it is near it by construction, and
showing the true chunk is what training on the knowledge base means. A sound context (consistent,
update) is compared with every source: a KB update presents the true chunk itself, which no row of
its fact may show.
`claim` (factual_error, outdated): a training row of the item's fact states the same wrong value
as its source under a flawed verdict (`conflicting`, `outdated`), whatever passage carried it.
ConflictNQ writes five fabricated passages per question, all for one fake answer: a passage the
8-gram test calls new still repeats a claim training labelled, so the cell would measure the
remembered label of a value.
Consistent contexts may well be KB chunks training showed: the LoRA is trained on the knowledge
base it retrieves from, as in deployment. Flawed ones must not be.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence

from lorarag.fallback.format import parse_reply
from lorarag.rag.prompt import prompt_passages, prompt_question
from lorarag.scenarios.records import SOUND_CONTEXTS, Scenario
from lorarag.train.sft import CLAIMED, claim_key, shown  # a source line as the SFT rows show it

NGRAM = 8  # words
NEAR = 0.8  # share of a passage's 8-grams in one training source that makes it a near copy
# The cells whose test contexts training must never have shown: the flawed ones, and `update` (a newer
# source is right; a remembered "this passage is supported" would score it without reading the date).
FLAWED = ("factual_error", "outdated", "irrelevant", "update")

def _grams(text: str) -> set[tuple[str, ...]]:
    words = text.casefold().split()
    if len(words) < NGRAM:
        return {tuple(words)} if words else set()
    return {tuple(words[i:i + NGRAM]) for i in range(len(words) - NGRAM + 1)}


@dataclass(frozen=True)
class CellOverlap:
    """Test items of one cell whose context training showed, verbatim or as a near copy."""

    scenario: str
    knowledge: str
    n: int
    verbatim: int
    near: int  # includes verbatim
    first: str | None  # the first item with a near copy, else with a claim (for the error message)
    claim: int = 0  # items whose wrong value a training row of their fact labels flawed


Owner = Callable[[str], tuple[str | None, str | None]]  # a training question -> (its fact, its cluster)


class TrainingSources:
    """Every source line of the SFT rows, indexed by word 8-gram, with the fact and cluster of the
    question it was shown with; and the (fact, value) claims the rows' replies label flawed."""

    def __init__(self, rows: Iterable[Mapping], owner: Owner) -> None:
        self.texts: list[str] = []
        self.facts: list[str | None] = []
        self.clusters: list[str | None] = []
        self.index: dict[tuple[str, ...], set[int]] = defaultdict(set)
        self.exact: dict[str, set[int]] = defaultdict(set)
        self.claims: set[tuple[str | None, str]] = set()
        for row in rows:
            for m in row["messages"]:
                if m["role"] != "user" or "\n[S" not in "\n" + m["content"]:
                    continue
                fact, cluster = owner(prompt_question(m["content"]))
                reply = parse_reply(row["messages"][-1]["content"])
                if reply.verdict in ("conflicting", "outdated"):
                    self.claims.add((fact, claim_key(reply.source)))
                for line in prompt_passages(m["content"]):
                    i = len(self.texts)
                    self.texts.append(line)
                    self.facts.append(fact)
                    self.clusters.append(cluster)
                    self.exact[line].add(i)
                    for g in _grams(line):
                        self.index[g].add(i)

    def seen(self, passage: str, *, fact: str | None = None, cluster: str | None = None,
             besides: frozenset[str] = frozenset()) -> tuple[bool, bool]:
        """(verbatim, near) for `passage`: verbatim among every source (of `fact` only, when
        given); near among the sources of `fact`, else of `cluster`, else all, less those whose
        text is in `besides` (shown form)."""
        line = shown(passage)
        facts, clusters, texts = self.facts, self.clusters, self.texts
        verbatim = any(fact is None or facts[i] == fact for i in self.exact.get(line, ()))
        grams = _grams(line)
        if verbatim or not grams:
            return verbatim, verbatim

        def ok(i: int) -> bool:
            mine = facts[i] == fact if fact is not None else cluster is None or clusters[i] == cluster
            return mine and texts[i] not in besides

        hits: Counter[int] = Counter(i for g in grams for i in self.index.get(g, ()) if ok(i))
        return False, bool(hits) and max(hits.values()) >= NEAR * len(grams)


def context_passages(s: Scenario) -> list[str]:
    """The passages of a test item that carry its context's claim (see the module docstring)."""
    if s.scenario == "irrelevant":
        return [p.text for p in s.presented]
    replaced = [p.text for p in s.presented if p.replaces]  # a perturbed or older copy in a chunk's place
    if replaced:
        return replaced
    value = (s.context_answer or "").casefold()
    hits = [p.text for p in s.presented if value and value in p.text.casefold()]
    return hits or [p.text for p in s.presented[:1]]


def overlap_table(test: Sequence[Scenario], sources: TrainingSources,
                  kb_texts: Mapping[str, str] | None = None) -> list[CellOverlap]:
    """Per (scenario, knowledge) cell: how many items' contexts training showed. `kb_texts`
    (chunk id -> text) names each item's true chunks, left out of the near comparison."""
    kb_texts = kb_texts or {}
    cells: dict[tuple[str, str], list[tuple[str, bool, bool, bool]]] = defaultdict(list)
    for s in test:
        fact = s.fact_id if s.scenario == "irrelevant" else None
        own = frozenset(shown(kb_texts[c]) for c in s.relevant_ids if c in kb_texts)
        marks = [sources.seen(p, fact=fact, cluster=s.cluster or s.fact_id,
                              besides=own if s.scenario not in SOUND_CONTEXTS else frozenset())
                 for p in context_passages(s)]
        if s.scenario == "irrelevant":  # KB chunks as they are: the pair is matched verbatim
            marks = [(v, v) for v, _ in marks]
        claim = s.scenario in CLAIMED and (s.fact_id, claim_key(s.context_answer)) in sources.claims
        cells[(s.scenario, s.knowledge)].append((s.qid, any(v for v, _ in marks), any(n for _, n in marks), claim))
    out = []
    for (sc, k), rows in sorted(cells.items()):
        # the item the error names: a near copy first (the stronger leak), else a repeated wrong value
        first = next((q for q, _, n, _ in rows if n), None) or next((q for q, *_, c in rows if c), None)
        out.append(CellOverlap(sc, k, len(rows), sum(r[1] for r in rows), sum(r[2] for r in rows), first,
                               sum(r[3] for r in rows)))
    return out


def leaking(table: Sequence[CellOverlap]) -> list[CellOverlap]:
    """The flawed cells with a test context, or its wrong value, training showed (consistent ones are
    deployment)."""
    return [c for c in table if c.scenario in FLAWED and (c.near or c.claim)]


def overlap_markdown(table: Sequence[CellOverlap]) -> list[str]:
    """Markdown lines of the table, with what a consistent overlap means."""
    lines = ["### Test contexts that training showed (SFT train + val rows, as on disk)", "",
             f"`near`: at least {NEAR:.0%} of the passage's word {NGRAM}-grams in one training source shown "
             "for the item's organisation or document (verbatim included); for `irrelevant`, the chunk "
             "itself shown with a question of the same fact. `same wrong value`: a training row of the "
             "item's fact labels the value its context asserts `conflicting` or `outdated`, in whatever passage. "
             "Consistent contexts may be knowledge-base chunks training showed: the LoRA is trained on the "
             "knowledge base it retrieves from. Flawed ones must not be.", "",
             "| scenario | knowledge | n | verbatim | near copy | same wrong value |", "|---|---|---|---|---|---|"]
    lines += [f"| {c.scenario} | {c.knowledge} | {c.n} | {c.verbatim} | {c.near} | {c.claim} |" for c in table]
    return lines + [""]
