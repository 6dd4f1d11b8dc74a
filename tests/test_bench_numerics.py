"""`lorarag bench numerics`: the fingerprint of a pinned tiny run and where two machines' bits part."""

from __future__ import annotations

import json

import pytest

from lorarag.bench.numerics import REFERENCE, STAGES, first_difference, run, where_parted
from lorarag.core.numerics import cpu_flags


def test_first_difference_names_the_earliest_stage():
    ref = {s: "x" for s in STAGES}
    assert first_difference(dict(ref), ref) is None
    assert first_difference({**ref, "adapter@2": "y", "forward": "y"}, ref) == "forward"
    assert first_difference({**ref, "adapter@3": "y"}, ref) == "adapter@3"
    assert first_difference({s: "x" for s in STAGES[:-1]}, ref) == STAGES[-1]  # a missing stage differs
    older = {s: "x" for s in STAGES if s not in ("init", "grad@1", "clipped@1")}  # recorded before step 1's stages
    assert first_difference({**ref, "grad@1": "y"}, older) is None
    assert first_difference({**ref, "grad@1": "y", "adapter@1": "y"}, older) == "adapter@1"


def test_a_first_difference_blames_the_stage_it_isolates():
    full = {s: "x" for s in STAGES}
    older = {s: "x" for s in STAGES if s not in ("init", "grad@1", "clipped@1")}
    assert where_parted("grad@1", full) == "the backward pass"
    assert where_parted("adapter@1", full) == "the optimiser (AdamW)"  # everything before it agreed
    assert where_parted("adapter@1", older) == "the backward pass or the optimiser"
    assert where_parted("adapter@2", full) == "the backward pass or the optimiser"


def test_committed_references_hold_the_stages_of_their_time():
    refs = json.loads(REFERENCE.read_text())
    older = set(STAGES) - {"init", "grad@1", "clipped@1"}
    assert refs and all(older <= set(r["fingerprint"]) and "avx2" in r["cpu_flags"] for r in refs)
    assert any(set(STAGES) <= set(r["fingerprint"]) for r in refs)


@pytest.mark.slow
def test_a_pinned_run_matches_the_reference_of_the_same_kind_of_cpu(tmp_path):
    """Pinned to the AVX2 paths, a machine of a kind that has a committed fingerprint trains the
    same bits at every stage; the report names the first differing stage against each other kind."""
    lines: list[str] = []
    report = run(tmp_path / "work", tmp_path / "n.json", False, lines.append)
    assert set(report["fingerprint"]) == set(STAGES)
    assert json.loads((tmp_path / "n.json").read_text())["fingerprint"] == report["fingerprint"]
    refs = json.loads(REFERENCE.read_text())
    assert [a["machine"] for a in report["against"]] == [r["machine"] for r in refs]
    for r, a in zip(refs, report["against"]):
        if r["cpu_flags"] == cpu_flags():
            assert a["first_difference"] is None, lines
