"""compress_config without MindSpore: storage formulas, the plan, the interaction rules, the estimate."""

from __future__ import annotations

import textwrap

import pytest
import yaml

from mf_memopt import load_plan
from mf_memopt.compress.methods import bits_per_element, stored_bytes
from mf_memopt.config.load import plan_source
from mf_memopt.document.source import parse_yaml
from mf_memopt.estimate.core import estimate_config
from mf_memopt.compress.family import compression_of
from mf_memopt.models.llama import LLAMA

LAYOUT = "model:\n  model_config:\n    num_layers: 4\n"


def _plan(body: str):
    return plan_source(parse_yaml(LAYOUT + textwrap.dedent(body).lstrip("\n"), "case.yaml"))


@pytest.mark.parametrize(("method", "bits"), [("int8", 8.125), ("int4", 4.125), ("int2", 2.125), ("lossless", 0)])
def test_bits_per_element_include_the_group_minimum_and_scale(method, bits):
    assert bits_per_element(method, 256) == bits


def test_stored_bytes_pad_to_whole_groups():
    assert stored_bytes("int2", 256) == 64 + 4 + 4
    assert stored_bytes("int2", 257) == 2 * (64 + 4) + 4
    assert stored_bytes("int8", 1024 * 1376) == 1024 * 1376 + 4 * 1024 * 1376 // 256 + 4
    assert stored_bytes("int4", 1000, group_size=8) == 125 * (4 + 4) + 4


def test_compress_dense_level0_is_lossless_w2_in_every_layer():
    plan = _plan("""
        compress_config:
          compress: true
          compress_dense: level0
    """)
    assert [layer.to_dict()["op_compress"] for layer in plan.layers] == [{"feed_forward\\.w2": {"method": "lossless"}}] * 4
    assert plan.layers[0].op_compress[0].origin.describe() == "compress_config.compress_dense, line 6"


def test_compress_dense_level1_also_offloads_the_compressed_copy():
    plan = _plan("""
        compress_config:
          compress: true
          compress_dense: level1
    """)
    assert plan.layers[3].to_dict()["op_compress"] == {"feed_forward\\.w2": {"method": "lossless", "offload": 1}}


def test_op_compress_lists_patterns_methods_and_layers():
    plan = _plan("""
        compress_config:
          compress: true
          op_compress:
            - op_name: ['feed_forward\\.w2', 'attention\\.wo']
              method: int2
              group_size: 128
              layers: [1, 3]
    """)
    assert [bool(layer.op_compress) for layer in plan.layers] == [False, True, False, True]
    assert plan.layers[1].to_dict()["op_compress"] == {
        "attention\\.wo": {"method": "int2", "group_size": 128},
        "feed_forward\\.w2": {"method": "int2", "group_size": 128}}


def test_recompute_beats_compression_and_says_so():
    plan = _plan("""
        recompute_config:
          recompute: [1]
          select_recompute: {'feed_forward': true}
        compress_config:
          compress: true
          op_compress:
            - op_name: 'feed_forward\\.w2'
              method: int8
              layers: true
    """)
    assert [bool(layer.op_compress) for layer in plan.layers] == [False, False, False, False]
    messages = sorted(conflict.message() for conflict in plan.conflicts if conflict.rule == "recompute-over-compress")
    assert messages == [
        "layer 0: full recompute (recompute_config.recompute, line 5) wins over op compress `feed_forward\\.w2` "
        "(int8) (compress_config.op_compress[0], line 10), which is dropped there [recompute-over-compress]",
        "layers 1, 2, 3: select recompute `feed_forward` (recompute_config.select_recompute['feed_forward'], "
        "line 6) wins over op compress `feed_forward\\.w2` (int8) (compress_config.op_compress[0], line 10), "
        "which is dropped there [recompute-over-compress]"]


def test_recompute_inside_a_compressed_cell_leaves_the_compression():
    plan = _plan("""
        recompute_config:
          select_recompute: {'feed_forward\\.w1\\.activation': true}
        compress_config:
          compress: true
          op_compress:
            - op_name: 'feed_forward\\.w1'
              method: int4
              layers: [0]
    """)
    assert plan.layers[0].op_compress[0].method == "int4" and not plan.conflicts


