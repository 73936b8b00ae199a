"""The same Llama built twice: MindFormers applying the sections itself, and mf_memopt applying its plan.

Where the semantics agree, every cell and primitive must carry the same recompute,
recompute_comm_op, offload and backward_prefetch marks. Where MindFormers sets an offload
that recompute cancels (interaction rule 3), mf_memopt sets none: those cases assert the
difference explicitly.
"""

from __future__ import annotations

import mindspore as ms
import pytest
from mindformers.models import llama
from mindformers.modules import transformer

from mf_memopt import apply_plan, load_plan



MARKS = ("recompute", "recompute_comm_op", "offload", "backward_prefetch")


def _build(num_layers, stages, recompute, swap, *, theirs, flash_attention=False):
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    parallel = {"pipeline_stage": stages}
    if theirs:
        parallel["recompute"] = transformer.TransformerRecomputeConfig(**recompute)
        parallel["swap"] = transformer.TransformerSwapConfig(**swap)
    config = llama.LlamaConfig(num_layers=num_layers, hidden_size=32, num_heads=2, seq_length=16, vocab_size=64,
                               batch_size=1, use_flash_attention=flash_attention, use_rope_slice=True,
                               fused_rms_norm=False,
                               parallel_config=transformer.TransformerOpParallelConfig(**parallel))
    return llama.LlamaForCausalLM(config)


def _marks(model):
    """{path: marks} for every primitive and recompute-configured cell of the decoder layers."""
    result = {}

    def visit(cell, path):
        if cell._has_config_recompute:
            result[path] = {"cell_recompute": cell._scope.startswith("recompute_")}
        for name, prim in cell._primitives.items():
            marks = {key: prim.attrs[key] for key in MARKS if key in prim.attrs}
            if marks:
                result[f"{path}.{name}"] = marks
        for name, child in cell._cells.items():
            visit(child, f"{path}.{name}")

    for index, layer in enumerate(model.model.layers):
        visit(layer, f"layers.{index}")
    return result


# LLamaAttention.__init__ recomputes these in every layer whenever select_recompute is truthy and
# flash attention is off, whatever the per-layer selection says. mf_memopt applies only what the
# config names, so these marks are MindFormers-only: the tests take them out and check they were there.
ATTENTION_CORE = ("add", "batch_matmul", "batch_matmul_q_k", "cast_attn", "mul", "softmax", "tile_kv")


def _split_attention_core(marks, num_layers):
    """Take the attention-core recompute marks out of `marks`; {layer: names that had them}."""
    core = {}
    for index in range(num_layers):
        prefix, taken = f"layers.{index}.attention.", set()
        for name in ATTENTION_CORE:
            entry = marks.get(prefix + name, {})
            if entry.get("recompute") is True:
                del entry["recompute"]
                taken.add(name)
                if not entry:
                    del marks[prefix + name]
        rotary = [path for path, entry in marks.items()
                  if path.startswith(prefix + "apply_rotary_emb") and entry == {"cell_recompute": True}]
        for path in rotary:
            del marks[path]
            taken.add("apply_rotary_emb")
        core[index] = taken
    return core


def _both(num_layers=4, stages=1, recompute=None, swap=None, flash_attention=False, split=True):
    recompute, swap = recompute or {}, swap or {}
    theirs = _build(num_layers, stages, recompute, swap, theirs=True, flash_attention=flash_attention)
    ours = _build(num_layers, stages, recompute, swap, theirs=False, flash_attention=flash_attention)
    assert _marks(ours) == {}, "MindFormers' own handling must be off in the model mf_memopt applies to"
    doc = {"model": {"model_config": {"num_layers": num_layers}}, "parallel_config": {"pipeline_stage": stages},
           "recompute_config": recompute, "swap_config": swap}
    apply_plan(load_plan(doc), ours, device_target="CPU")
    theirs_marks, ours_marks = _marks(theirs), _marks(ours)
    if not split:
        return theirs_marks, ours_marks
    theirs_core = _split_attention_core(theirs_marks, num_layers)
    ours_core = _split_attention_core(ours_marks, num_layers)
    hidden = bool(recompute.get("select_recompute")) and not flash_attention
    for index in range(num_layers):
        fully = f"layers.{index}" in theirs_marks
        assert ours_core[index] == ({"apply_rotary_emb"} if fully else set())
        if hidden:
            assert theirs_core[index] == {*ATTENTION_CORE, "apply_rotary_emb"}
        else:
            assert theirs_core[index] == ours_core[index]
    return theirs_marks, ours_marks


