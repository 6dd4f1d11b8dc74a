"""A user's corpus + labelled questions in every format, the label mapping, and bad inputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lorarag.core.errors import RecordError
from lorarag.rag.config import ChunkerConfig
from lorarag.scenarios.config import CorpusSource, QuestionSource
from lorarag.scenarios.from_corpus import load_outdated
from lorarag.scenarios.kb_corpus import load_corpus
from lorarag.scenarios.kb_labels import answer_pattern, find_answer, map_labels
from lorarag.scenarios.kb_questions import load_questions
from tests.conftest import shared_data

SMALL = ChunkerConfig(chunk_size=120, chunk_overlap=0)


def _jsonl(path: Path, rows: list) -> Path:
    path.write_text(
        "".join((r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n" for r in rows), encoding="utf-8"
    )
    return path


def _beir(tmp: Path) -> Path:
    folder = tmp / "beir"
    (folder / "qrels").mkdir(parents=True)
    body = (
        "The harbour of Elmira was dredged in 1911.\n\nIts lighthouse, built by Ada Moss, is "
        "twelve metres tall and still lit every night."
    )
    _jsonl(
        folder / "corpus.jsonl",
        [
            {"_id": "d1", "title": "Elmira harbour", "text": body},
            {"_id": "d2", "title": "Dunmore", "text": "Dunmore has no harbour at all."},
        ],
    )
    start = body.index("Ada Moss")
    _jsonl(
        folder / "queries.jsonl",
        [
            {
                "_id": "q1",
                "text": "Who built the Elmira lighthouse?",
                "metadata": {"answers": ["Ada Moss"], "answer_start": [start]},
            },
            {"_id": "q2", "text": "When was the harbour of Elmira dredged?", "metadata": {"answer": "1911"}},
            {"_id": "q3", "text": "Is there a harbour in Dunmore?"},
            {"_id": "q4", "text": "Not in the split"},
        ],
    )
    (folder / "qrels/test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td1\t1\nq3\td2\t1\nq3\td1\t0\n")
    return folder


def test_beir_corpus_and_queries_with_spans_answers_and_qrels(tmp_path):
    folder = _beir(tmp_path)
    corpus = load_corpus(CorpusSource(kind="beir", path=str(folder)), SMALL)
    assert [d.doc_id for d in corpus.documents] == ["d1", "d2"]
    assert corpus.documents[0].text.startswith("Elmira harbour\n\nThe harbour")
    assert corpus.body_offset == {"d1": len("Elmira harbour") + 2, "d2": len("Dunmore") + 2}
    items = load_questions(QuestionSource(kind="beir", path=str(folder), split="test"))
    assert [i.qid for i in items] == ["q1", "q2", "q3"]  # q4 has no qrels in the split
    assert items[0].labels[0].start is not None and items[1].answers == ("1911",) and items[2].answers == ()
    mapped, rows = map_labels(items, corpus)
    d1 = [c for c in corpus.chunks if c.doc_id == "d1"]
    assert len(d1) == 2  # the two paragraphs
    lighthouse = next(c for c in d1 if "Ada Moss" in c.text)
    assert mapped[0].relevant_ids == (lighthouse.chunk_id,)  # the span, shifted past the title
    assert mapped[1].relevant_ids == (next(c for c in d1 if "1911" in c.text).chunk_id,)  # answer text
    assert mapped[2].relevant_ids == tuple(c.chunk_id for c in corpus.chunks if c.doc_id == "d2")
    assert [r.rule for r in rows] == ["span", "answer", "document"]


def test_folder_corpus_and_jsonl_questions(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "law.md").write_text(
        "# Law\n\n## Article 5\n\nRegistration is made at the traffic office of the "
        "owner's residence.\n\n## Article 6\n\nPlates are issued within five days.\n"
    )
    (docs / "bad.bin").write_bytes(b"\x00\x01")
    corpus = load_corpus(CorpusSource(kind="folder", path=str(docs)), ChunkerConfig(kind="heading"))
    assert [d.doc_id for d in corpus.documents] == ["law.md"] and "bad.bin" in corpus.problems[0]
    art6 = next(c for c in corpus.chunks if "five days" in c.text)
    qs = _jsonl(
        tmp_path / "qa.jsonl",
        [
            {
                "id": "a",
                "question": "Where is a vehicle registered?",
                "answers": ["the traffic office"],
                "relevant_ids": ["law.md"],
                "paraphrases": ["Which office registers a vehicle?"],
            },
            {
                "id": "b",
                "question": "How long does it take to issue plates?",
                "answers": ["five days"],
                "relevant_ids": [art6.chunk_id],
                "language": "en",
            },
            {"id": "c", "question": "Who wrote the law?", "answers": [], "relevant_ids": [], "unanswerable": True},
        ],
    )
    items = load_questions(QuestionSource(kind="jsonl", path=str(qs)))
    assert items[0].all_wordings == ("Where is a vehicle registered?", "Which office registers a vehicle?")
    mapped, rows = map_labels(items, corpus)
    assert mapped[0].relevant_ids == (next(c for c in corpus.chunks if "traffic office" in c.text).chunk_id,)
    assert mapped[1].relevant_ids == (art6.chunk_id,) and rows[1].rule == "chunk"
    assert mapped[2].relevant_ids == () and mapped[2].unanswerable and len(rows) == 2


def _squad(tmp: Path) -> Path:
    ctx = "Normandy is a region in France. The Normans gave their name to it in the 10th century."
    data = {
        "version": "v2.0",
        "data": [
            {
                "title": "Normans",
                "paragraphs": [
                    {
                        "context": ctx,
                        "qas": [
                            {
                                "id": "s1",
                                "question": "In what country is Normandy?",
                                "is_impossible": False,
                                "answers": [
                                    {"text": "France", "answer_start": ctx.index("France")},
                                    {"text": "France", "answer_start": ctx.index("France")},
                                ],
                            },
                            {
                                "id": "s2",
                                "question": "Who gave their name to Sweden?",
                                "is_impossible": True,
                                "answers": [],
                                "plausible_answers": [{"text": "Normans", "answer_start": 32}],
                            },
                        ],
                    }
                ],
            }
        ],
    }
    path = tmp / "squad.json"
    path.write_text(json.dumps(data))
    return path


def test_squad_v2_keeps_offsets_and_unanswerable_questions(tmp_path):
    path = _squad(tmp_path)
    corpus = load_corpus(CorpusSource(kind="squad", path=str(path)), ChunkerConfig(chunk_size=40, chunk_overlap=0))
    assert corpus.documents[0].doc_id == "Normans/0" and corpus.documents[0].text.startswith("Normans\n\n")
    items = load_questions(QuestionSource(kind="squad", path=str(path)))
    assert items[0].answers == ("France",) and items[0].labels[0].start == 24 and len(items[0].labels) == 1
    assert items[1].unanswerable and items[1].answers == ()
    mapped, rows = map_labels(items, corpus)
    (c,) = [x for x in corpus.chunks if x.chunk_id in mapped[0].relevant_ids]
    assert "France" in c.text and "10th century" not in c.text and rows[0].rule == "span"
    assert mapped[1].relevant_ids == ()


def test_hf_dataset_folder_parquet_and_jsonl(tmp_path):
    import datasets

    rows = {
        "id": ["h1", "h2"],
        "body": ["The mill of Kelso grinds oats.", "Kelso has a stone bridge."],
        "name": ["Mill", "Bridge"],
    }
    ds = datasets.Dataset.from_dict(rows)
    datasets.DatasetDict({"train": ds}).save_to_disk(str(tmp_path / "dd"))
    ds.to_parquet(str(tmp_path / "c.parquet"))
    ds.to_json(str(tmp_path / "c.jsonl"))
    for path, split in ((tmp_path / "dd", "train"), (tmp_path / "c.parquet", None), (tmp_path / "c.jsonl", None)):
        src = CorpusSource(kind="hf", path=str(path), split=split, id_field="id", text_field="body", title_field="name")
        corpus = load_corpus(src, SMALL)
        assert [d.doc_id for d in corpus.documents] == ["h1", "h2"], path
        assert corpus.documents[0].text == "Mill\n\nThe mill of Kelso grinds oats."
    with pytest.raises(RecordError, match=r"split: required \(splits: train\)"):
        load_corpus(CorpusSource(kind="hf", path=str(tmp_path / "dd"), id_field="id", text_field="body"), SMALL)
    with pytest.raises(RecordError, match=r"row 0: text: required field missing"):
        load_corpus(CorpusSource(kind="hf", path=str(tmp_path / "c.parquet"), id_field="id"), SMALL)


def test_conflictnq_kb_reads_real_passages_two_wordings_and_fabricated_conflicts(tmp_path):
    row = {
        "id": "7",
        "question": "who built the elmira lighthouse",
        "cleaned_question": "Who built the lighthouse?",
        "real_short_answer": "Ada Moss",
        "fake_short_answer": "Tom Reed",
        "real_passages": [{"passage": "The lighthouse was built by Ada Moss .", "summary": "Lighthouse"}],
        "fake_passages": [{"passage": "Tom Reed built the lighthouse ."}, {"passage": "Built by Tom Reed ."}],
    }
    path = _jsonl(tmp_path / "val.jsonl", [row])
    corpus = load_corpus(CorpusSource(kind="conflictnq", path=str(path)), SMALL)
    assert corpus.documents[0].doc_id == "7/real0" and corpus.documents[0].text == row["real_passages"][0]["passage"]
    (it,) = load_questions(QuestionSource(kind="conflictnq", path=str(path)))
    assert it.all_wordings == ("Who built the lighthouse?", "who built the elmira lighthouse")
    assert [c.answer for c in it.conflicts] == ["Tom Reed"] * 2
    (m,), rows = map_labels([it], corpus)
    assert m.relevant_ids == (corpus.chunks[0].chunk_id,) and rows[0].rule == "answer"


def test_answers_match_whatever_the_spacing_and_at_word_edges():
    assert find_answer("released on August 8 , 2014 .", ["August 8, 2014"])[1].group(0) == "August 8 , 2014"
    assert find_answer("in 19110", ["1911"]) is None and find_answer("de 1911.", ["1911"]) is not None
    assert find_answer("由公安机关交通管理部门办理", ["交通管理部门"]) is not None
    assert answer_pattern("  ") is None


def test_a_cjk_character_is_a_word_edge_of_an_answer_and_a_digit_or_letter_is_not():
    """Chinese writes no space: 为 before 2.8亿元 is an edge, so the world's 净利润为2.8亿元 holds its answer;
    a digit before it (12.8亿元) or a letter before a year (a2019) is the same word, no match."""
    assert answer_pattern("2.8亿元").search("净利润为2.8亿元").group(0) == "2.8亿元"
    assert find_answer("某公司最近一个财年的净利润为2.8亿元。", ["2.8亿元"])[1].group(0) == "2.8亿元"
    assert answer_pattern("2.8亿元").search("净利润为12.8亿元") is None
    assert answer_pattern("2019").search("a2019") is None and answer_pattern("2019").search("2019a") is None
    assert answer_pattern("2019").search("成立于2019年").group(0) == "2019"  # CJK on both sides
    assert answer_pattern("2019").search("(2019)").group(0) == "2019"


def test_older_versions_of_one_question_are_one_line_each_in_the_files_order(tmp_path):
    """A question may have several older versions (one line each); they load under its id in the
    file's order, whatever lines of other ids come between, each keeping its own file:line."""
    path = _jsonl(
        tmp_path / "older.jsonl",
        [
            {"id": "q1", "answer": "John Roe", "date": "2019"},
            {"id": "q2", "answer": "1908", "date": "1909 guide"},
            {"id": "q1", "answer": "Eve Lin", "date": "2021", "text": "In 2021 the keeper was Eve Lin."},
        ],
    )
    old = load_outdated(str(path))
    assert list(old) == ["q1", "q2"]
    assert [(o.qid, o.answer, o.date, o.text) for o in old["q1"]] == [
        ("q1", "John Roe", "2019", None),
        ("q1", "Eve Lin", "2021", "In 2021 the keeper was Eve Lin."),
    ]
    assert [o.where for o in old["q1"]] == [f"{path}:1", f"{path}:3"]
    assert [o.answer for o in old["q2"]] == ["1908"]


