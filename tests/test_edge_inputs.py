"""Input that cannot be right is refused at the edge: one line naming the file (line, field), and
valid data beside each case still loads. Special files (FIFO, character device, directory) are
refused before any read, so none of these tests can hang or exhaust memory."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from lorarag.core.config import load_config, validate_data
from lorarag.core.errors import ConfigError, RecordError
from lorarag.core.inputs import check_input_file
from lorarag.eval.records import load_results
from lorarag.rag.config import ChunkerConfig
from lorarag.scenarios.config import CorpusSource, QuestionSource, SplitConfig
from lorarag.scenarios.from_corpus import check_outdated, load_outdated
from lorarag.scenarios.importers import conflictnq
from lorarag.scenarios.kb_corpus import load_corpus
from lorarag.scenarios.kb_labels import map_labels
from lorarag.scenarios.kb_questions import check_against_corpus, load_questions, read_qrels
from lorarag.scenarios.kb_records import QAItem
from lorarag.scenarios.kb_splits import split_by_fact
from lorarag.trained.config import RunConfig

REPO = Path(__file__).resolve().parents[1]
SMALL = ChunkerConfig(chunk_size=120, chunk_overlap=0)
BODY = "The lighthouse of Elmira was built by Ada Moss in 1911."


def _jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _one_line(exc: pytest.ExceptionInfo, *parts: str) -> None:
    msg = str(exc.value)
    assert "\n" not in msg, msg
    for p in parts:
        assert p in msg, (p, msg)


def _q(qid: str = "q1", **kw) -> dict:
    return {"id": qid, "question": "Who built the Elmira lighthouse?", "answers": ["Ada Moss"], "relevant_ids": ["d1"], **kw}


def _questions(tmp: Path, rows: list) -> list[QAItem]:
    return load_questions(QuestionSource(kind="jsonl", path=str(_jsonl(tmp / "q.jsonl", rows))))


# --- special files and directories, before any read ---------------------------------------------


def test_fifo_char_device_and_directory_are_refused_before_reading(tmp_path):
    fifo = tmp_path / "q.jsonl"
    os.mkfifo(fifo)  # reading it would block forever
    with pytest.raises(RecordError) as e:
        load_questions(QuestionSource(kind="jsonl", path=str(fifo)))
    _one_line(e, str(fifo), "questions file is a FIFO", "not a regular file")
    with pytest.raises(RecordError) as e:  # /dev/zero would be read until memory runs out
        load_questions(QuestionSource(kind="jsonl", path="/dev/zero"))
    _one_line(e, "/dev/zero", "a character device")
    with pytest.raises(RecordError) as e:
        load_questions(QuestionSource(kind="squad", path=str(tmp_path)))
    _one_line(e, str(tmp_path), "SQuAD file is a directory")
    with pytest.raises(RecordError) as e:
        load_questions(QuestionSource(kind="conflictnq", path=str(tmp_path)))
    _one_line(e, "ConflictNQ file is a directory")
    with pytest.raises(RecordError) as e:
        load_outdated(str(tmp_path))
    _one_line(e, "older-versions file is a directory")
    with pytest.raises(RecordError) as e:
        read_qrels(tmp_path)
    _one_line(e, "qrels file is a directory")
    with pytest.raises(RecordError) as e:
        load_corpus(CorpusSource(kind="beir", path=str(fifo)), SMALL)
    _one_line(e, "BEIR corpus is a FIFO")
    with pytest.raises(RecordError) as e:
        conflictnq(fifo)
    _one_line(e, "conflict set file is a FIFO")


def test_results_fifo_under_report_is_refused(tmp_path):
    os.mkfifo(tmp_path / "results.jsonl")
    with pytest.raises(RecordError) as e:
        load_results(tmp_path)
    _one_line(e, "results.jsonl", "results file is a FIFO")


def test_size_cap_is_stated(tmp_path):
    f = tmp_path / "big.jsonl"
    f.write_bytes(b"x" * 2048)
    with pytest.raises(RecordError) as e:
        check_input_file(f, "questions file", max_bytes=1024)
    _one_line(e, str(f), "over the", "input limit")
    assert check_input_file(f, "questions file") == f  # under the default 2 GiB


def test_latin1_byte_in_qrels_names_its_line(tmp_path):
    f = tmp_path / "test.tsv"
    f.write_bytes(b"query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\tcaf\xe9\t1\n")
    with pytest.raises(RecordError) as e:
        read_qrels(f)
    _one_line(e, f"{f}:3", "not UTF-8", "0xe9")
    f.write_bytes("query-id\tcorpus-id\tscore\nq1\tcafé\t1\n".encode())
    assert read_qrels(f) == {"q1": [("café", f"{f}:2")]}


@pytest.mark.parametrize("content", [b"just some text\n", b"PAR1\x00\x01\x02"])
def test_broken_parquet_is_one_line(tmp_path, content):
    f = tmp_path / "corpus.parquet"
    f.write_bytes(content)
    with pytest.raises(RecordError) as e:
        load_corpus(CorpusSource(kind="hf", path=str(f)), SMALL)
    _one_line(e, str(f), "not a readable parquet file")


def test_valid_parquet_still_loads(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    f = tmp_path / "corpus.parquet"
    pq.write_table(pa.table({"_id": ["d1"], "text": [BODY], "title": ["Elmira"]}), f)
    assert [d.doc_id for d in load_corpus(CorpusSource(kind="hf", path=str(f)), SMALL).documents] == ["d1"]


# --- records that cannot be right ----------------------------------------------------------------


def _beir(tmp: Path, start: int) -> Path:
    folder = tmp / "beir"
    (folder / "qrels").mkdir(parents=True)
    _jsonl(folder / "corpus.jsonl", [{"_id": "d1", "title": "Elmira", "text": BODY}])
    _jsonl(
        folder / "queries.jsonl",
        [{"_id": "q1", "text": "Who built it?", "metadata": {"answers": ["Ada Moss"], "answer_start": [start]}}],
    )
    (folder / "qrels/test.tsv").write_text("q1\td1\t1\n")
    return folder


def test_beir_answer_start_must_point_at_the_answer(tmp_path):
    folder = _beir(tmp_path, BODY.index("Ada Moss"))
    corpus = load_corpus(CorpusSource(kind="beir", path=str(folder)), SMALL)
    items = load_questions(QuestionSource(kind="beir", path=str(folder)))
    check_against_corpus(map_labels(items, corpus)[0], corpus)  # the right offset passes
    bad = _beir(tmp_path / "b", 4)  # "lighthouse" starts at 4: "lighth" is not "Ada Moss"
    items = load_questions(QuestionSource(kind="beir", path=str(bad)))
    with pytest.raises(RecordError) as e:
        check_against_corpus(items, corpus)
    _one_line(e, f"{bad / 'queries.jsonl'}:1", "answer_start[0]", "does not point at an answer", "'lighth")


@pytest.mark.parametrize("answers,field", [(["..."], "answers[0]"), (["  "], "answers[0]")])
def test_empty_or_punctuation_answer(tmp_path, answers, field):
    with pytest.raises(RecordError) as e:
        _questions(tmp_path, [_q(answers=answers)])
    _one_line(e, f"{tmp_path / 'q.jsonl'}:1", field)


def test_conflict_asserting_the_truth(tmp_path):
    with pytest.raises(RecordError) as e:
        _questions(tmp_path, [_q(conflicts=[{"text": "It was built by ada  moss.", "answer": "ada  MOSS"}])])
    _one_line(e, f"{tmp_path / 'q.jsonl'}:1", "conflicts[0].answer", "is a gold answer")
    corpus = load_corpus(
        CorpusSource(kind="beir", path=str(_jsonl(tmp_path / "c.jsonl", [{"_id": "d1", "title": "", "text": BODY}]))), SMALL
    )
    items = _questions(tmp_path, [_q(conflicts=[{"text": BODY.upper(), "answer": "John Roe"}])])
    with pytest.raises(RecordError) as e:
        check_against_corpus(map_labels(items, corpus)[0], corpus)
    _one_line(e, "q.jsonl:1", "conflicts[0].text", "the real document")
    ok = _questions(tmp_path, [_q(conflicts=[{"text": BODY.replace("Ada Moss", "John Roe"), "answer": "John Roe"}])])
    check_against_corpus(map_labels(ok, corpus)[0], corpus)


def _cnq(tmp: Path, fake_answer: str, fake_passage: str) -> Path:
    return _jsonl(
        tmp / "cnq.jsonl",
        [
            {
                "id": "n1",
                "question": "who built the elmira lighthouse",
                "cleaned_question": "Who built the Elmira lighthouse?",
                "real_short_answer": "Ada Moss",
                "fake_short_answer": fake_answer,
                "real_passages": [{"passage": BODY}],
                "fake_passages": [{"passage": fake_passage}],
            }
        ],
    )


def test_conflictnq_fake_equal_to_real(tmp_path):
    with pytest.raises(RecordError) as e:
        load_questions(QuestionSource(kind="conflictnq", path=str(_cnq(tmp_path, "ada moss", "x by ada moss"))))
    _one_line(e, "cnq.jsonl:1", "fake_short_answer", "is the real short answer")
    with pytest.raises(RecordError) as e:
        load_questions(QuestionSource(kind="conflictnq", path=str(_cnq(tmp_path, "John Roe", BODY))))
    _one_line(e, "cnq.jsonl:1", "fake_passages[0]", "real passage")
    with pytest.raises(RecordError) as e:
        conflictnq(_cnq(tmp_path, "Ada  Moss", "x by John Roe"))
    _one_line(e, "cnq.jsonl:1", "fake_short_answer is the real short answer")
    ok = load_questions(QuestionSource(kind="conflictnq", path=str(_cnq(tmp_path, "John Roe", "By John Roe."))))
    assert ok[0].conflicts[0].answer == "John Roe"
    assert ok[0].wordings == ("who built the elmira lighthouse",)  # differs beyond case: a second wording


def test_identical_paraphrase(tmp_path):
    with pytest.raises(RecordError) as e:
        _questions(tmp_path, [_q(paraphrases=["who built the  Elmira lighthouse? "])])
    _one_line(e, "q.jsonl:1", "paraphrases[0]", "same wording as the question")
    with pytest.raises(RecordError) as e:
        _questions(tmp_path, [_q(paraphrases=["Who made it?", "who made it?"])])
    _one_line(e, "paraphrases[1]", "same wording as paraphrases[0]")
    assert _questions(tmp_path, [_q(paraphrases=["Who made it?"])])[0].wordings == ("Who made it?",)


def _older(tmp: Path, rows: list) -> str:
    return str(_jsonl(tmp / "older.jsonl", rows))


def test_older_versions_that_cannot_be_right(tmp_path):
    items = _questions(
        tmp_path,
        [_q(), {"id": "u1", "question": "Who painted it?", "answers": [], "relevant_ids": [], "unanswerable": True}],
    )
    path = _older(tmp_path, [{"id": "q1", "answer": "ADA moss", "date": "2019"}])
    with pytest.raises(RecordError) as e:
        check_outdated(load_outdated(path), items, "q.jsonl")
    _one_line(e, f"{path}:1", "answer", "is the current gold answer")
    with pytest.raises(RecordError) as e:
        load_outdated(
            _older(
                tmp_path,
                [{"id": "q1", "answer": "John Roe", "date": "2019", "text": "The lighthouse was built by Ada Moss."}],
            )
        )
    _one_line(e, "older.jsonl:1", "text: does not hold its older answer 'John Roe'")
    path = _older(
        tmp_path, [{"id": "q1", "answer": "John Roe", "date": "2019"}, {"id": "u1", "answer": "Eve Lin", "date": "2019"}]
    )
    with pytest.raises(RecordError) as e:
        check_outdated(load_outdated(path), items, "q.jsonl")
    _one_line(e, f"{path}:2", "'u1'", "has no answer")
    with pytest.raises(RecordError) as e:
        load_outdated(_older(tmp_path, []))
    _one_line(e, "older.jsonl", "no older versions (empty file)")
    ok = load_outdated(
        _older(
            tmp_path, [{"id": "q1", "answer": "John Roe", "date": "2019", "text": "The lighthouse was built by John  Roe."}]
        )
    )
    check_outdated(ok, items, "q.jsonl")
    assert [o.answer for o in ok["q1"]] == ["John Roe"]


# --- counts and config keys -----------------------------------------------------------------------


def test_unanswerable_questions_do_not_count_as_facts(tmp_path):
    rows = [{"id": f"a{i}", "question": f"Q{i}?", "answers": [f"v{i}"], "relevant_ids": [f"d{i}"]} for i in range(4)]
    rows += [
        {"id": f"u{i}", "question": f"U{i}?", "answers": [], "relevant_ids": [], "unanswerable": True} for i in range(6)
    ]
    items = _questions(tmp_path, rows)
    with pytest.raises(RecordError) as e:
        split_by_fact(items, SplitConfig())
    _one_line(e, "4 fact(s) with answers", "unanswerable questions do not count")
    rows.append({"id": "a4", "question": "Q4?", "answers": ["v4"], "relevant_ids": ["d4"]})
    # 5 answered facts among 11: seed 0 leaves both dev parts with unanswerable questions only, which
    # the gate could not calibrate on (it was a ValueError after training)
    with pytest.raises(RecordError) as e:
        split_by_fact(_questions(tmp_path, rows), SplitConfig())
    _one_line(e, "splits.seed 0", "known_dev and unseen_dev hold no question with an answer")
    groups = split_by_fact(_questions(tmp_path, [*rows[:5], rows[-1]]), SplitConfig())  # a0-a4 and u0
    assert sorted(it.qid for g in groups.values() for it in g) == ["a0", "a1", "a2", "a3", "a4", "u0"]
    assert all(any(it.answers for it in groups[g]) for g in ("known_dev", "unseen_dev"))


def _kb() -> dict:
    # every field written: a dump validates again
    return load_config(REPO / "configs/run/ci-kb-tiny.yaml", RunConfig).model_dump()


@pytest.mark.parametrize(
    "section,key,value,msg",
    [
        ("questions", "split", "dev", "split: only for kind beir, not conflictnq"),
        ("corpus", "id_field", "pid", "id_field: only for kind hf, not conflictnq"),
        ("corpus", "strict", True, "strict: only for kind folder, not conflictnq"),
    ],
)
def test_keys_meaningless_for_the_kind_fail_validation(section, key, value, msg):
    kb = _kb()
    kb["data"][section][key] = value
    with pytest.raises(ConfigError, match=msg):
        validate_data(kb, RunConfig, "x.yaml")
    validate_data(_kb(), RunConfig, "x.yaml")  # the shipped config itself is valid


def test_outdated_scenarios_need_older_versions():
    kb = _kb()
    kb["eval"]["scenarios"] = ["consistent", "outdated"]
    with pytest.raises(ConfigError, match="eval.scenarios: outdated needs data.outdated"):
        validate_data(kb, RunConfig, "x.yaml")
    kb["data"]["outdated"] = "older.jsonl"
    validate_data(kb, RunConfig, "x.yaml")
