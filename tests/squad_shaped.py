"""A SQuAD 2.0-shaped knowledge base written here: articles of paragraphs, each paragraph answering
several questions (a year, a person, a place, as spans of it) and leaving one unanswerable, in
English or Chinese, at a chosen paragraph length in tokens (a word, a punctuation mark or a CJK
character). The commonest shape of a QA set: a test fact's paragraph also answers other questions.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

TOWNS_EN = [
    "Elmira",
    "Dunmore",
    "Kelso",
    "Arden",
    "Brill",
    "Corfe",
    "Dover",
    "Eske",
    "Flint",
    "Garth",
    "Holt",
    "Ivel",
    "Jarrow",
    "Keld",
    "Lorne",
    "Moffat",
]
SIGHTS_EN = ["tower", "bridge", "mill", "chapel"]
PEOPLE_EN = [
    "Ada Quarrie",
    "Bram Toller",
    "Cora Vance",
    "Dirk Mallow",
    "Edda Stroud",
    "Finn Harker",
    "Gwen Ashby",
    "Hal Penrose",
    "Isla Brandt",
    "Joss Keller",
    "Kit Morrow",
    "Lise Dunbar",
]
PLACES_EN = [
    "Portland",
    "Caen",
    "Bath",
    "Purbeck",
    "Aberdeen",
    "Carrara",
    "Kilkenny",
    "Tyndale",
    "Mendip",
    "Ketton",
    "Clipsham",
    "Hopton",
]
FILLER_EN = [
    "Visitors often walk along the river before they reach it.",
    "Its walls were repaired after a storm damaged the roof.",
    "Local children learn its story at the village school.",
    "A small garden with old apple trees lies beside it.",
    "The path to it is lined with low stone walls.",
    "Painters have long liked the view from the hill above it.",
]
TOWNS_ZH = [
    "青石",
    "白河",
    "柳溪",
    "松江",
    "临川",
    "东湖",
    "西岭",
    "南塘",
    "北坡",
    "云台",
    "石门",
    "清水",
    "枫林",
    "梅岭",
    "竹园",
    "桃源",
]
SIGHTS_ZH = ["古塔", "石桥", "磨坊", "礼堂"]
PEOPLE_ZH = [
    "王立言",
    "李清源",
    "张明远",
    "刘思齐",
    "陈若水",
    "杨怀德",
    "赵子安",
    "周文博",
    "吴承志",
    "徐静宜",
    "孙伯涛",
    "马惠兰",
]
PLACES_ZH = ["太湖", "泰山", "黄山", "庐山", "峨眉", "武夷", "雁荡", "衡山", "华山", "嵩山", "九华", "天台"]
FILLER_ZH = [
    "游客常常沿着河边散步来到这里。",
    "一场暴风雨过后，人们修缮了它的屋顶。",
    "村里的孩子在学校里学习它的故事。",
    "它旁边有一座种着老苹果树的小花园。",
    "通往它的小路两旁是低矮的石墙。",
    "画家们一直喜欢从山上眺望它。",
]


def _paragraph(
    lang: str, town: str, sight: str, year: int, person: str, place: str, tokens: int, rng: random.Random
) -> tuple[str, list[tuple[str, str]], str]:
    """(paragraph, [(question, answer)], unanswerable question): as many answer sentences as the
    length allows (at least the year's), padded with filler sentences to about `tokens` tokens."""
    from lorarag.train.overlap import tokens as toks

    if lang == "en":
        name = f"the {sight} of {town}"
        facts = [
            (f"The {sight} of {town} was completed in {year}.", f"When was {name} completed?", str(year)),
            (f"Its architect was {person}.", f"Who was the architect of {name}?", person),
            (f"Stone for it came from {place}.", f"Where did the stone for {name} come from?", place),
        ]
        filler, unanswerable, sep = FILLER_EN, f"How many visitors does {name} receive each year?", " "
    else:
        name = f"{town}{sight}"
        facts = [
            (f"{name}建成于{year}年。", f"{name}建成于哪一年？", str(year)),
            (f"它的设计者是{person}。", f"{name}的设计者是谁？", person),
            (f"建造它的石料来自{place}。", f"建造{name}的石料来自哪里？", place),
        ]
        filler, unanswerable, sep = FILLER_ZH, f"{name}每年接待多少游客？", ""
    kept = [facts[0]]
    for f in facts[1:]:
        if len(toks(sep.join(s for s, _, _ in kept + [f]))) <= tokens:
            kept.append(f)
    sentences = [s for s, _, _ in kept]
    while len(toks(sep.join(sentences))) < tokens * 0.9:
        sentences.insert(rng.randrange(1, len(sentences) + 1), rng.choice(filler))
    return sep.join(sentences), [(q, a) for _, q, a in kept], unanswerable


def write_squad(folder: Path, *, lang: str = "en", tokens: int = 40, articles: int = 16, seed: int = 0) -> Path:
    """A SQuAD 2.0 JSON file of `articles` towns x four sights (answers as spans, `answer_start`
    exact, one unanswerable question a paragraph); returns its path."""
    rng = random.Random(seed)
    towns, sights = (TOWNS_EN, SIGHTS_EN) if lang == "en" else (TOWNS_ZH, SIGHTS_ZH)
    people, places = (PEOPLE_EN, PLACES_EN) if lang == "en" else (PEOPLE_ZH, PLACES_ZH)
    data = []
    for a, town in enumerate(towns[:articles]):
        paragraphs = []
        for s, sight in enumerate(sights):
            year = 1700 + rng.randrange(300)
            text, qas, unanswerable = _paragraph(
                lang, town, sight, year, rng.choice(people), rng.choice(places), tokens, rng
            )
            rows = [
                {
                    "id": f"{a}-{s}-{k}",
                    "question": q,
                    "is_impossible": False,
                    "answers": [{"text": ans, "answer_start": text.index(ans)}],
                }
                for k, (q, ans) in enumerate(qas)
            ]
            rows.append({"id": f"{a}-{s}-none", "question": unanswerable, "is_impossible": True, "answers": []})
            paragraphs.append({"context": text, "qas": rows})
        data.append({"title": town, "paragraphs": paragraphs})
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"squad-{lang}-{tokens}.json"
    path.write_text(json.dumps({"version": "v2.0", "data": data}, ensure_ascii=False), encoding="utf-8")
    return path
