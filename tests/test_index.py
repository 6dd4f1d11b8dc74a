"""BM25 tokenisation and scoring, index directory (manifest, atomic writes), retrieval, CLI."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lorarag.rag.config import BM25Config, ChunkerConfig, CorpusConfig, IndexConfig, RetrievalConfig
from lorarag.rag.index.bm25_faiss import top_k
from lorarag.rag.index.store import IndexMismatch, build_index, open_index, read_manifest
from lorarag.rag.index.textsplit import tokenize
from lorarag.rag.retrieve import load_retriever, rrf_fuse

from .conftest import REPO, shared_data

QUESTION = "初次申领机动车号牌、行驶证的，应当向哪个部门申请注册登记？"
FIFTH = "第五条 初次申领机动车号牌、行驶证的，应当向机动车所有人住所地的公安机关交通管理部门申请注册登记。"


def test_tokenizers_hand_checked() -> None:
    assert tokenize(["机动车 登记"], "char_bigram") == [["机动", "动车", "车登", "登记"]]
    assert tokenize(["L'Élève va à Paris, 2024!"], "word") == [["l", "élève", "va", "à", "paris", "2024"]]
    # auto: CJK runs -> unigrams then bigrams; words elsewhere; punctuation and function words gone.
    assert tokenize(["第5条：机动车。Vélo"], "auto") == [["第", "5", "条", "机", "动", "车", "机动", "动车", "vélo"]]
    assert tokenize(["Qu'est-ce que l'autorité parentale ? The CEO"], "auto") == [["autorité", "parentale", "ceo"]]
    with pytest.raises(ValueError, match="unknown BM25 tokenizer"):
        tokenize(["x"], "nope")


def test_top_k_breaks_ties_by_lower_row() -> None:
    scores = np.array([1.0, 3.0, 2.0, 3.0, 2.0, 2.0], dtype=np.float32)
    idx, val = top_k(scores, 4)
    assert idx.tolist() == [1, 3, 2, 4] and val.tolist() == [3.0, 3.0, 2.0, 2.0]
    assert top_k(scores, 10)[0].tolist() == [1, 3, 2, 4, 5, 0]


def test_rrf_hand_computed() -> None:
    a = (np.array([10, 20, 30]), np.zeros(3))
    b = (np.array([20, 40]), np.zeros(2))
    rows, scores = rrf_fuse([a, b], rrf_k=60, k=3)
    # 20: 1/62 + 1/61; 10: 1/61; 40: 1/62 ties 30 (1/63 < 1/62) -> 40 before 30.
    assert rows.tolist() == [20, 10, 40]
    assert scores[0] == pytest.approx(1 / 62 + 1 / 61) and scores[1] == pytest.approx(1 / 61)


def _write(folder: Path, files: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def _cfgs(tmp_path: Path, corpus: Path, tokenizer: str = "word"):
    return (
        CorpusConfig(paths=[str(corpus)]),
        ChunkerConfig(chunk_size=200, chunk_overlap=20),
        IndexConfig(dir=str(tmp_path / "idx"), bm25=BM25Config(tokenizer=tokenizer)),
    )


def test_bm25_score_matches_lucene_formula(tmp_path: Path) -> None:
    corpus = _write(tmp_path / "kb", {"a.md": "apple banana cherry", "b.md": "banana date", "c.md": "elderberry"})
    c, ch, ix = _cfgs(tmp_path, corpus)
    build_index(c, ch, ix)
    hits = load_retriever(ix, RetrievalConfig()).retrieve(["banana"], 5)[0]
    # Lucene BM25 (no (k1 + 1) factor since Lucene 8): idf = ln(1 + (N - df + .5) / (df + .5)),
    # N = 3, df = 2, avgdl = (3 + 2 + 1) / 3 = 2.
    idf = math.log(1 + (3 - 2 + 0.5) / (2 + 0.5))

    def bm25(tf: int, dl: int) -> float:
        return idf * tf / (tf + 1.5 * (1 - 0.75 + 0.75 * dl / 2))

    assert [h.chunk.doc_id for h in hits] == ["b.md", "a.md"]  # c.md shares no term: left out
    assert hits[0].score == pytest.approx(bm25(1, 2), rel=1e-5)
    assert hits[1].score == pytest.approx(bm25(1, 3), rel=1e-5)
    assert [h.rank for h in hits] == [1, 2] and hits[0].stage == "bm25"
    assert load_retriever(ix, RetrievalConfig()).retrieve(["zzz"], 5) == [[]]


def test_manifest_and_mismatch(tmp_path: Path) -> None:
    corpus = _write(tmp_path / "kb", {"a.md": "alpha beta", "b.md": "gamma"})
    c, ch, ix = _cfgs(tmp_path, corpus)
    m = build_index(c, ch, ix)
    assert read_manifest(ix.dir) == m
    assert (m.n_documents, m.n_chunks, m.bm25_tokenizer, m.dimension) == (2, 2, "word", None)
    assert dict(m.chunker) == {"kind": '"paragraph"', "chunk_size": "200", "chunk_overlap": "20"}
    # Same corpus elsewhere => same corpus hash and chunk ids.
    other = _write(tmp_path / "copy" / "kb", {"a.md": "alpha beta", "b.md": "gamma"})
    ix2 = IndexConfig(dir=str(tmp_path / "idx2"), bm25=BM25Config(tokenizer="word"))
    m2 = build_index(CorpusConfig(paths=[str(other)]), ch, ix2)
    assert m2.corpus_hash == m.corpus_hash
    assert [x.chunk_id for x in open_index(ix).chunks] == [x.chunk_id for x in open_index(ix2).chunks]
    with pytest.raises(IndexMismatch, match="tokenizer=word .* config says tokenizer=auto"):
        open_index(ix.model_copy(update={"bm25": BM25Config(tokenizer="auto")}))
    with pytest.raises(IndexMismatch, match="no index at .*run `lorarag index"):
        open_index(IndexConfig(dir=str(tmp_path / "none")))


def test_interrupted_build_keeps_previous_index(tmp_path: Path, monkeypatch) -> None:
    corpus = _write(tmp_path / "kb", {"a.md": "alpha beta"})
    c, ch, ix = _cfgs(tmp_path, corpus)
    first = build_index(c, ch, ix)
    _write(corpus, {"b.md": "gamma delta"})

    import lorarag.rag.index.store

    def crash(*a, **k):
        raise KeyboardInterrupt  # as if the user pressed Ctrl-C mid-build

    monkeypatch.setattr(lorarag.rag.index.store.BM25Part, "save", crash)
    with pytest.raises(KeyboardInterrupt):
        build_index(c, ch, ix)
    monkeypatch.undo()
    assert read_manifest(ix.dir) == first and len(open_index(ix).chunks) == 1
    assert sorted(p.name for p in (tmp_path).iterdir()) == ["idx", "kb"]  # no half-built folder
    assert build_index(c, ch, ix).n_chunks == 2


def test_nothing_indexable_is_an_error(tmp_path: Path) -> None:
    from lorarag.rag.ingest.parse import IngestError

    corpus = _write(tmp_path / "kb", {"empty.md": ""})
    c, ch, ix = _cfgs(tmp_path, corpus)
    with pytest.raises(IngestError, match="nothing could be indexed: 0 document"):
        build_index(c, ch, ix)
    assert not Path(ix.dir).exists()


def test_regulation_fifth_article_rank_one(tmp_path: Path) -> None:
    root = shared_data("traffic-law")
    ix = IndexConfig(dir=str(tmp_path / "idx"), bm25=BM25Config(tokenizer="auto"))
    build_index(CorpusConfig(paths=[str(root)]), ChunkerConfig(), ix)
    hits = load_retriever(ix, RetrievalConfig()).retrieve([QUESTION, "机动车驾驶证有效期"], 5)
    assert FIFTH in hits[0][0].chunk.text
    assert hits[0][0].chunk.doc_id == "road-traffic-safety-law-implementing-regulations-2017.md"
    assert all(a.score >= b.score for a, b in zip(hits[0], hits[0][1:]))
    assert len(hits) == 2 and len(hits[1]) == 5


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "LORARAG_LOG": "WARNING"}
    return subprocess.run(
        [sys.executable, "-m", "lorarag.cli", *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=300
    )


def test_cli_index_and_search_on_regulation(tmp_path: Path) -> None:
    root = shared_data("traffic-law")
    cfg = tmp_path / "rag.yaml"
    cfg.write_text(f"corpus: {{paths: [{root}]}}\nindex: {{dir: {tmp_path / 'idx'}}}\n", encoding="utf-8")
    # search without an index builds it first, then answers.
    r = _cli("search", QUESTION, "--config", str(cfg), "--k", "3", cwd=REPO)
    assert r.returncode == 0, r.stderr
    first = r.stdout.split("#2")[0]
    assert first.startswith("#1") and "road-traffic-safety-law-implementing-regulations-2017.md" in first
    trace = json.loads((tmp_path / "idx" / "last-retrieval.json").read_text(encoding="utf-8"))
    assert trace["question"] == QUESTION and len(trace["results"]) == 3
    assert FIFTH in trace["results"][0]["chunk"]["text"]
    assert trace["scores"] == sorted(trace["scores"], reverse=True)
    assert trace["sources"][0] == "road-traffic-safety-law-implementing-regulations-2017.md"
    r = _cli("search", QUESTION, "--config", str(cfg), "--json", "--trace", str(tmp_path / "t.json"), cwd=REPO)
    assert json.loads(r.stdout)["results"][0]["rank"] == 1 and (tmp_path / "t.json").exists()


def test_cli_bad_inputs_one_line_errors(tmp_path: Path) -> None:
    kb = _write(tmp_path / "kb", {"good.md": "some text", "bad.md": ""})
    cfg = tmp_path / "rag.yaml"
    cfg.write_text(f"corpus: {{paths: [{kb}]}}\nindex: {{dir: {tmp_path / 'idx'}}}\n", encoding="utf-8")
    r = _cli("index", str(cfg), cwd=REPO)
    assert r.returncode == 0 and "left out  bad.md: empty file" in r.stdout
    r = _cli("index", str(cfg), "--strict", cwd=REPO)
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1].startswith("error: strict ingest")
    (kb / "good.md").write_text("", encoding="utf-8")
    r = _cli("index", str(cfg), cwd=REPO)
    assert r.returncode == 2 and "error: nothing could be indexed" in r.stderr
    assert "Traceback" not in r.stderr
    (kb / "good.md").write_text("some text", encoding="utf-8")
    assert _cli("index", str(cfg), cwd=REPO).returncode == 0
    other = tmp_path / "other.yaml"
    other.write_text(cfg.read_text() + "chunker: {kind: heading}\n", encoding="utf-8")
    r = _cli("search", "text", "--config", str(other), cwd=REPO)
    assert r.returncode == 2 and "index chunked with chunk_overlap=50, chunk_size=500, kind=paragraph" in r.stderr
    typo = tmp_path / "typo.yaml"
    typo.write_text(f"corpus: {{paths: [{kb}]}}\nchunker: {{chunk_szie: 3}}\nindex: {{dir: x}}\n")
    r = _cli("search", "q", "--config", str(typo), cwd=REPO)
    assert r.returncode == 2 and "chunker.chunk_szie: unknown key" in r.stderr


def test_only_our_own_index_folder_is_ever_replaced(tmp_path: Path) -> None:
    from lorarag.rag.index.folder import IndexDirError

    corpus = _write(tmp_path / "kb", {"a.md": "alpha beta"})
    c, ch, ix = _cfgs(tmp_path, corpus)
    mine = _write(tmp_path / "idx", {"thesis.md": "years of work"})  # a folder of the user's own
    with pytest.raises(IndexDirError, match="an existing folder that is not an index .no manifest.json.; refusing"):
        build_index(c, ch, ix)
    assert (mine / "thesis.md").read_text() == "years of work" and sorted(os.listdir(mine)) == ["thesis.md"]
    (mine / "thesis.md").unlink()
    build_index(c, ch, ix)  # an empty folder holds nothing to lose: it becomes the index
    assert build_index(c, ch, ix).n_chunks == 1  # and ours now: rebuilt in place
    afile = tmp_path / "notes.txt"
    afile.write_text("keep me")
    with pytest.raises(IndexDirError, match="is a file, not an index folder"):
        build_index(c, ch, IndexConfig(dir=str(afile), bm25=BM25Config(tokenizer="word")))
    assert afile.read_text() == "keep me" and not list(tmp_path.glob(".notes.txt*"))
    # the corpus itself, or a folder inside it, is never an index folder
    for d in (corpus, corpus / "idx"):
        with pytest.raises(IndexDirError, match="overlap"):
            build_index(c, ch, IndexConfig(dir=str(d), bm25=BM25Config(tokenizer="word")))
    assert sorted(os.listdir(corpus)) == ["a.md"]


def test_a_killed_builds_leftovers_are_removed_by_the_next_build(tmp_path: Path) -> None:
    corpus = _write(tmp_path / "kb", {"a.md": "alpha beta"})
    c, ch, ix = _cfgs(tmp_path, corpus)
    dead = 2**22 + 12345  # above Linux's default pid_max: no such process
    left = _write(tmp_path / f".idx.building-{dead}", {"chunks.jsonl": "{}\n"})
    (left / "bm25").mkdir()
    old = _write(tmp_path / f".idx.old-{dead}", {"manifest.json": "{}"})
    foreign = _write(tmp_path / f".idx.building-{dead + 1}", {"chunks.jsonl": "", "mine.txt": "x"})
    running = _write(tmp_path / f".idx.building-{os.getppid()}", {"chunks.jsonl": ""})  # a live build
    other = _write(tmp_path / f".idx2.building-{dead}", {"chunks.jsonl": ""})  # another index's
    build_index(c, ch, ix)
    assert not left.exists() and not old.exists()
    assert foreign.exists() and running.exists() and other.exists()


def test_a_corpus_changed_after_indexing_is_a_stale_index(tmp_path: Path) -> None:
    from lorarag.rag.index.store import check_fresh

    corpus = _write(tmp_path / "kb", {"a.md": "alpha beta", "b.md": "gamma"})
    c, ch, ix = _cfgs(tmp_path, corpus)
    m = build_index(c, ch, ix)
    assert [name for name, _ in m.sources] == ["a.md", "b.md"]
    assert check_fresh(c, ch, ix) == m
    os.utime(corpus / "a.md", (0, 0))  # touched, same bytes: still fresh
    check_fresh(c, ch, ix)
    (corpus / "a.md").write_text("alpha beta delta", encoding="utf-8")
    _write(corpus, {"c.md": "new"})
    with pytest.raises(
        IndexMismatch,
        match=r"stale index: the corpus changed since it was indexed "
        r"\(1 changed, 1 added, 0 removed, e.g. a.md\); rebuild",
    ):
        check_fresh(c, ch, ix)
    (corpus / "notes.xlsx").write_bytes(b"PK")  # no reader takes it: it cannot change the index
    build_index(c, ch, ix)
    check_fresh(c, ch, ix)


def test_corrupt_bm25_or_faiss_files_are_one_line_errors(tmp_path: Path) -> None:
    from lorarag.rag.config import DenseIndexConfig
    from lorarag.rag.index.bm25_faiss import DensePart

    corpus = _write(tmp_path / "kb", {"a.md": "alpha beta", "b.md": "gamma"})
    c, ch, ix = _cfgs(tmp_path, corpus)
    build_index(c, ch, ix)
    vocab = Path(ix.dir) / "bm25" / "vocab.index.json"
    for garbage in ("{not json", "[1, 2]", '{"alpha": "x"}', ""):
        vocab.write_text(garbage, encoding="utf-8")
        with pytest.raises(IndexMismatch, match=r"bm25: unreadable BM25 index .*rebuild with `lorarag index"):
            open_index(ix)
    bad = tmp_path / "dense.faiss"
    bad.write_bytes(b"not a faiss index")
    with pytest.raises(IndexMismatch, match="dense.faiss: unreadable FAISS index"):
        DensePart.load(bad, DenseIndexConfig(gpu="never"))


def test_dense_mode_without_a_dense_index_is_a_config_error(tmp_path: Path) -> None:
    corpus = _write(tmp_path / "kb", {"a.md": "alpha beta"})
    c, ch, ix = _cfgs(tmp_path, corpus)
    build_index(c, ch, ix)
    with pytest.raises(
        IndexMismatch,
        match=r"retrieval mode dense needs a dense index \(index.dense\) and an "
        r"`embedder`; .* configured without index.dense",
    ):
        load_retriever(ix, RetrievalConfig(mode="dense"))
    for bad in ({"top_k": 0}, {"top_k": -3}, {"top_n": 0}, {"min_score": 1.5}):
        with pytest.raises(ValueError):
            RetrievalConfig(**bad)
