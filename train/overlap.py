"""How much of the test's contexts training has shown, per scenario x knowledge cell.

A detector that remembers "this chunk was labelled outdated" scores on a flawed test context it
was trained on without comparing anything with its memory. So every test item's context is looked
up in the SFT rows as they are on disk (train and val), as the sources the rows show:
- factual_error / outdated / update / consistent: the passage asserting the item's context value
  (the perturbed copy, the older or the newer version, the gold chunk);
- irrelevant: each shown chunk *with its question's fact*: the (question, chunk) pair, since a
  chunk shown for another question teaches nothing about this one. Irrelevant contexts are KB
  chunks as they are, so the pair is matched verbatim.
Passages are compared as token sequences (a word, a punctuation mark, or one CJK character is a
token), so the rule is the same for a one-line fact, a 400-token paragraph and a Chinese sentence:
- `verbatim`: the passage is a training source line exactly;
- `edited` (an edited twin, verbatim included), for a source shown with a question of the item's
  cluster (organisation or document) that is not itself a knowledge-base chunk:
  - an edit of the item's own true chunk: the KB chunk the source is closest to is one of the
    item's relevant chunks, and the source keeps at least EDIT of its tokens in order (a copy with
    another span changed: another question's substitution in the same paragraph, another older
    version, another fake value);
  - or a near copy of the test passage itself: at least COPY of the longer one's tokens in order.
  Knowledge-base chunks as they are (the item's own, a distractor) are deployment, not edits.
A sound context (consistent, update) is compared with every source; its own chunk is no exception:
a KB update presents the true chunk itself, which no row of its fact may show.
`claim` (factual_error, outdated): a training row of the item's fact states the same wrong value
as its source under a flawed verdict (`conflicting`, `outdated`), whatever passage carried it.
ConflictNQ writes five fabricated passages per question, all for one fake answer: a passage that is
no twin still repeats a claim training labelled, so the cell would measure the remembered label of
a value.
Consistent contexts may well be KB chunks training showed: the LoRA is trained on the knowledge
base it retrieves from, as in deployment. Flawed ones must not be.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from functools import lru_cache

from lorarag.fallback.format import parse_reply
from lorarag.rag.prompt import prompt_passages, prompt_question
from lorarag.scenarios.records import SOUND_CONTEXTS, Scenario
from lorarag.train.sft import CLAIMED, claim_key, shown  # a source line as the SFT rows show it

EDIT = 0.6  # share of the true chunk's tokens (of the longer of the two) an edited copy keeps in order
COPY = 0.8  # share of the longer passage's tokens a near copy of the test passage keeps in order
# The cells whose test contexts training must never have shown: the flawed ones, and `update` (a newer
# source is right; a remembered "this passage is supported" would score it without reading the date).
FLAWED = ("factual_error", "fabricated", "outdated", "irrelevant", "update")
_TOKEN = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]|\w+|[^\w\s]")


@lru_cache(maxsize=65536)
def tokens(text: str) -> tuple[str, ...]:
    """`text` as compared: case-folded words, punctuation marks and single CJK characters."""
    return tuple(_TOKEN.findall(text.casefold()))


def kept(a: Sequence[str], b: Sequence[str]) -> float:
    """Tokens the two sequences share in order (difflib's matching blocks), over the longer one."""
    if not a or not b:
        return 0.0
    longer = max(len(a), len(b))
    if min(len(a), len(b)) < EDIT * longer or sum((Counter(a) & Counter(b)).values()) < EDIT * longer:
        return 0.0  # cannot reach either threshold: skip the alignment
    blocks = SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks()
    return sum(m.size for m in blocks) / longer


class Origins:
    """The knowledge-base chunk a passage is an edit of: of the chunks sharing its rarer tokens, the
    one whose tokens it keeps most of in order (`kept`)."""

    def __init__(self, kb_texts: Mapping[str, str]) -> None:
        self.ids = list(kb_texts)
        self.toks = [tokens(shown(kb_texts[c])) for c in self.ids]
        self.lines = {shown(kb_texts[c]) for c in self.ids}
        self.posting: dict[str, list[int]] = defaultdict(list)
        for i, ts in enumerate(self.toks):
            for t in set(ts):
                self.posting[t].append(i)
        self.cap = max(8, len(self.ids) // 10)  # a token in over a tenth of the chunks says little
        self._cache: dict[str, tuple[str | None, float]] = {}

    def of(self, line: str, top: int = 5) -> tuple[str | None, float]:
        """(the chunk id `line` is closest to, the share kept), (None, 0.0) when no chunk is close."""
        if line not in self._cache:
            ts = tokens(line)
            score: Counter[int] = Counter()
            for t in set(ts):
                post = self.posting.get(t, ())
                if 0 < len(post) <= self.cap:
                    for i in post:
                        score[i] += 1.0 / math.log(2 + len(post))
            best: tuple[str | None, float] = (None, 0.0)
            for i, _ in score.most_common(top):
                r = kept(ts, self.toks[i])
                if r > best[1]:
                    best = (self.ids[i], r)
            self._cache[line] = best
        return self._cache[line]


@dataclass(frozen=True)
class CellOverlap:
    """Test items of one cell whose context training showed: verbatim, as an edited twin, or as a
    wrong value training labelled for the same fact."""

    scenario: str
    knowledge: str
    n: int
    verbatim: int
    edited: int  # edited twins and near copies, verbatim included
    first: str | None  # the first item with a twin, else with a claim (for the error message)
    claim: int = 0  # items whose wrong value a training row of their fact labels flawed

    @classmethod
    def from_record(cls, r: Mapping) -> CellOverlap:
        """A row of `data/overlap.json`; a run written before twins were told apart names them `near`."""
        r = dict(r)
        if "near" in r:
            r["edited"] = r.pop("near")
        return cls(**r)


Owner = Callable[[str], tuple[str | None, str | None]]  # a training question -> (its fact, its cluster)


class TrainingSources:
    """Every source line of the SFT rows, with the fact and cluster of the question it was shown
    with; and the (fact, value) claims the rows' replies label flawed."""

    def __init__(self, rows: Iterable[Mapping], owner: Owner) -> None:
        self.texts: list[str] = []
        self.facts: list[str | None] = []
        self.clusters: list[str | None] = []
        self.exact: dict[str, set[int]] = defaultdict(set)
        self.claims: set[tuple[str | None, str]] = set()
        self.by_fact: dict[str | None, set[str]] = defaultdict(set)  # unique source lines per fact
        self.by_cluster: dict[str | None, set[str]] = defaultdict(set)  # and per cluster
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
                    self.by_fact[fact].add(line)
                    self.by_cluster[cluster].add(line)

    def seen(
        self,
        passage: str,
        *,
        fact: str | None = None,
        cluster: str | None = None,
        besides: frozenset[str] = frozenset(),
        own: frozenset[str] = frozenset(),
        origins: Origins | None = None,
    ) -> tuple[bool, bool]:
        """(verbatim, edited) for `passage` (see the module docstring): verbatim among every source
        (of `fact` only, when given); edited among the sources of `fact`, else of `cluster`, else
        all, less those whose text is in `besides` or is a KB chunk as it is (`origins`). `own`:
        the item's relevant chunk ids, whose edits count as twins."""
        line = shown(passage)
        verbatim = any(fact is None or self.facts[i] == fact for i in self.exact.get(line, ()))
        if verbatim:
            return True, True
        pool = (
            self.by_fact.get(fact, ())
            if fact is not None
            else self.by_cluster.get(cluster, ())
            if cluster is not None
            else self.exact
        )
        kb_lines = origins.lines if origins is not None else frozenset()
        mine = tokens(line)
        for text in pool:
            if text in besides or text in kb_lines:
                continue
            if own and origins is not None:
                origin, share = origins.of(text)
                if origin in own and share >= EDIT:
                    return False, True
            if kept(mine, tokens(text)) >= COPY:
                return False, True
        return False, False


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


def overlap_table(
    test: Sequence[Scenario], sources: TrainingSources, kb_texts: Mapping[str, str] | None = None
) -> list[CellOverlap]:
    """Per (scenario, knowledge) cell: how many items' contexts training showed. `kb_texts`
    (chunk id -> text, the whole knowledge base) names each item's true chunks, whose edits are
    twins, and the chunks as they are, which are no edit of anything."""
    kb_texts = kb_texts or {}
    origins = Origins(kb_texts) if kb_texts else None
    cells: dict[tuple[str, str], list[tuple[str, bool, bool, bool]]] = defaultdict(list)
    for s in test:
        fact = s.fact_id if s.scenario == "irrelevant" else None
        sound = s.scenario in SOUND_CONTEXTS
        own = frozenset(shown(kb_texts[c]) for c in s.relevant_ids if c in kb_texts)
        marks = [
            sources.seen(
                p,
                fact=fact,
                cluster=s.cluster or s.fact_id,
                besides=frozenset() if sound else own,
                own=frozenset(s.relevant_ids) if s.scenario in CLAIMED else frozenset(),
                origins=origins,
            )
            for p in context_passages(s)
        ]
        if s.scenario == "irrelevant":  # KB chunks as they are: the pair is matched verbatim
            marks = [(v, v) for v, _ in marks]
        claim = s.scenario in CLAIMED and (s.fact_id, claim_key(s.context_answer)) in sources.claims
        cells[(s.scenario, s.knowledge)].append((s.qid, any(v for v, _ in marks), any(n for _, n in marks), claim))
    out = []
    for (sc, k), rows in sorted(cells.items()):
        # the item the error names: a twin first (the stronger leak), else a repeated wrong value
        first = next((q for q, _, n, _ in rows if n), None) or next((q for q, *_, c in rows if c), None)
        out.append(
            CellOverlap(sc, k, len(rows), sum(r[1] for r in rows), sum(r[2] for r in rows), first, sum(r[3] for r in rows))
        )
    return out


def leaking(table: Sequence[CellOverlap]) -> list[CellOverlap]:
    """The flawed cells with a test context, or its wrong value, training showed (consistent ones are
    deployment)."""
    return [c for c in table if c.scenario in FLAWED and (c.edited or c.claim)]


def overlap_markdown(table: Sequence[CellOverlap]) -> list[str]:
    """Markdown lines of the table, with what each column and a consistent overlap mean."""
    lines = [
        "### Test contexts that training showed (SFT train + val rows, as on disk)",
        "",
        "Passages are compared token by token (a word, a punctuation mark or a CJK character). "
        f"`edited twin` (verbatim included): a training source of the item's organisation or document, "
        f"not a knowledge-base chunk as it is, that keeps at least {EDIT:.0%} of the item's own true chunk "
        f"in order (an edit of that chunk), or {COPY:.0%} of the test passage; for `irrelevant`, the chunk "
        "itself shown with a question of the same fact. `same wrong value`: a training row of the "
        "item's fact labels the value its context asserts `conflicting` or `outdated`, in whatever passage. "
        "Consistent contexts may be knowledge-base chunks training showed: the LoRA is trained on the "
        "knowledge base it retrieves from. Flawed ones must not be.",
        "",
        "| scenario | knowledge | n | verbatim | edited twin | same wrong value |",
        "|---|---|---|---|---|---|",
    ]
    lines += [f"| {c.scenario} | {c.knowledge} | {c.n} | {c.verbatim} | {c.edited} | {c.claim} |" for c in table]
    return lines + [""]
