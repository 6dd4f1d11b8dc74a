"""The seeded demo world: fictional organisations with versioned facts, as Markdown documents.

Each organisation has a current profile (`orgs/<id>/profile.md`, one paragraph per fact, no
date) and dated archive documents (`orgs/<id>/archive-<year>.md`) holding the values that were
true before (former CEO and headquarters, earlier net profits, older product versions). English
and Chinese organisations; every fact has ten question wordings, and each organisation one
question about an attribute stated nowhere (unanswerable). The study reads the world as a
knowledge base like any other: scenarios/world_kb.py writes its profiles as the corpus, its
questions (the organisation as their cluster) and its archive as older versions, and the run's
split by fact decides what the LoRA learns.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from lorarag.core.errors import ConfigError
from lorarag.rag.records import Chunk, Document, write_jsonl
from lorarag.scenarios import world_text as vocab
from lorarag.scenarios.config import WorldConfig
from lorarag.scenarios.world_text import ARCHIVE, PROFILE, QUESTIONS, UNANSWERABLE

CURRENT_YEAR = 2024


@dataclass(frozen=True)
class Fact:
    """One attribute of one organisation: its current value and its dated history."""

    fact_id: str  # "<org_id>/<attribute>"
    org_id: str
    org: str  # display name
    language: str
    attribute: str
    value: str  # current value, as written in the profile
    history: tuple[tuple[str, str], ...]  # (older value, year), oldest first; may be empty
    questions: tuple[str, ...]  # the ten wordings of world_text.QUESTIONS
    gold_answers: tuple[str, ...]
    sector: str = ""
    product: str = ""

    def statement(self, value: str | None = None) -> str:
        """The profile paragraph stating `value` (default: the current value)."""
        return PROFILE[self.language][self.attribute].format(
            org=self.org, v=self.value if value is None else value, sector=self.sector, product=self.product
        )

    def archive_statement(self, value: str, year: str) -> str:
        """The dated archive paragraph stating an older value."""
        return ARCHIVE[self.language][self.attribute].format(org=self.org, v=value, year=year, product=self.product)


@dataclass(frozen=True)
class World:
    """Facts and the Markdown documents that state them."""

    facts: tuple[Fact, ...]
    documents: tuple[Document, ...]
    unanswerable: tuple[Fact, ...]  # questions about a stated-nowhere attribute (no gold)

    def chunks(self) -> list[Chunk]:
        """Paragraph chunks of every document (id `<doc_id>#<n>`, n counts paragraphs from 0)."""
        out: list[Chunk] = []
        for d in self.documents:
            pos = 0
            title = d.text.split("\n", 1)[0].lstrip("# ").strip()
            for n, para in enumerate(p for p in d.text.split("\n\n") if p.strip()):
                start = d.text.index(para, pos)
                pos = start + len(para)
                if para.startswith("#"):  # the title lives in heading_path, not as a chunk
                    continue
                out.append(
                    Chunk(
                        f"{d.doc_id}#{n}",
                        d.doc_id,
                        d.source,
                        para.strip(),
                        start,
                        pos,
                        heading_path=(title,),
                        date=_year_of(para) if "archive" in d.doc_id else None,
                    )
                )
        return out


def _year_of(text: str) -> str | None:
    import re

    m = re.search(r"(19|20)\d\d", text)
    return m.group(0) if m else None


# Value generators: same distribution for true values and substitutes (no form shortcut).
def person(rng: random.Random, lang: str) -> str:
    """A plausible person name."""
    if lang == "zh":
        return rng.choice(vocab.SURNAMES_ZH) + rng.choice(vocab.GIVEN_ZH)
    return f"{rng.choice(vocab.FIRST_EN)} {rng.choice(vocab.LAST_EN)}"


def city(rng: random.Random, lang: str) -> str:
    """A plausible headquarters city."""
    return rng.choice(vocab.CITIES_ZH if lang == "zh" else vocab.CITIES_EN)


def year(rng: random.Random, lang: str) -> str:
    """A plausible founding year."""
    return str(rng.randint(1950, 2012))


def money(rng: random.Random, lang: str) -> str:
    """A plausible net profit, e.g. '$12.4 million' or '3.7亿元'."""
    x = f"{rng.randint(1, 98)}.{rng.randint(1, 9)}"
    return f"{x}亿元" if lang == "zh" else f"${x} million"


def version(rng: random.Random, lang: str, major_range: tuple[int, int] = (4, 9)) -> str:
    """A plausible product version, e.g. '4.2'."""
    return f"{rng.randint(*major_range)}.{rng.randint(0, 9)}"


VALUE_MAKERS = {"ceo": person, "headquarters": city, "founded": year, "net_profit": money, "product_version": version}


def gold_variants(attribute: str, value: str) -> tuple[str, ...]:
    """Accepted answer strings for a value (the unit-free number for money)."""
    if attribute == "net_profit":
        bare = value.replace("$", "").replace("亿元", "亿").strip()
        return (value, bare) if bare != value else (value,)
    return (value,)


def _org_names(rng: random.Random, n: int, zh_fraction: float, taken: tuple[str, ...] = ()) -> list[tuple[str, str, str]]:
    """n unique (name, language, sector word) with unique stems (no near-duplicate names), none
    sharing a stem prefix (en) or a character (zh) with the names `taken`."""
    n_zh = round(n * zh_fraction)
    en_stems = [s + e for s in vocab.STEMS_EN for e in vocab.ENDS_EN]
    rng.shuffle(en_stems)
    used_first_en: set[str] = {t[:3] for t in taken if t.isascii()}
    if n - n_zh > len({x[:3] for x in vocab.STEMS_EN} - used_first_en):
        more = [s + e for s in vocab.STEMS_EN_MORE for e in vocab.ENDS_EN]
        rng.shuffle(more)  # drawn only when needed: smaller worlds keep their names and rng state
        en_stems += more
    zh_stems = [a + b for a in vocab.STEMS_ZH for b in vocab.STEMS_ZH if a != b]
    rng.shuffle(zh_stems)
    used_zh: set[str] = {ch for t in taken if not t.isascii() for ch in t[:2]}
    if n_zh > len(set(vocab.STEMS_ZH) - used_zh) // 2 - 2:  # the greedy pairing leaves a few unused
        more_zh = [a + b for a in vocab.STEMS_ZH_MORE for b in vocab.STEMS_ZH_MORE if a != b]
        rng.shuffle(more_zh)
        zh_stems += more_zh
    out: list[tuple[str, str, str]] = []
    for stem in en_stems:  # one org per stem prefix, so "Velova X" and "Velova Y" never coexist
        if len(out) == n - n_zh:
            break
        if stem[:3] in used_first_en:
            continue
        used_first_en.add(stem[:3])
        word, sector = rng.choice(vocab.SECTORS_EN)
        out.append((f"{stem} {word}", "en", sector))
    if len(out) < n - n_zh:
        raise ValueError(f"cannot name {n - n_zh} English organisations (at most {len(out)})")
    for stem in zh_stems:
        if len(out) == n:
            break
        if stem[0] in used_zh or stem[1] in used_zh:
            continue
        used_zh.update(stem)
        word, sector = rng.choice(vocab.SECTORS_ZH)
        out.append((f"{stem}{word}", "zh", sector))
    if len(out) < n:
        raise ValueError(f"cannot name {n_zh} Chinese organisations with distinct characters")
    return out


def build_world(cfg: WorldConfig) -> World:
    """Generate the world deterministically from `cfg.seed`."""
    rng = random.Random(cfg.seed)
    try:
        names = _org_names(rng, cfg.n_orgs, cfg.zh_fraction)
    except ValueError as exc:  # the vocabulary's distinct stems run out
        raise ConfigError(f"world.n_orgs: {cfg.n_orgs} is too many for the demo vocabulary ({exc})") from None
    rng.shuffle(list(range(cfg.n_orgs)))  # kept in the stream: a seed gives the values of the measured worlds
    facts: list[Fact] = []
    unanswerable: list[Fact] = []
    documents: list[Document] = []
    for i, (name, lang, sector) in enumerate(names):
        org_id = f"org{i:03d}"
        product = rng.choice(vocab.PRODUCTS_ZH if lang == "zh" else vocab.PRODUCTS_EN)
        org_facts = []
        for attr in cfg.attributes:
            history: list[tuple[str, str]] = []
            if attr == "product_version":
                value = version(rng, lang)
                major = int(value.split(".")[0])
                for k, yr in ((2, CURRENT_YEAR - 3), (1, CURRENT_YEAR - 1)):
                    history.append((f"{major - k}.{rng.randint(0, 9)}", str(yr)))
            else:
                value = VALUE_MAKERS[attr](rng, lang)
                if attr != "founded":
                    for yr in (CURRENT_YEAR - 3, CURRENT_YEAR - 1):
                        old = VALUE_MAKERS[attr](rng, lang)
                        while old == value or old in {h[0] for h in history}:
                            old = VALUE_MAKERS[attr](rng, lang)
                        history.append((old, str(yr)))
            qs = tuple(q.format(org=name, product=product) for q in QUESTIONS[lang][attr])
            org_facts.append(
                Fact(
                    f"{org_id}/{attr}",
                    org_id,
                    name,
                    lang,
                    attr,
                    value,
                    tuple(history),
                    qs,
                    gold_variants(attr, value),
                    sector,
                    product,
                )
            )
        facts.extend(org_facts)
        uq = tuple(q.format(org=name, product=product) for q in QUESTIONS[lang][UNANSWERABLE])
        unanswerable.append(
            Fact(f"{org_id}/{UNANSWERABLE}", org_id, name, lang, UNANSWERABLE, "", (), uq, (), sector, product)
        )
        documents.extend(_documents(org_id, name, lang, org_facts))
    return World(tuple(facts), tuple(documents), tuple(unanswerable))


def _documents(org_id: str, name: str, lang: str, facts: list[Fact]) -> list[Document]:
    title = f"# {name}" + (" 公司简介" if lang == "zh" else " — company profile")
    paras = [title] + [f.statement() for f in facts]
    docs = [Document(f"orgs/{org_id}/profile.md", f"orgs/{org_id}/profile.md", "\n\n".join(paras) + "\n")]
    years = sorted({yr for f in facts for _, yr in f.history})
    for yr in years:
        body = [f.archive_statement(v, y) for f in facts for v, y in f.history if y == yr]
        head = f"# {name} {yr}年档案" if lang == "zh" else f"# {name} — archive {yr}"
        doc_id = f"orgs/{org_id}/archive-{yr}.md"
        docs.append(Document(doc_id, doc_id, "\n\n".join([head] + body) + "\n"))
    return docs


def write_world(world: World, out_dir: str | Path) -> Path:
    """Write the Markdown documents and `facts.jsonl` under `out_dir`; returns the corpus folder."""

    out = Path(out_dir)
    corpus = out / "corpus"
    for d in world.documents:
        p = corpus / d.doc_id
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(d.text, encoding="utf-8")
    write_jsonl(out / "facts.jsonl", list(world.facts) + list(world.unanswerable))
    write_jsonl(out / "chunks.jsonl", world.chunks())
    return corpus
