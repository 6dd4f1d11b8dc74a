"""The demo world as a knowledge base: the three files a user gives a run (docs/kb.md).

- `corpus.jsonl` (BEIR: `_id`, `title`, `text`): one document per profile paragraph, the world's
  current knowledge (`orgs/<org>/profile#<attribute>`); the archive is not in it;
- `questions.jsonl`: every fact in `world.wordings` of its ten wordings, its gold answers, the
  paragraph that states it, its language, and its organisation as `cluster` (so the split by
  fact learns or holds out an organisation's facts together and the CIs resample organisations);
  each organisation's question about an attribute stated nowhere, `unanswerable`;
- `older.jsonl`: every older value of each fact with a history (two: three and one year before the
  profile's), the archive year as its date and the profile's own sentence stating the older value
  as its text (outdated contexts: the test shows one, training the other; and the older answer a
  stale fact is taught with `data.update_fraction`). The same template as the current passage, so
  the form of a passage does not tell an outdated one; a dated run shows the year as the source's
  date.

The study then reads the world through the same loaders, splits, scenario and row builders as any
corpus (study/kb.py): the world is one more knowledge base, not a second study path.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lorarag.rag.records import write_jsonl
from lorarag.scenarios.config import CorpusSource, QuestionSource, WorldConfig
from lorarag.scenarios.world import Fact, World, build_world

CORPUS, QUESTIONS, OLDER = "corpus.jsonl", "questions.jsonl", "older.jsonl"


@dataclass(frozen=True)
class WorldFiles:
    """Where a written world's knowledge base lies, as a run's `data:` would name it."""

    corpus: CorpusSource
    questions: QuestionSource
    outdated: str
    paths: tuple[Path, ...]


def paragraph_id(f: Fact) -> str:
    """The corpus document that states `f` (one profile paragraph)."""
    return f"orgs/{f.org_id}/profile#{f.attribute}"


def corpus_rows(world: World) -> list[dict]:
    """One BEIR document per fact: its profile paragraph, untitled (the paragraph names the organisation)."""
    return [{"_id": paragraph_id(f), "title": "", "text": f.statement()} for f in world.facts]


def question_rows(world: World, wordings: int) -> list[dict]:
    """The questions file's rows: the answerable facts, then each organisation's unanswerable question."""
    rows = [
        {
            "id": f.fact_id,
            "question": f.questions[0],
            "paraphrases": list(f.questions[1:wordings]),
            "answers": list(f.gold_answers),
            "relevant_ids": [paragraph_id(f)],
            "language": f.language,
            "cluster": f.org_id,
        }
        for f in world.facts
    ]
    rows += [
        {
            "id": u.fact_id,
            "question": u.questions[0],
            "paraphrases": list(u.questions[1:wordings]),
            "answers": [],
            "relevant_ids": [],
            "unanswerable": True,
            "language": u.language,
            "cluster": u.org_id,
        }
        for u in world.unanswerable
    ]
    return rows


def older_rows(world: World) -> list[dict]:
    """Every older value of every fact, dated by its archive year, in the profile's sentence (the
    current passage's template: only the value and the date differ)."""
    return [
        {"id": f.fact_id, "answer": value, "date": year, "text": f.statement(value)}
        for f in world.facts
        for value, year in f.history
    ]


def write_world_kb(cfg: WorldConfig, folder: str | Path) -> WorldFiles:
    """Generate the world of `cfg` and write its knowledge base under `folder` (deterministic by `cfg.seed`)."""
    world = build_world(cfg)
    folder = Path(folder)
    paths = (folder / CORPUS, folder / QUESTIONS, folder / OLDER)
    for path, rows in zip(paths, (corpus_rows(world), question_rows(world, cfg.wordings), older_rows(world))):
        write_jsonl(path, rows)
    return WorldFiles(
        CorpusSource(kind="beir", path=str(paths[0])), QuestionSource(kind="jsonl", path=str(paths[1])), str(paths[2]), paths
    )
