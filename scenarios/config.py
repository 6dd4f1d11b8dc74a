"""Configs of the scenario sources: the demo world (scenarios/world.py), or a user's corpus + QA set."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from lorarag.core.config import Strict

# What a fact of the demo world can be about; the world's templates cover exactly these.
ATTRIBUTES = ("ceo", "headquarters", "founded", "net_profit", "product_version")


class WorldConfig(Strict):
    """The seeded demo world: fictional organisations with versioned facts, written as a knowledge
    base (scenarios/world_kb.py) that the study reads like any other (`data.world`)."""

    seed: int = Field(0, description="seed of the world: organisations, facts, versions")
    n_orgs: int = Field(40, description="fictional organisations (>= 4)")
    zh_fraction: float = Field(0.2, description="share of organisations written in Chinese")
    attributes: list[str] = Field(
        default_factory=lambda: list(ATTRIBUTES),
        description=("fact attributes the world writes (ceo, headquarters, founded, net_profit, product_version)"),
    )
    wordings: int = Field(
        6,
        ge=2,
        le=10,
        description=(
            "wordings each question is written in (the question and wordings-1 paraphrases, of the 10 the world's "
            "templates have): a known test question is asked in one that training leaves out "
            "(scenarios/kb_wordings.py), the rest are trained"
        ),
    )

    @model_validator(mode="after")
    def _check(self) -> WorldConfig:
        if self.n_orgs < 4:
            raise ValueError("n_orgs must be at least 4")
        bad = [a for a in self.attributes if a not in ATTRIBUTES]
        if bad:
            raise ValueError(f"unknown attribute(s) {bad} (known: {', '.join(ATTRIBUTES)})")
        return self


# ---------------------------------------------------------------------------------------
# A user's knowledge base + labelled QA set instead of the demo world (`data:` of a run config).
# ---------------------------------------------------------------------------------------
def _only_for(src: Strict, keys: dict[str, str]) -> None:
    """ValueError for a key set away from its default that means nothing for `src.kind`: a
    `split: dev` on JSONL questions would look chosen and be ignored. Compared with the default,
    not with the keys given, so a dumped config (every field written) validates again."""
    for key, kind in keys.items():
        if src.kind != kind and getattr(src, key) != type(src).model_fields[key].default:
            raise ValueError(f"{key}: only for kind {kind}, not {src.kind}")


CorpusKind = Literal["folder", "beir", "hf", "squad", "conflictnq"]
QuestionKind = Literal["jsonl", "beir", "squad", "conflictnq"]


class CorpusSource(Strict):
    """Where the knowledge base's documents come from (scenarios/kb_corpus.py).

    - folder: documents under `path` (.md .txt .pdf .docx .html, as `lorarag index` reads them);
    - beir: a BEIR `corpus.jsonl` (`_id`, `title`, `text`), or the folder holding it;
    - hf: a Hugging Face dataset: a `datasets.save_to_disk` folder (`split` names the split of a
      DatasetDict), or a `.parquet` / `.jsonl` file; columns `id_field`, `text_field`, `title_field`;
    - squad: the paragraphs (contexts) of a SQuAD v1.1/v2.0 JSON file, one document each;
    - conflictnq: the real passages of a ConflictNQ file (`<split>.jsonl`).
    """

    kind: CorpusKind = Field(description=("`folder`, `beir`, `hf`, `squad` or `conflictnq` (see the section's description)"))
    path: str = Field(description="the folder or file of the documents")
    split: str | None = Field(None, description="hf kind: the split of a DatasetDict folder")
    id_field: str = Field("_id", description="hf kind: the id column")
    text_field: str = Field("text", description="hf kind: the text column")
    title_field: str | None = Field("title", description="hf kind: the title column; null: no title column")
    pdf_parser: Literal["auto", "pypdf", "mineru"] = Field(
        "auto", description=("folder kind: PDF reader, as rag.corpus.pdf_parser")
    )
    strict: bool = Field(False, description=("folder kind: a bad file stops the run instead of being listed and left out"))

    @model_validator(mode="after")
    def _keys_of_kind(self) -> CorpusSource:
        _only_for(
            self,
            {
                "split": "hf",
                "id_field": "hf",
                "text_field": "hf",
                "title_field": "hf",
                "pdf_parser": "folder",
                "strict": "folder",
            },
        )
        return self


class QuestionSource(Strict):
    """The labelled questions (scenarios/kb_questions.py).

    - jsonl: one object per line, `{id, question, answers, relevant_ids}` (+ optional
      `unanswerable`, `paraphrases`, `language`, `conflicts: [{text, answer}]`);
    - beir: the folder with `queries.jsonl` and `qrels/<split>.tsv` (answers from each query's
      `metadata.answers` list or `metadata.answer` string where present, `metadata.answer_start`
      offsets kept);
    - squad: SQuAD v1.1/v2.0 JSON (unanswerable questions kept, answer offsets kept);
    - conflictnq: a ConflictNQ file: the cleaned question (the raw NQ question as a second wording),
      the real short answer, and the fabricated passages as real conflicts.
    """

    kind: QuestionKind = Field(description="`jsonl`, `beir`, `squad` or `conflictnq` (see the section's description)")
    path: str = Field(description="the file or folder of the questions")
    split: str = Field("test", description="beir kind: the qrels file, qrels/<split>.tsv")
    language: Literal["auto", "en", "zh", "fr"] = Field(
        "auto", description=("language of every question, or `auto`: per question (rag.prompt.detect_language)")
    )

    @model_validator(mode="after")
    def _keys_of_kind(self) -> QuestionSource:
        _only_for(self, {"split": "beir"})
        return self


class SplitConfig(Strict):
    """Seeded splits by fact (scenarios/kb_splits.py): what the LoRA learns and what it never sees."""

    seed: int = Field(0, description="seed of the split by fact")
    known_fraction: float = Field(
        0.5, gt=0, lt=1, description=("share of facts taught closed-book and with conflict-aware rows")
    )
    context_only_fraction: float = Field(
        0.1,
        ge=0,
        lt=1,
        description=(
            'share of facts seen in training only with a source to copy (memory "unknown"), as the demo\'s context-only orgs'
        ),
    )
    dev_fraction: float = Field(
        0.2,
        gt=0,
        lt=1,
        description=(
            "share of the known facts and of the never-learned ones held out as the gate's dev split (never tested)"
        ),
    )
    stratify_languages: bool = Field(
        False,
        description=(
            "Cut each language's facts in the same fractions, so never-learned facts, the gate's dev split and "
            "over-fallback hold every language the set has; off: one draw over all facts"
        ),
    )

    @model_validator(mode="after")
    def _check(self) -> SplitConfig:
        if self.known_fraction + self.context_only_fraction >= 1.0:
            raise ValueError("known_fraction + context_only_fraction must leave room for never-learned facts")
        return self


class ParaphraseConfig(Strict):
    """`data.paraphrase`: training wordings written by the run's generator for taught questions the
    set words once (study/paraphrase.py); off unless enabled."""

    enabled: bool = Field(False, description="write training wordings with the run's generator")
    prompts: int = Field(2, ge=1, le=3, description="rewrites asked per question, one per prompt")
    max_new_tokens: int = Field(48, ge=8, description="tokens per rewrite")


class DataConfig(Strict):
    """A corpus + labelled QA set: the knowledge base the LoRA learns and the questions it is tested on.
    Either a user's files (`corpus`, `questions`, optional `outdated`) or the demo world (`world`),
    which writes the same three files under `<run>/world/` (scenarios/world_kb.py)."""

    world: WorldConfig | None = Field(
        None,
        description=(
            "the seeded demo world, written as a corpus, questions and older versions (instead of corpus/questions/outdated)"
        ),
    )
    corpus: CorpusSource | None = Field(None, description="where the knowledge base's documents come from")
    questions: QuestionSource | None = Field(None, description="the labelled questions")
    outdated: str | None = Field(
        None,
        description=(
            "Older versions (outdated scenarios): JSONL `{id, answer, date}` (+ optional `text`, the older passage as "
            "it read then; without it the current chunk with the answer replaced and dated)."
        ),
    )
    update_fraction: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description=(
            "Knowledge updates (scenario `update`, needs `outdated`): this share of the taught facts that have an older "
            "version are taught the OLDER answer, so the LoRA's memory is stale and the KB's current chunk right; the "
            "known split's are tested on the `update` cell only, the known-dev split's train the judgement "
            "(scenarios/kb_updates.py). 0: no such facts, and the report says the cell does not apply."
        ),
    )
    snapshot: int | None = Field(
        None,
        description=(
            "The year the knowledge base the LoRA learns is current to. Set: sources show their dates to the base "
            "model and the LoRA alike (`(dated 2021) …`: an older version's date from `outdated`; an `update`'s, one "
            "to three years after this year, as a KB dates a chunk changed after the adapter was trained), so a "
            "newer source can be told from an older one and from a wrong one. null: every source is shown undated."
        ),
    )
    splits: SplitConfig = SplitConfig()
    conflicts_per_item: int = Field(
        1,
        ge=1,
        description=(
            "test factual-error items per question from the set's own conflict passages (ConflictNQ: 5); training "
            "uses only the others"
        ),
    )
    answer_metric: Literal["contains", "token_f1"] = Field(
        "contains",
        description=(
            "How answers are scored in the KB headline: `contains` (a gold answer in the reply), or `token_f1` for "
            "sentence answers (ConflictNQ): mean token F1 to the true answer, and on wrong sources the share of "
            "replies closer in token F1 to the true answer than to the source's value."
        ),
    )
    distractors: Literal["bm25", "retrieval"] = Field(
        "bm25",
        description=(
            "Where hard distractors (irrelevant contexts, the extra sources beside a gold chunk) come from: `bm25` "
            "over the chunks, or `retrieval`, the run's own retriever (rag.retrieval: dense or hybrid with its "
            "embedder), so distractors are what that retriever would actually confuse."
        ),
    )
    paraphrase: ParaphraseConfig = ParaphraseConfig()

    @model_validator(mode="after")
    def _check_updates(self) -> DataConfig:
        if self.world is not None and (self.corpus or self.questions or self.outdated):
            raise ValueError(
                "world: writes the corpus, questions and older versions itself; give either world or "
                "corpus + questions (+ outdated), not both"
            )
        if self.world is None and (self.corpus is None or self.questions is None):
            raise ValueError(
                "give corpus and questions (a knowledge base and its labelled questions), or world (the demo world)"
            )
        if self.update_fraction > 0 and not self.has_outdated:
            raise ValueError("update_fraction needs `outdated` (the older versions the stale facts are taught)")
        return self

    @property
    def has_outdated(self) -> bool:
        """Older versions exist: the user's `outdated` file, or the world's archive."""
        return bool(self.outdated) or self.world is not None