def test_the_same_older_answer_twice_for_one_question_is_a_one_line_error_naming_both_lines(tmp_path):
    """Case and spacing aside ('john  ROE' is 'John Roe'): the error names the repeating line and the
    first; the same older answer for two different questions is fine."""
    path = _jsonl(
        tmp_path / "older.jsonl",
        [
            {"id": "q1", "answer": "John Roe", "date": "2019"},
            {"id": "q2", "answer": "John Roe", "date": "2019"},
            {"id": "q1", "answer": "john  ROE", "date": "2021"},
        ],
    )
    with pytest.raises(RecordError) as e:
        load_outdated(str(path))
    assert str(e.value) == f"{path}:3: id 'q1': older answer 'john  ROE' repeats ({path}:1)"
    assert "\n" not in str(e.value)
    _jsonl(path, [{"id": "q1", "answer": "John Roe", "date": "2019"}, {"id": "q2", "answer": "John Roe", "date": "2019"}])
    assert [v[0].answer for v in load_outdated(str(path)).values()] == ["John Roe", "John Roe"]


@pytest.mark.parametrize(
    "line, message",
    [
        (
            '{"id": "a", "question": "Q?", "answers": "1911", "relevant_ids": ["d1"]}',
            r"qa.jsonl:2 \(id a\): answers: expected a list, got a string",
        ),
        ('{"id": "a", "question": "Q?", "answers": [], "relevant_ids": ["d1"]}', r"qa.jsonl:2 \(id a\): answers: empty"),
        ('{"id": "a", "question": "Q?", "answers": [""], "relevant_ids": ["d1"]}', r"answers\[0\]: empty"),
        (
            '{"id": "a", "question": "Q?", "answers": [1911], "relevant_ids": ["d1"]}',
            r"answers\[0\]: expected a string, got a number",
        ),
        ('{"id": 5, "question": "Q?", "answers": ["x"], "relevant_ids": ["d1"]}', r"qa.jsonl:2: id: expected a string"),
        ('{"id": "a", "question": "Q?", "answers": ["x"], "relevant_ids": ["d1"], "answer": "x"}', r"answer: unknown field"),
        (
            '{"id": "a", "question": "Q?", "answers": ["x"], "relevant_ids": ["d1"], "unanswerable": "no"}',
            r"unanswerable: expected true or false, got a string",
        ),
        ('{"id": "a", "question": "Q?", "answers": ["x"], "relevant_ids": []', r"qa.jsonl:2: malformed JSON"),
        ('["a"]', r"qa.jsonl:2: expected a JSON object, got a list"),
        (
            '{"id": "ok", "question": "Q?", "answers": ["x"], "relevant_ids": ["d1"]}',
            r"qa.jsonl:2 \(id ok\): id 'ok' "
            r"repeats \(.*qa.jsonl:1",
        ),
    ],
)
def test_bad_jsonl_questions_are_one_line_errors_with_file_line_and_field(tmp_path, line, message):
    first = '{"id": "ok", "question": "Fine?", "answers": ["x"], "relevant_ids": ["d1"]}'
    path = _jsonl(tmp_path / "qa.jsonl", [first, line])
    with pytest.raises(RecordError, match=message):
        load_questions(QuestionSource(kind="jsonl", path=str(path)))