def test_compression_with_swap_of_the_same_cell_offloads_the_compressed_copy():
    plan = _plan("""
        swap_config:
          swap: true
          op_swap:
            - op_name: 'feed_forward'
              backward_prefetch: 3
              layers: [2]
        compress_config:
          compress: true
          op_compress:
            - op_name: 'feed_forward\\.w2'
              method: int2
              layers: true
    """)
    assert plan.layers[2].to_dict()["op_compress"] == {"feed_forward\\.w2": {"method": "int2", "group_size": 256,
                                                                             "offload": 3}}
    assert "offload" not in plan.layers[1].to_dict()["op_compress"]["feed_forward\\.w2"]
    (conflict,) = plan.conflicts
    assert conflict.message() == (
        "layer 2: op compress `feed_forward\\.w2` (int2) (compress_config.op_compress[0], line 13) and op swap "
        "`feed_forward` (swap_config.op_swap[0], line 7) both apply: the swap offloads the compressed copy "
        "[compress-with-swap]")


def test_nothing_is_compressed_without_the_master_switch():
    plan = _plan("""
        compress_config:
          compress: false
          op_compress:
            - op_name: 'feed_forward\\.w2'
              method: int8
              layers: true
    """)
    assert not any(layer.op_compress for layer in plan.layers)
    assert [warning.path for warning in plan.warnings] == ["compress_config.op_compress"]


def _estimate_with(tmp_path, section):
    data = yaml.safe_load(open("configs/llama_tiny.yaml"))
    data["recompute_config"] = {"recompute": False, "select_recompute": False}
    if section:
        data["compress_config"] = section
    path = tmp_path / "case.yaml"
    path.write_text(yaml.safe_dump(data))
    return estimate_config(path, runtime="cpu")


@pytest.mark.parametrize("method", ["int8", "int2", "lossless"])
def test_estimate_keeps_the_stored_bytes_of_the_w2_input_and_rebuilds_the_gate(tmp_path, method):
    base = _estimate_with(tmp_path, None)
    squeezed = _estimate_with(tmp_path, {"compress": True, "op_compress": [
        {"op_name": "feed_forward\\.w2", "method": method, "layers": True}]})
    elements = 2 * 256 * 688          # batch * seq * ffn of the tiny Llama: the input of w2
    # w2's input shrinks to its stored bytes; SiLU's output and the early sigmoid are rebuilt in the backward
    for before, after in zip(base.layers, squeezed.layers):
        assert before.effect.bytes() - after.effect.bytes() == 3 * 4 * elements - stored_bytes(method, elements)
    # the backward holds more for a moment: the rebuilt gate, and a restored block of rows with the incoming
    # gradient's row slices (lossless: the rebuilt input)
    assert [layer.effect.backward_extra for layer in squeezed.layers] == [
        4 * elements + (4 * elements if method == "lossless" else 4 * 368 * 688 + 4 * 2 * 256 * 256)] * 4


def test_estimate_orders_the_methods_by_their_bits(tmp_path):
    peaks = {method: _estimate_with(tmp_path, {"compress": True, "op_compress": [
        {"op_name": "feed_forward\\.(w1|w2|w3)", "method": method, "layers": True}]}).stages[0].peak.peak
        for method in ("int8", "int4", "int2")}
    assert peaks["int2"] < peaks["int4"] < peaks["int8"] < _estimate_with(tmp_path, None).stages[0].peak.peak


def test_float16_compute_on_cpu_counts_the_compression(tmp_path):
    """With float16 compute the CPU inventory keeps float32 copies of the matmul inputs under other display names;
    compression finds the tensors it frees by their role, so it is counted there too. Measured with
    `python -m mf_memopt estimate --runtime cpu --measure --exact` on configs/compress_int8_mlp.yaml with only
    compute_dtype: float16: 67.150 MiB compressed (73.481 before the gate rebuild and the codec's scheduling),
    76.910 MiB with compress: False (the estimate had once been 80.5 MiB compressed, above the uncompressed 76.8).
    The compressed estimate, 68.8 MiB, is 2.4% high: its peak is the last layer's backward, the measured one the
    last layer's compression in the forward pass."""
    data = yaml.safe_load(open("configs/compress_int8_mlp.yaml"))
    data["model"]["model_config"]["compute_dtype"] = "float16"
    peaks = {}
    for on in (True, False):
        data["compress_config"]["compress"] = on
        path = tmp_path / f"f16_{on}.yaml"
        path.write_text(yaml.safe_dump(data))
        peaks[on] = estimate_config(path, runtime="cpu").stages[0].peak.peak / 2**20
    assert peaks[True] < peaks[False]
    assert abs(peaks[True] / 67.150 - 1) < 0.03 and abs(peaks[False] / 76.910 - 1) < 0.02


