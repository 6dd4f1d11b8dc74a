"""`index.dense.kind: milvus` against an embedded Milvus Lite file: the same results as FAISS on the
same corpus, atomic rebuilds through an alias, and one-line errors for a server that is down."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lorarag.core.errors import ConfigError
from lorarag.rag.config import (
    BM25Config,
    ChunkerConfig,
    CorpusConfig,
    DenseIndexConfig,
    EmbedderConfig,
    IndexConfig,
    RetrievalConfig,
)
from lorarag.rag.index.milvus import MilvusPart, MilvusUnavailable, connect
from lorarag.rag.index.store import build_index, open_index
from lorarag.rag.retrieve import load_retriever
from lorarag.testing.servers import free_port

pytest.importorskip("pymilvus", reason="pymilvus[milvus_lite] is not installed (make install)")

TEXTS = [
    f"Organisation {i} is based in city {i % 7} and was founded in {1950 + i}; it makes product {i % 5}." for i in range(60)
]


def _corpus(tmp_path: Path) -> Path:
    kb = tmp_path / "kb"
    kb.mkdir(exist_ok=True)
    for i, t in enumerate(TEXTS):
        (kb / f"d{i:02d}.md").write_text(t, encoding="utf-8")
    return kb


def _cfgs(tmp_path: Path, tiny_models, dense: DenseIndexConfig, name: str):
    ecfg = EmbedderConfig(kind="transformers", model=str(tiny_models["embedder"]), query_instruction=None)
    icfg = IndexConfig(dir=str(tmp_path / name), bm25=BM25Config(), dense=dense)
    return CorpusConfig(paths=[str(_corpus(tmp_path))]), ChunkerConfig(), icfg, ecfg


def test_milvus_lite_gives_faiss_results_dense_and_hybrid(tiny_models, tmp_path):
    corpus, chunker, faiss_cfg, ecfg = _cfgs(tmp_path, tiny_models, DenseIndexConfig(kind="flat"), "faiss")
    _, _, milvus_cfg, _ = _cfgs(tmp_path, tiny_models, DenseIndexConfig(kind="milvus"), "milvus")
    build_index(corpus, chunker, faiss_cfg, ecfg)
    m = build_index(corpus, chunker, milvus_cfg, ecfg)
    assert m.dense_kind == "milvus" and (tmp_path / "milvus" / "dense.milvus.json").is_file()
    assert (tmp_path / "milvus.milvus.db").exists()  # the Lite file sits beside the folder, not inside
    queries = [TEXTS[3], "founded in 1990", "city 4 product 2", TEXTS[41]]
    for mode in ("dense", "hybrid"):
        f = load_retriever(faiss_cfg, RetrievalConfig(mode=mode), ecfg).retrieve(queries, 10)
        r = load_retriever(milvus_cfg, RetrievalConfig(mode=mode), ecfg).retrieve(queries, 10)
        for a, b in zip(f, r):
            assert [x.chunk.chunk_id for x in a] == [x.chunk.chunk_id for x in b]
            assert np.allclose([x.score for x in a], [x.score for x in b], atol=1e-4)
    hit = load_retriever(milvus_cfg, RetrievalConfig(mode="dense"), ecfg).retrieve([TEXTS[3]], 1)[0][0]
    assert hit.chunk.text == TEXTS[3] and hit.score == pytest.approx(1.0, abs=1e-4)


def test_rebuild_switches_the_alias_and_an_interrupted_one_leaves_the_old_serving(tiny_models, tmp_path, monkeypatch):
    corpus, chunker, icfg, ecfg = _cfgs(tmp_path, tiny_models, DenseIndexConfig(kind="milvus"), "idx")
    build_index(corpus, chunker, icfg, ecfg)
    first = open_index(icfg, ecfg).dense.collection
    client = connect(str(tmp_path / "idx.milvus.db"), None)
    assert client.describe_alias("lorarag")["collection_name"] == first

    (Path(corpus.paths[0]) / "extra.md").write_text("A new organisation opened in city 99.", encoding="utf-8")

    def killed(self, path):
        raise KeyboardInterrupt  # as if the build were killed after inserting, before the switch

    monkeypatch.setattr(MilvusPart, "save", killed)
    with pytest.raises(KeyboardInterrupt):
        build_index(corpus, chunker, icfg, ecfg)
    monkeypatch.undo()
    old = open_index(icfg, ecfg)
    assert old.dense.collection == first and old.dense.ntotal == len(TEXTS)  # the old build still serves
    assert client.describe_alias("lorarag")["collection_name"] == first
    assert len([c for c in client.list_collections() if c.startswith("lorarag__")]) == 2  # + the orphan

    build_index(corpus, chunker, icfg, ecfg)
    new = open_index(icfg, ecfg)
    assert new.dense.collection != first and new.dense.ntotal == len(TEXTS) + 1
    assert client.describe_alias("lorarag")["collection_name"] == new.dense.collection
    assert [c for c in client.list_collections() if c.startswith("lorarag__")] == [new.dense.collection]


def test_a_server_that_is_down_is_a_one_line_error(tiny_models, tmp_path):
    dense = DenseIndexConfig(kind="milvus", milvus_uri=f"http://127.0.0.1:{free_port()}")
    corpus, chunker, icfg, ecfg = _cfgs(tmp_path, tiny_models, dense, "idx")
    with pytest.raises(MilvusUnavailable) as err:
        build_index(corpus, chunker, icfg, ecfg)
    assert "cannot connect to Milvus at http://127.0.0.1:" in str(err.value) and "\n" not in str(err.value)
    assert not Path(icfg.dir).exists()  # nothing half-built left behind


def test_the_token_comes_from_the_environment_never_the_config(monkeypatch):
    monkeypatch.delenv("MILVUS_TEST_TOKEN", raising=False)
    with pytest.raises(ConfigError, match="MILVUS_TEST_TOKEN is not set"):
        connect("http://127.0.0.1:1", "MILVUS_TEST_TOKEN")


@pytest.mark.parametrize(
    "kw,message",
    [
        ({"kind": "milvus", "milvus_uri": "milvus.sqlite"}, "a server URL"),
        ({"kind": "flat", "milvus_uri": "x.db"}, "are for kind: milvus"),
        ({"kind": "milvus", "milvus_collection": "9bad-name"}, "letters, digits"),
    ],
)
def test_bad_milvus_settings_are_refused(kw, message):
    with pytest.raises(ValueError, match=message):
        DenseIndexConfig(**kw)


def test_cli_index_and_search_on_milvus_lite(tiny_models, tmp_path):
    """`lorarag index` / `lorarag search` with a config whose index points at Milvus Lite."""
    kb = _corpus(tmp_path)
    cfg = tmp_path / "rag.yaml"
    cfg.write_text(
        f"corpus: {{paths: [{kb}]}}\nindex: {{dir: {tmp_path / 'idx'}, dense: {{kind: milvus}}}}\n"
        f"embedder: {{kind: transformers, model: {tiny_models['embedder']}, query_instruction: null}}\n"
        "retrieval: {mode: hybrid, top_n: 5, top_k: 3}\n"
    )

    def run(*a):
        root = Path(__file__).resolve().parents[1]
        return subprocess.run(
            [sys.executable, "-m", "lorarag.cli", *a], capture_output=True, text=True, timeout=300, cwd=root
        )

    out = run("index", str(cfg))
    assert out.returncode == 0 and "[bm25+dense]" in out.stdout, out.stderr[-1500:]
    found = run("search", TEXTS[7], "--config", str(cfg))
    assert found.returncode == 0 and "d07.md" in found.stdout.splitlines()[0] + found.stdout