def test_unknown_ids_and_labels_that_map_to_no_chunk_name_the_item(tmp_path):
    folder = _beir(tmp_path)
    corpus = load_corpus(CorpusSource(kind="beir", path=str(folder)), SMALL)
    qs = _jsonl(tmp_path / "qa.jsonl", [{"id": "z", "question": "Q?", "answers": ["x"], "relevant_ids": ["d9"]}])
    with pytest.raises(RecordError, match=r"qa.jsonl:1 \(id z\): 'd9' is neither a document nor a chunk"):
        map_labels(load_questions(QuestionSource(kind="jsonl", path=str(qs))), corpus)
    with (folder / "qrels/test.tsv").open("a") as fh:
        fh.write("q9\td1\t1\n")
    with pytest.raises(RecordError, match=r"test.tsv:6: query-id 'q9' is not in"):
        load_questions(QuestionSource(kind="beir", path=str(folder)))
    (folder / "qrels/test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\n")
    with pytest.raises(RecordError, match=r"test.tsv:2: expected 3 tab-separated fields"):
        load_questions(QuestionSource(kind="beir", path=str(folder)))
    _jsonl(folder / "corpus.jsonl", [{"_id": "d1", "text": "a"}, {"_id": "d1", "text": "b"}])
    with pytest.raises(RecordError, match=r"corpus.jsonl:2: document id 'd1' repeats"):
        load_corpus(CorpusSource(kind="beir", path=str(folder)), SMALL)
    bad = _squad(tmp_path)
    bad.write_text(bad.read_text().replace('"answer_start": 24', '"answer_start": 3'))
    with pytest.raises(RecordError, match=r"qas\[0\] \(id s1\): answers\[0\]: answer_start 3 does not point"):
        load_questions(QuestionSource(kind="squad", path=str(bad)))
    with pytest.raises(RecordError, match="not found"):
        load_questions(QuestionSource(kind="jsonl", path=str(tmp_path / "none.jsonl")))