def test_shipped_compress_configs_load():
    for name in ("compress_int8_mlp", "compress_int2_mlp", "compress_dense_level0"):
        plan = load_plan(f"configs/{name}.yaml")
        assert all(layer.op_compress for layer in plan.layers) and not plan.conflicts


def _node(ref, op, inputs, cell, backward=False):
    from mf_memopt.verify.ir import Node

    prefix = "Gradients/" if backward else ""
    scope = f"{prefix}Default/network-L/model-M/layers-CellList/0-LLamaDecodeLayer/{cell}/MatMul-op0"
    return Node(ref=ref, op=op, graph="g", inputs=inputs, instance=None, prim_attrs={}, cnode_attrs={}, scope=scope,
                layer_scope=LLAMA.ir_layer_scope)


@pytest.mark.parametrize(("weight_gradient_reads", "agrees"), [("%restored", True), ("%x", False)])
def test_verify_checks_that_the_weight_gradient_reads_the_compressed_copy(weight_gradient_reads, agrees):
    from mf_memopt.verify.compression import check_compression
    from mf_memopt.verify.ir import Graph

    cell = "feed_forward-LlamaFeedForward/w2-CompressedLinear/compressed_matmul-QuantisedMatMul"
    nodes = [_node("%y", "PrimFunc_MatMul", ["%x", "%w"], cell),
             _node("%dx", "PrimFunc_MatMul", ["%dy", "%w"], cell),
             _node("%dw", "PrimFunc_MatMul", ["%dy", weight_gradient_reads], cell)]
    entry = {"layer": 0, "path": "feed_forward.w2", "method": "int2", "replaced_by": "CompressedLinear"}
    found, wrong, _ = check_compression(0, [entry], nodes, Graph(nodes), compression_of(LLAMA).scopes)
    assert (found, wrong) == ((["feed_forward.w2 (int2)"], []) if agrees else
                              ([], ["feed_forward.w2: its weight gradient reads the full-precision input, not the "
                                    "compressed copy"]))


def test_verify_reports_a_missing_compressed_cell():
    from mf_memopt.verify.compression import check_compression
    from mf_memopt.verify.ir import Graph

    entry = {"layer": 0, "path": "feed_forward.w2", "method": "lossless", "replaced_by": "LosslessFeedForward"}
    _, wrong, _ = check_compression(0, [entry], [], Graph([]), compression_of(LLAMA).scopes)
    assert wrong == ["feed_forward.w2: compressed by the plan (lossless), but the graph has no "
                     "feed_forward.w2_lossless cell"]


def test_estimate_frees_the_attention_projections_inputs_and_counts_one_copy_per_reader(tmp_path):
    """wq, wk and wv read attention_norm's output and each keeps its own compressed copy of it; wo reads the
    attention's output. Measured with `python benchmarks/compress_peaks.py --variants int4-attention` (configs/
    llama_tiny.yaml with vocab 512, batch 4, a dynamic loss scale and no recompute): 143.56 MiB uncompressed,
    137.60 MiB with int4 on the four attention projections (estimates 143.5 and 137.6)."""
    base = _estimate_with(tmp_path, None)
    squeezed = _estimate_with(tmp_path, {"compress": True, "op_compress": [
        {"op_name": "attention\\.wq", "method": "int4", "layers": True},
        {"op_name": "attention\\.wo", "method": "int4", "layers": True}]})
    elements = 2 * 256 * 256          # batch * seq * hidden: the input of wq/wk/wv, and of wo (4 heads of 64)
    freed = 2 * 4 * elements - 4 * stored_bytes("int4", elements)    # two tensors; four compressed copies
    for before, after in zip(base.layers, squeezed.layers):
        assert before.effect.bytes() - after.effect.bytes() == freed
    assert not any("not modelled" in note for layer in squeezed.layers for note in layer.effect.notes)
