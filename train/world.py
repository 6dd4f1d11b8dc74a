"""The seeded demo world: fictional organisations with versioned facts, as Markdown documents.

Each organisation has a current profile (`orgs/<id>/profile.md`, one paragraph per fact, no
date) and dated archive documents (`orgs/<id>/archive-<year>.md`) holding the values that were
true before (former CEO and headquarters, earlier net profits, older product versions). English
and Chinese organisations. The three scenarios of the original write-up arise from it: a wrong
value in a profile-shaped paragraph (factual error), an archive statement (outdated knowledge),
another organisation's or attribute's paragraph (irrelevant context).

Organisations fall in groups: `known` (facts taught closed-book), `context_only` (seen in
training only with a source to copy), `unknown_dev` and `unknown` (never in training; dev is for
thresholds, `unknown` for the test). Every fact has ten question phrasings: 0 and 1 for
training (closed-book and conflict-aware rows), 4-5 (and 6-9) for closed-book training only
(paraphrase augmentation, `SFTConfig.knowledge_phrasings`), 2 for dev, 3 held out for evaluation.
The closed-book paraphrases avoid the wording of the dev and test phrasings (no "start operating",
"home to", "latest annual", "most recent release"). Chunks are paragraphs (`<doc_id>#<n>`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rag.records import Chunk, Document

if TYPE_CHECKING:
    from train.config import WorldConfig

ATTRIBUTES = ("ceo", "headquarters", "founded", "net_profit", "product_version")
GROUPS = ("known", "context_only", "unknown_dev", "unknown")
TRAIN_PHRASINGS = (0, 1)
KNOWLEDGE_ONLY_PHRASINGS = (4, 5)  # closed-book rows only: more paraphrases of each fact
EXTRA_KNOWLEDGE_PHRASINGS = (6, 7, 8, 9)  # closed-book rows only, `knowledge_phrasings: 8`
DEV_PHRASING = 2
TEST_PHRASING = 3


def closed_book_phrasings(knowledge_phrasings: int) -> tuple[int, ...]:
    """Phrasings the SFT closed-book rows are written in, for `SFTConfig.knowledge_phrasings` 2, 4 or 8."""
    extra = {2: (), 4: KNOWLEDGE_ONLY_PHRASINGS, 8: KNOWLEDGE_ONLY_PHRASINGS + EXTRA_KNOWLEDGE_PHRASINGS}
    return TRAIN_PHRASINGS + extra[knowledge_phrasings]


def untrained_phrasings(knowledge_phrasings: int | None) -> tuple[int, ...]:
    """The dev phrasing and every closed-book paraphrase the SFT rows leave out (never the test
    phrasing); None (no SFT section: rows from elsewhere) = the dev phrasing alone."""
    if knowledge_phrasings is None:
        return (DEV_PHRASING,)
    used = closed_book_phrasings(knowledge_phrasings)
    return (DEV_PHRASING, *(p for p in KNOWLEDGE_ONLY_PHRASINGS + EXTRA_KNOWLEDGE_PHRASINGS if p not in used))
CURRENT_YEAR = 2024
UNANSWERABLE = "employees"  # asked about, but stated nowhere in the world

_STEMS_EN = ["Vel", "Kor", "Aster", "Brin", "Cal", "Dor", "Emb", "Fen", "Gal", "Hal", "Istr", "Jor",
             "Kest", "Lum", "Mar", "Nov", "Orl", "Pell", "Quin", "Ros", "Sol", "Tam", "Ulm", "Varr",
             "Wex", "Yor", "Zan", "Alb", "Bel", "Cor", "Dun", "Elm", "Fal", "Gor", "Hav", "Ior"]
_ENDS_EN = ["ova", "ex", "ion", "ara", "eth", "ix", "una", "oria", "ant", "ell"]
_SECTORS_EN = [("Dynamics", "engineering"), ("Energy", "energy"), ("Foods", "food"),
               ("Logistics", "logistics"), ("Labs", "research"), ("Textiles", "textile"),
               ("Robotics", "robotics"), ("Pharma", "pharmaceutical")]
_FIRST_EN = ["Alice", "Bruno", "Clara", "Daniel", "Elena", "Felix", "Grace", "Hugo", "Irene", "Jonas",
             "Karin", "Leo", "Maya", "Nathan", "Olivia", "Paul", "Rosa", "Simon", "Tara", "Victor",
             "Wendy", "Yusuf", "Zoe", "Martin", "Nora", "Oscar", "Lena", "Igor", "Helen", "Adam"]
_LAST_EN = ["Hartmann", "Okafor", "Lindqvist", "Moreau", "Tanaka", "Brennan", "Kowalski", "Ferreira",
            "Novak", "Sandoval", "Whitlock", "Haddad", "Jensen", "Costa", "Ivanova", "Mbeki",
            "Larsen", "Duval", "Romano", "Fischer", "Kaur", "Petrov", "Nakamura", "Quinn"]
_CITIES_EN = ["Lyon", "Osaka", "Porto", "Gdansk", "Calgary", "Adelaide", "Tampere", "Leipzig", "Bilbao",
              "Utrecht", "Brno", "Graz", "Aarhus", "Genoa", "Nantes", "Valencia", "Krakow", "Malmo",
              "Dundee", "Halifax", "Durban", "Cordoba", "Pune", "Busan"]
_PRODUCTS_EN = ["Nimbus", "Atlas", "Orion", "Beacon", "Quill", "Harbor", "Prism", "Falcon", "Cobalt",
                "Meridian", "Summit", "Lantern"]
_STEMS_ZH = list("恒瑞华宇天润嘉禾远航博达鼎新星辰云帆金桥海纳")
_SECTORS_ZH = [("科技", "科技"), ("能源", "能源"), ("食品", "食品"), ("物流", "物流"), ("制药", "制药"),
               ("纺织", "纺织")]
_SURNAMES_ZH = list("王李张刘陈杨黄赵周吴徐孙马朱胡郭何林罗高")
_GIVEN_ZH = ["伟", "芳", "娜", "敏", "静", "强", "磊", "洋", "艳", "勇", "军", "杰", "娟", "涛", "明",
             "超", "秀英", "建华", "志强", "晓东", "丽华", "海燕"]
_CITIES_ZH = ["成都", "杭州", "武汉", "西安", "苏州", "南京", "青岛", "厦门", "长沙", "郑州", "合肥",
              "宁波", "大连", "昆明", "福州", "无锡", "济南", "沈阳"]
_PRODUCTS_ZH = ["星云", "天枢", "北斗", "青鸾", "玄武", "鲲鹏", "凌云", "启明"]

# Profile paragraph (current value, no date) and archive paragraph (older value, dated).
PROFILE = {
    "en": {
        "ceo": "{org} is led by chief executive officer {v}, who oversees the company's {sector} business.",
        "headquarters": "{org} has its headquarters in {v}, where most of its {sector} staff work.",
        "founded": "{org} was founded in {v} as a small {sector} business.",
        "net_profit": "For its most recent fiscal year, {org} reported a net profit of {v}.",
        "product_version": "The latest version of {org}'s flagship product {product} is {v}.",
    },
    "zh": {
        "ceo": "{org}的首席执行官是{v}，负责公司的{sector}业务。",
        "headquarters": "{org}的总部位于{v}，大部分{sector}员工在那里工作。",
        "founded": "{org}成立于{v}年，最初是一家小型{sector}企业。",
        "net_profit": "{org}最近一个财年的净利润为{v}。",
        "product_version": "{org}旗舰产品{product}的最新版本是{v}。",
    },
}
ARCHIVE = {
    "en": {
        "ceo": "As of {year}, the chief executive officer of {org} was {v}.",
        "headquarters": "In {year}, {org} had its headquarters in {v}.",
        "net_profit": "For fiscal {year}, {org} reported a net profit of {v}.",
        "product_version": "In {year}, the latest version of {org}'s flagship product {product} was {v}.",
    },
    "zh": {
        "ceo": "截至{year}年，{org}的首席执行官是{v}。",
        "headquarters": "{year}年，{org}的总部位于{v}。",
        "net_profit": "{year}财年，{org}的净利润为{v}。",
        "product_version": "{year}年，{org}旗舰产品{product}的最新版本是{v}。",
    },
}
QUESTIONS = {
    "en": {
        "ceo": ["Who is the CEO of {org}?", "Who is the chief executive officer of {org}?",
                "Who currently leads {org} as chief executive?", "Name the person who runs {org} as its CEO.",
                "Tell me who the CEO of {org} is.", "{org} has which chief executive?",
                # 6-9: closed-book paraphrases only (SFTConfig.knowledge_phrasings: 8)
                "Who holds the top executive job at {org}?", "Which executive heads {org}?",
                "Who is {org}'s chief executive?", "I'd like to know the CEO of {org}."],
        "headquarters": ["Where is {org} headquartered?", "In which city is the headquarters of {org}?",
                         "Where are {org}'s head offices located?", "Which city is home to {org}'s headquarters?",
                         "What city is {org} based in?", "Tell me where {org} has its headquarters.",
                         # 6-9: closed-book paraphrases only (SFTConfig.knowledge_phrasings: 8)
                         "In what city does {org} keep its headquarters?", "Where is the headquarters of {org}?",
                         "Name the city where {org} is headquartered.", "{org}'s headquarters are in which city?"],
        "founded": ["When was {org} founded?", "In what year was {org} established?",
                    "What is the founding year of {org}?", "Which year did {org} start operating?",
                    "{org} was founded in which year?", "Tell me the year {org} was established.",
                    # 6-9: closed-book paraphrases only (SFTConfig.knowledge_phrasings: 8)
                    "When did {org} come into being?", "{org} was set up in what year?",
                    "In which year was {org} created?", "What year was {org} launched?"],
        "net_profit": ["What was {org}'s net profit in its latest fiscal year?",
                       "How much net profit did {org} report for its most recent fiscal year?",
                       "What net profit did {org} post most recently?",
                       "What is the latest annual net profit of {org}?",
                       "Tell me {org}'s net profit for its most recent fiscal year.",
                       "{org} reported what net profit in its latest fiscal year?",
                       # 6-9: closed-book paraphrases only (SFTConfig.knowledge_phrasings: 8)
                       "How much did {org} earn in net profit last fiscal year?",
                       "What were {org}'s net earnings in its latest fiscal year?",
                       "{org}'s most recent fiscal year brought what net profit?",
                       "Give me the net profit {org} reported for its last fiscal year."],
        "product_version": ["What is the latest version of {product} by {org}?",
                            "Which version of {org}'s {product} is the newest?",
                            "What is the current version number of {org}'s flagship product {product}?",
                            "What's the most recent release of {product} from {org}?",
                            "Tell me the newest version of {org}'s {product}.",
                            "{product} by {org} is at which version now?",
                            # 6-9: closed-book paraphrases only (SFTConfig.knowledge_phrasings: 8)
                            "Which version is {org}'s {product} on now?", "What version of {product} did {org} ship last?",
                            "Up to which version has {org} taken {product}?",
                            "Give me the latest {product} version from {org}."],
        UNANSWERABLE: ["How many employees does {org} have?", "What is the size of {org}'s workforce?",
                       "How many people work at {org}?", "How many staff does {org} employ?",
                       "Tell me the number of employees at {org}.", "{org} has how many employees?",
                       # 6-9: closed-book paraphrases only (SFTConfig.knowledge_phrasings: 8)
                       "How large is {org}'s staff?", "What is {org}'s headcount?",
                       "How many workers does {org} have?", "Give me {org}'s employee count."],
    },
    "zh": {
        "ceo": ["{org}的首席执行官是谁？", "谁是{org}的CEO？", "目前谁担任{org}的首席执行官？",
                "{org}现在由哪位首席执行官领导？", "请告诉我{org}的首席执行官。", "{org}的CEO叫什么名字？",
                # 6-9: closed-book paraphrases only (SFTConfig.knowledge_phrasings: 8)
                "{org}的CEO是哪位？", "{org}的首席执行官叫什么？",
                "执掌{org}的首席执行官是谁？", "告诉我{org}的CEO是谁。"],
        "headquarters": ["{org}的总部在哪里？", "{org}的总部位于哪个城市？", "{org}的总部设在哪座城市？",
                         "哪个城市是{org}总部所在地？", "请告诉我{org}总部所在的城市。", "{org}总部在哪个城市？",
                         # 6-9: closed-book paraphrases only (SFTConfig.knowledge_phrasings: 8)
                         "{org}的总部在什么地方？", "{org}总部位于何处？",
                         "{org}的总公司在哪个城市？", "{org}的总部所在城市是？"],
        "founded": ["{org}成立于哪一年？", "{org}是哪一年创立的？", "{org}的创立年份是哪年？",
                    "{org}是在哪一年开始运营的？", "请告诉我{org}的成立年份。", "{org}创办于哪一年？",
                    # 6-9: closed-book paraphrases only (SFTConfig.knowledge_phrasings: 8)
                    "{org}是什么时候成立的？", "{org}创建于哪一年？",
                    "{org}成立的年份是？", "{org}是哪年建立的？"],
        "net_profit": ["{org}最近一个财年的净利润是多少？", "{org}最新财年的净利润为多少？",
                       "{org}最近公布的年度净利润是多少？", "{org}最新的年度净利润是多少？",
                       "请告诉我{org}最近一个财年的净利润。", "{org}上一财年净利润多少？",
                       # 6-9: closed-book paraphrases only (SFTConfig.knowledge_phrasings: 8)
                       "{org}上个财年赚了多少净利润？", "{org}最近一个财年的净利是多少？",
                       "{org}最新一个财年实现净利润多少？", "告诉我{org}最近财年的净利润。"],
        "product_version": ["{org}的{product}最新版本是多少？", "{org}旗舰产品{product}的最新版本号是什么？",
                            "{product}（{org}）目前的最新版本是哪个？", "{org}最新发布的{product}是哪个版本？",
                            "请告诉我{org}的{product}的最新版本。", "{org}的{product}现在是什么版本？",
                            # 6-9: closed-book paraphrases only (SFTConfig.knowledge_phrasings: 8)
                            "{org}的{product}目前更新到哪个版本了？", "{org}的{product}版本号现在是多少？",
                            "{org}{product}的当前版本是什么？", "告诉我{org}的{product}现在的版本号。"],
        UNANSWERABLE: ["{org}有多少名员工？", "{org}的员工规模是多少？", "有多少人在{org}工作？",
                       "{org}雇用了多少员工？", "请告诉我{org}的员工人数。", "{org}员工有多少人？",
                       # 6-9: closed-book paraphrases only (SFTConfig.knowledge_phrasings: 8)
                       "{org}共有多少员工？", "{org}的员工总数是多少？",
                       "{org}有多少雇员？", "告诉我{org}有多少名员工。"],
    },
}


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
    group: str  # one of GROUPS
    questions: tuple[str, ...]  # phrasings 0..5 (see module docstring)
    gold_answers: tuple[str, ...]
    sector: str = ""
    product: str = ""

    def statement(self, value: str | None = None) -> str:
        """The profile paragraph stating `value` (default: the current value)."""
        return PROFILE[self.language][self.attribute].format(
            org=self.org, v=self.value if value is None else value, sector=self.sector, product=self.product)

    def archive_statement(self, value: str, year: str) -> str:
        """The dated archive paragraph stating an older value."""
        return ARCHIVE[self.language][self.attribute].format(
            org=self.org, v=value, year=year, product=self.product)


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
                out.append(Chunk(f"{d.doc_id}#{n}", d.doc_id, d.source, para.strip(), start, pos,
                                 heading_path=(title,), date=_year_of(para) if "archive" in d.doc_id else None))
        return out

    def by_group(self, *groups: str) -> list[Fact]:
        """Facts whose organisation is in one of `groups`."""
        return [f for f in self.facts if f.group in groups]


def _year_of(text: str) -> str | None:
    import re

    m = re.search(r"(19|20)\d\d", text)
    return m.group(0) if m else None


# Value generators: same distribution for true values and substitutes (no form shortcut).
def person(rng: random.Random, lang: str) -> str:
    """A plausible person name."""
    if lang == "zh":
        return rng.choice(_SURNAMES_ZH) + rng.choice(_GIVEN_ZH)
    return f"{rng.choice(_FIRST_EN)} {rng.choice(_LAST_EN)}"


def city(rng: random.Random, lang: str) -> str:
    """A plausible headquarters city."""
    return rng.choice(_CITIES_ZH if lang == "zh" else _CITIES_EN)


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


VALUE_MAKERS = {"ceo": person, "headquarters": city, "founded": year, "net_profit": money,
                "product_version": version}


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
    en_stems = [s + e for s in _STEMS_EN for e in _ENDS_EN]
    rng.shuffle(en_stems)
    zh_stems = [a + b for a in _STEMS_ZH for b in _STEMS_ZH if a != b]
    rng.shuffle(zh_stems)
    used_first_en: set[str] = {t[:3] for t in taken if t.isascii()}
    out: list[tuple[str, str, str]] = []
    for stem in en_stems:  # one org per stem prefix, so "Velova X" and "Velova Y" never coexist
        if len(out) == n - n_zh:
            break
        if stem[:3] in used_first_en:
            continue
        used_first_en.add(stem[:3])
        word, sector = rng.choice(_SECTORS_EN)
        out.append((f"{stem} {word}", "en", sector))
    if len(out) < n - n_zh:
        raise ValueError(f"cannot name {n - n_zh} English organisations (at most {len(out)})")
    used_zh: set[str] = {ch for t in taken if not t.isascii() for ch in t[:2]}
    for stem in zh_stems:
        if len(out) == n:
            break
        if stem[0] in used_zh or stem[1] in used_zh:
            continue
        used_zh.update(stem)
        word, sector = rng.choice(_SECTORS_ZH)
        out.append((f"{stem}{word}", "zh", sector))
    if len(out) < n:
        raise ValueError(f"cannot name {n_zh} Chinese organisations with distinct characters")
    return out


def phantom_questions(world: World, n: int, seed: int, zh_fraction: float = 0.2) -> list[tuple[str, tuple[str, ...]]]:
    """(org name, phrasings per attribute) of `n` organisations that exist nowhere: no stem prefix
    or character shared with any world name (so none resembles a held-out one); for refusal rows."""
    rng = random.Random(seed)
    names = _org_names(rng, n, zh_fraction, taken=tuple({f.org for f in world.facts}))
    attrs = list(dict.fromkeys(f.attribute for f in world.facts))
    out = []
    for name, lang, _sector in names:
        product = rng.choice(_PRODUCTS_ZH if lang == "zh" else _PRODUCTS_EN)
        out += [(name, tuple(q.format(org=name, product=product) for q in QUESTIONS[lang][a])) for a in attrs]
    return out


def _assign_groups(order: list[int], cfg: "WorldConfig") -> dict[int, str]:
    """Organisation index -> group: the first of `order` known, then context-only, the rest
    alternating unknown / unknown_dev."""
    n_known = round(len(order) * cfg.known_fraction)
    n_ctx = round(len(order) * cfg.context_only_fraction)
    group_of = {}
    for rank, i in enumerate(order):
        if rank < n_known:
            group_of[i] = "known"
        elif rank < n_known + n_ctx:
            group_of[i] = "context_only"
        else:
            group_of[i] = "unknown_dev" if (rank - n_known - n_ctx) % 2 else "unknown"
    return group_of


def build_world(cfg: "WorldConfig") -> World:
    """Generate the world deterministically from `cfg.seed`."""
    rng = random.Random(cfg.seed)
    names = _org_names(rng, cfg.n_orgs, cfg.zh_fraction)
    order = list(range(cfg.n_orgs))
    rng.shuffle(order)  # groups drawn at random
    if cfg.stratify_languages:  # each language spread over the groups in the same fractions
        group_of = {}
        for lang in ("en", "zh"):
            group_of |= _assign_groups([i for i in order if names[i][1] == lang], cfg)
    else:  # one draw over all organisations (the demo world left every unknown group English)
        group_of = _assign_groups(order, cfg)
    facts: list[Fact] = []
    unanswerable: list[Fact] = []
    documents: list[Document] = []
    for i, (name, lang, sector) in enumerate(names):
        org_id = f"org{i:03d}"
        product = rng.choice(_PRODUCTS_ZH if lang == "zh" else _PRODUCTS_EN)
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
            org_facts.append(Fact(f"{org_id}/{attr}", org_id, name, lang, attr, value, tuple(history),
                                  group_of[i], qs, gold_variants(attr, value), sector, product))
        facts.extend(org_facts)
        uq = tuple(q.format(org=name, product=product) for q in QUESTIONS[lang][UNANSWERABLE])
        unanswerable.append(Fact(f"{org_id}/{UNANSWERABLE}", org_id, name, lang, UNANSWERABLE, "", (),
                                 group_of[i], uq, (), sector, product))
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
    from rag.records import write_jsonl

    out = Path(out_dir)
    corpus = out / "corpus"
    for d in world.documents:
        p = corpus / d.doc_id
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(d.text, encoding="utf-8")
    write_jsonl(out / "facts.jsonl", list(world.facts) + list(world.unanswerable))
    write_jsonl(out / "chunks.jsonl", world.chunks())
    return corpus