# ---- the real sets of ../shared/data (skipped when absent) ----------------------------------------


def test_real_beir_sets_load_and_map_every_label():
    for name, lang in (("piaf-fr", None), ("lecoqa", "zh")):
        folder = shared_data(name)
        corpus = load_corpus(CorpusSource(kind="beir", path=str(folder)), ChunkerConfig())
        items = load_questions(QuestionSource(kind="beir", path=str(folder), split="test"))
        mapped, rows = map_labels(items, corpus)
        assert all(m.relevant_ids for m in mapped)
        if name == "piaf-fr":  # offsets into each page: every answer span lies in the chunks it maps to
            assert len(items) == 105 and {r.rule for r in rows} <= {"span", "span_overlap"}
            by_id = {c.chunk_id: c for c in corpus.chunks}
            for it in mapped:
                assert any(a[:20] in by_id[c].text for c in it.relevant_ids for a in it.answers), it.qid
        else:
            assert len(items) == 309 and all(len(i.answers) == 1 for i in items)
            assert {i.language for i in items} == {lang}  # auto: every question is Chinese


def test_real_conflictnq_and_traffic_law_folder():
    path = shared_data("conflictnq") / "val.jsonl"
    # one chunk a passage (the longest has 4,031 characters)
    corpus = load_corpus(CorpusSource(kind="conflictnq", path=str(path)), ChunkerConfig(chunk_size=5000))
    items = load_questions(QuestionSource(kind="conflictnq", path=str(path)))
    mapped, rows = map_labels(items, corpus)
    assert len(items) == 225 and all(len(i.conflicts) == 5 and len(i.all_wordings) == 2 for i in items)
    assert all(len(m.relevant_ids) == 1 for m in mapped) and {r.rule for r in rows} == {"answer", "document"}
    law = shared_data("traffic-law")
    corpus = load_corpus(CorpusSource(kind="folder", path=str(law)), ChunkerConfig(kind="heading"))
    assert len(corpus.documents) == 6 and not corpus.problems
    doc = "road-traffic-safety-law-implementing-regulations-2017.md"
    qs = [
        {
            "id": "art5",
            "question": "初次申领机动车号牌、行驶证的，应当向哪个部门申请注册登记？",
            "answers": ["机动车所有人住所地的公安机关交通管理部门"],
            "relevant_ids": [doc],
        }
    ]
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        (it,) = load_questions(QuestionSource(kind="jsonl", path=str(_jsonl(Path(tmp) / "q.jsonl", qs))))
    (m,), (row,) = map_labels([it], corpus)
    assert it.language == "zh" and row.rule == "answer"
    assert any("第五条" in c.text for c in corpus.chunks if c.chunk_id in m.relevant_ids)