SAME = {
    "full recompute by per-stage count": dict(recompute={"recompute": [2]}),
    "full recompute of every layer": dict(recompute={"recompute": True}),
    "select recompute, default patterns, with full recompute": dict(
        recompute={"recompute": [1], "select_recompute": True}),
    "select recompute by pattern dict": dict(
        recompute={"select_recompute": {"feed_forward\\.w1\\.matmul": [3], "attention\\.wq": True}}),
    "comm recompute": dict(recompute={"select_comm_recompute": {"attention_norm\\.mul": True, ".*_norm\\.rsqrt": [2]}}),
    "exclude inside a recomputed cell": dict(
        recompute={"select_recompute": ["feed_forward"], "select_recompute_exclude": ["feed_forward\\.mul"],
                   "select_comm_recompute": [".*_norm\\.square"],
                   "select_comm_recompute_exclude": {"ffn_norm\\.rsqrt": [2]}}),
    "layer swap (swap case 2)": dict(swap={"swap": True, "layer_swap": [{"backward_prefetch": 20, "layers": [0, 3]}]}),
    "op swap (swap case 3)": dict(swap={"swap": True, "op_swap": [
        {"op_name": "attention", "backward_prefetch": 20, "layers": [0, 1, 2]},
        {"op_name": "attention", "backward_prefetch": 10, "layers": [3]},
        {"op_name": "feed_forward", "backward_prefetch": 15, "layers": [1, 2]}]}),
    "swap with select recompute (swap case 4)": dict(
        recompute={"select_recompute": {"feed_forward": [0, 3]}},
        swap={"swap": True, "op_swap": [
            {"op_name": "attention", "backward_prefetch": 20, "layers": [0, 1, 2]},
            {"op_name": "attention", "backward_prefetch": 10, "layers": [3]},
            {"op_name": "feed_forward", "backward_prefetch": 15, "layers": [1, 2]}]}),
    "swap with full recompute by layer index": dict(
        recompute={"recompute": [1]}, swap={"swap": True, "op_swap": [
            {"op_name": ["attention\\.wq", "attention\\.wk"], "backward_prefetch": "Auto", "layers": [0, 2]}]}),
    "default swap strategy (swap case 1)": dict(swap={"swap": True, "default_prefetch": 10}, flash_attention=True),
    "pipeline stages": dict(stages=2, recompute={"recompute": [1, 1], "select_recompute": [0, 2],
                                                 "select_comm_recompute": {"ffn_norm\\.mul": [1, 0]}}),
}


@pytest.mark.parametrize("case", SAME.values(), ids=SAME.keys())
def test_same_marks_as_mindformers(case):
    theirs, ours = _both(**case)
    assert theirs, "the case must set something"
    assert ours == theirs


def test_recompute_cancels_the_offload_mindformers_still_sets():
    theirs, ours = _both(recompute={"select_recompute": {"feed_forward": [1]}}, swap={
        "swap": True, "op_swap": [{"op_name": "feed_forward\\.w1", "backward_prefetch": 5, "layers": [1, 2]}]})
    cancelled = {path for path in theirs if path.startswith("layers.1.feed_forward.w1.") and "offload" in theirs[path]}
    assert cancelled == {"layers.1.feed_forward.w1.matmul", "layers.1.feed_forward.w1.cast",
                         "layers.1.feed_forward.w1.reshape", "layers.1.feed_forward.w1.shape",
                         "layers.1.feed_forward.w1.activation.silu"}
    assert all("offload" not in ours.get(path, {}) for path in cancelled)
    assert {path: marks for path, marks in ours.items() if path not in cancelled} == \
        {path: marks for path, marks in theirs.items() if path not in cancelled}


def test_layer_swap_keeps_no_offload_on_recomputed_operators():
    theirs, ours = _both(recompute={"select_recompute": {"feed_forward\\.mul": [0]}},
                         swap={"swap": True, "layer_swap": [{"backward_prefetch": 3, "layers": [0]}]})
    assert theirs["layers.0.feed_forward.mul"] == {"recompute": True, "offload": True, "backward_prefetch": 3}
    assert ours["layers.0.feed_forward.mul"] == {"recompute": True}
    del theirs["layers.0.feed_forward.mul"], ours["layers.0.feed_forward.mul"]
    assert ours == theirs


def test_mindformers_drops_a_broader_select_pattern_that_an_exclude_overlaps():
    # MindFormers removes `.*\.mul` entirely because the exclude `feed_forward\.mul` "repeats" it;
    # mf_memopt keeps the selection and excludes only feed_forward.mul.
    theirs, ours = _both(recompute={"select_recompute": [".*\\.mul"],
                                    "select_recompute_exclude": ["feed_forward\\.mul"]}, split=False)
    assert "layers.0.ffn_norm.mul" not in theirs and "layers.0.attention_norm.mul" not in theirs
    assert ours["layers.0.ffn_norm.mul"] == ours["layers.0.attention_norm.mul"] == {"recompute": True}
    # attention.mul is marked in both: by MindFormers only through its hidden attention-core recompute
    assert ours["layers.0.attention.mul"] == theirs["layers.0.attention.mul"] == {"recompute": True}
    assert ours["layers.0.feed_forward.mul"] == theirs["layers.0.feed_forward.mul"] == {"recompute": False}
