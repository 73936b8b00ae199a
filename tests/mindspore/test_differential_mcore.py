"""A tiny Qwen3 and a tiny TeleChat3 (mcore), each built twice per case: MindFormers applying the sections itself (its mcore
LayerSetting, swap in its own `model_config` spelling) and mf_memopt applying its plan to the model built
with that handling off (`tests/children/mcore_builds.py`, in a child process). Every cell and primitive of the decoder
layers must carry the same recompute, recompute_comm_op, offload and backward_prefetch marks, except where
the semantics differ on purpose; those cases assert the difference."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[2]
SAME = ("full recompute by per-stage count", "full recompute of every layer",
        "select recompute, default patterns, with full recompute", "select recompute by pattern dict",
        "select recompute of cells by list", "comm recompute", "op swap of an operator", "pipeline stages")
OWN = {f"layers.{index}.{path}": {"recompute": True} for index in range(4)
       for path in ("self_attention.linear_qkv.reshape", "mlp.reshape", "mlp.linear_fc1.reshape")}


@cache
def _results() -> dict:
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "children" / "mcore_builds.py")], capture_output=True,
                          text=True, timeout=900, cwd=ROOT, env={**os.environ, "GLOG_v": "3"})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


MODELS = ("qwen3", "telechat3")


def _case(name: str, model: str) -> tuple[dict, dict]:
    result = _results()[model][name]
    assert result["off"] == OWN, "with MindFormers' handling off, only the marks its cells set themselves remain"
    return result["theirs"], result["ours"]


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("name", SAME)
def test_same_marks_as_mindformers(name, model):
    theirs, ours = _case(name, model)
    assert set(theirs) - set(OWN), "the case must set something"
    assert ours == theirs


@pytest.mark.parametrize("name", ["layer swap", "op swap", "swap with select recompute",
                                  "swap with full recompute by layer index"])
@pytest.mark.parametrize("model", MODELS)
def test_operators_mindformers_recomputes_itself_are_not_also_offloaded(name, model):
    """MindFormers' cells mark their Reshape for recompute; its LayerSetting offloads them too when they are in a
    swapped cell. A recomputed operator's output is not kept, so mf_memopt offloads it not (rule 3)."""
    theirs, ours = _case(name, model)
    double = {path for path, marks in theirs.items() if marks.get("recompute") is True and marks.get("offload")}
    assert double and double <= set(OWN)
    assert all(ours[path] == {"recompute": True} for path in double)
    assert {path: marks for path, marks in ours.items() if path not in double} == \
           {path: marks for path, marks in theirs.items() if path not in double}


@pytest.mark.parametrize("model", MODELS)
def test_mindformers_drops_a_comm_pattern_that_an_exclude_overlaps(model):
    """MindFormers removes `.*_layernorm\\.norm` from select_comm_recompute because the exclude
    `pre_mlp_layernorm\\.norm` "repeats" it; mf_memopt keeps it and excludes only what the exclude names."""
    theirs, ours = _case("exclude inside a recomputed cell", model)
    assert {path: marks for path, marks in theirs.items() if path.endswith("layernorm.norm")} == {
        f"layers.{index}.pre_mlp_layernorm.norm": {"recompute_comm_op": False} for index in (0, 1)}
    for index in range(4):
        assert ours[f"layers.{index}.input_layernorm.norm"] == {"recompute_comm_op": True}
    # the exclude's per-stage count 2 takes out the first two layers
    assert [ours[f"layers.{index}.pre_mlp_layernorm.norm"] for index in range(4)] == \
           [{"recompute_comm_op": False}] * 2 + [{"recompute_comm_op": True}] * 2
    rest = {path: marks for path, marks in ours.items() if not path.endswith("layernorm.norm")}
    assert rest == {path: marks for path, marks in theirs.items() if not path.endswith("layernorm.norm")}


@pytest.mark.parametrize("model", MODELS)
def test_the_default_swap_strategy_swaps_flash_attention_where_mindformers_swaps_nothing(model):
    theirs, ours = _case("default swap strategy", model)
    assert theirs == OWN        # MindFormers' `.*\.flash_attention` names nothing in an mcore layer
    assert {path: marks for path, marks in ours.items() if path not in OWN} == {
        f"layers.{index}.self_attention.core_attention.flash_attention": {"offload": True, "backward_prefetch": 10}
        for index in range(4)}
