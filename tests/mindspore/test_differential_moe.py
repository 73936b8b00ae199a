"""A tiny Qwen3-MoE (router, 4 experts, top-2) built twice per case: MindFormers applying the sections itself (its
mcore LayerSetting) and mf_memopt applying its plan (`mcore_builds.py --model qwen3_moe`, in a child
process). Every cell and primitive of the decoder layers carries the same marks, except where MindFormers'
handling goes wrong; those cases assert what it does and what mf_memopt does instead."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[2]
# The cases MindFormers handles as mf_memopt does, then the ones it does not. The order matters for MindFormers'
# side: its routers share one gating-activation object across every model of the process, so a mark it sets on
# it in one case is still there in the next build.
SAME = ("full recompute of every layer", "full recompute by per-stage count",
        "select recompute of the router and the experts", "select recompute of MoE operators by dict",
        "exclude the router inside a recomputed MoE block", "comm recompute")
SWAP = ("op swap of the experts", "layer swap")
STOPS = ("select recompute of the routers' gating activation", "select recompute of the experts' Swiglu")
LAYERS = range(4)
# the marks MindFormers' MoE cells set themselves: the experts' Swiglu and the QKV reshape recomputed, and the
# router's top-k and aux-loss bookkeeping never recomputed
OWN = {**{f"layers.{i}.{path}": {"recompute": True} for i in LAYERS
          for path in ("self_attention.linear_qkv.reshape", "mlp.experts.swiglu")},
       **{f"layers.{i}.mlp.router.{name}": {"recompute": False} for i in LAYERS
          for name in ("topk", "reduce_mean_dp", "mul_dp", "assignadd", "div", "sum_accu", "add_accu")}}


@cache
def _differential(model: str, *cases: str) -> dict:
    """{case: {"theirs", "ours", "off"}} for `model`, the cases built in this order in one child process."""
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "children" / "mcore_builds.py"), "--model", model,
                           *cases], capture_output=True, text=True, timeout=900, cwd=ROOT,
                          env={**os.environ, "GLOG_v": "3"})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])[model]


def _results() -> dict:
    return _differential("qwen3_moe", *SAME, *SWAP, *STOPS)


@pytest.mark.parametrize("name", SAME)
def test_same_marks_as_mindformers(name):
    result = _results()[name]
    assert result["off"] == OWN, "with MindFormers' handling off, only the marks its cells set themselves remain"
    assert set(result["theirs"]) - set(OWN), "the case must set something"
    assert result["ours"] == result["theirs"]


def _gating(marks: dict) -> dict:
    return {path: value for path, value in marks.items() if path.endswith("router.gating_activation")}


def test_a_swapped_router_activation_stays_in_its_layer():
    """op_swap names the router's gating activation in layer 1. MindFormers' routers share one Softmax object
    (a module-level table), so its offload reaches every layer; mf_memopt gives each layer its own copy first."""
    result = _results()["op swap of the experts"]
    assert _gating(result["theirs"]) == {f"layers.{i}.mlp.router.gating_activation":
                                         {"offload": True, "backward_prefetch": 3} for i in LAYERS}
    assert _gating(result["ours"]) == {"layers.1.mlp.router.gating_activation": {"offload": True,
                                                                                 "backward_prefetch": 3}}
    # the experts' own marks: both offload the experts of layers 0 and 2; MindFormers also offloads the Swiglu it
    # recomputes itself, whose output is not kept (rule 3)
    for i in (0, 2):
        assert result["theirs"][f"layers.{i}.mlp.experts.swiglu"] == {"recompute": True, "offload": True,
                                                                      "backward_prefetch": 5}
        assert result["ours"][f"layers.{i}.mlp.experts.swiglu"] == {"recompute": True}
        assert result["ours"][f"layers.{i}.mlp.experts.morphed_forward"] == {"offload": True,
                                                                             "backward_prefetch": 5}
    rest = {path for path in set(result["theirs"]) | set(result["ours"])
            if not path.endswith(("gating_activation", "experts.swiglu"))}
    assert {path: result["ours"].get(path) for path in rest} == {path: result["theirs"].get(path) for path in rest}


def test_layer_swap_offloads_the_router_activation_of_the_swapped_layers_only():
    result = _results()["layer swap"]
    assert set(_gating(result["theirs"])) == {f"layers.{i}.mlp.router.gating_activation" for i in LAYERS}
    assert set(_gating(result["ours"])) == {f"layers.{i}.mlp.router.gating_activation" for i in (0, 3)}
    double = {path for path, marks in result["theirs"].items() if marks.get("recompute") is True
              and marks.get("offload")}
    assert double and double <= set(OWN)
    assert all(result["ours"][path] == {"recompute": True} for path in double)


@pytest.mark.parametrize("name", STOPS)
def test_mindformers_stops_on_a_pattern_naming_an_operator_it_marked_before(name):
    """MindFormers' LayerSetting calls `operator.recompute(True)`, but a primitive marked once has its `recompute`
    method replaced by the mark's value: a pattern naming the experts' Swiglu (which MindFormers marks itself) or
    the shared router activation (marked by the first layer) stops the build. mf_memopt marks what is named."""
    result = _results()[name]
    assert "'bool' object is not callable" in result["theirs"]["error"]
    if "gating" in name:                  # count [2]: the first two layers
        assert _gating(result["ours"]) == {f"layers.{i}.mlp.router.gating_activation": {"recompute": True}
                                           for i in (0, 1)}
    else:                                 # already recomputed by MindFormers' own mark: nothing more to set
        assert result["ours"] == OWN
        # the shared object still carries what MindFormers set on it in the earlier builds of this process; the
        # build gives each layer its own copy without them, before any plan is applied
        assert not _gating(result["off"]) and not _gating(result["ours"])


# --- DeepSeek-V3: multi-latent attention, a dense first layer, shared experts, one MTP layer -----------------------
DEEPSEEK_SAME = ("full recompute of every layer", "full recompute of the layers before the last",
                 "full recompute by per-stage count", "select recompute of the router and the experts",
                 "select recompute of the shared experts and the MLA projections",
                 "select recompute inside the MTP layer", "comm recompute")
DEEPSEEK_SWAP = ("layer swap of the first and last layers", "op swap of the MTP layer's attention")


def _deepseek() -> dict:
    return _differential("deepseek3", *DEEPSEEK_SAME, *DEEPSEEK_SWAP)


@pytest.mark.parametrize("name", DEEPSEEK_SAME)
def test_deepseek_marks_equal_mindformers_mtp_layer_included(name):
    """The MTP layer takes the last decoder layer's plan, its patterns matched from its own children; a pattern
    that names MoE cells skips the dense first layer, one that names `eh_proj` the decoder layers."""
    result = _deepseek()[name]
    own = result["off"]
    assert own["layers.1.mlp.experts.swiglu"] == {"recompute": True}
    assert own["layers.0.self_attention.linear_q_down_proj.reshape"] == {"recompute": True}
    assert own["mtp.layers.0.transformer_layer.mlp.router.topk"] == {"recompute": False}
    assert set(result["theirs"]) - set(own), "the case must set something"
    assert result["ours"] == result["theirs"]


def test_deepseek_patterns_naming_mtp_cells_reach_the_mtp_layer_only():
    result = _deepseek()["select recompute inside the MTP layer"]
    changed = {path for path, marks in result["ours"].items() if marks != result["off"].get(path)}
    assert {"mtp.layers.0.eh_proj", "mtp.layers.0.transformer_layer.mlp.shared_experts", "layers.1.mlp.experts",
            "layers.2.mlp.experts"} <= changed
    assert not any(path.startswith("layers.0.") for path in changed)      # the dense layer has no experts
    # `mlp\.experts` is matched from the MTP layer's own children, where `mlp` is one level down: not there
    assert not any(path.startswith("mtp.layers.0.transformer_layer.mlp.experts") for path in changed)


def test_deepseek_full_recompute_reaches_the_mtp_layer_with_the_last_layer():
    every, before_last = _deepseek()["full recompute of every layer"], \
        _deepseek()["full recompute of the layers before the last"]
    assert every["ours"]["mtp.layers.0"] == {"cell_recompute": True}
    assert "mtp.layers.0" not in before_last["ours"]
    assert before_last["ours"]["layers.1"] == {"cell_recompute": True} and "layers.2" not in before_last["ours"]


@pytest.mark.parametrize("name", DEEPSEEK_SWAP)
def test_deepseek_swap_differs_only_where_mindformers_goes_wrong(name):
    """Besides the router activation MindFormers shares between layers, and the operators it recomputes itself and
    offloads too (rule 3), the offload marks are the same, the MTP layer's included."""
    result = _deepseek()[name]
    theirs, ours = result["theirs"], result["ours"]
    differ = {path for path in set(theirs) | set(ours) if theirs.get(path) != ours.get(path)}
    for path in differ:
        if path.endswith("router.gating_activation"):
            assert "offload" in theirs[path]
        else:
            assert theirs[path]["recompute"] is True and theirs[path]["offload"] and ours[path] == {"recompute": True}
    assert any(path.startswith("mtp.layers.0") and "offload" in marks for path, marks in ours.items())
