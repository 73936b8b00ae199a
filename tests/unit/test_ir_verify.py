"""Reading MindSpore's IR and comparing it with an apply report, on IR text in MindSpore 2.9's format."""

from __future__ import annotations

import textwrap

from mf_memopt.models.llama import LLAMA
from mf_memopt.verify.ir import read_ir
from mf_memopt.verify.marks import compare

SCOPE = "Default/network-LlamaForCausalLM/model-LlamaModel/layers-CellList"
# Lines as MindSpore 2.9 writes them (shortened): layer 1 swaps attention_norm and recomputes
# attention; wq's Reshape reads the swapped output (rule 2); the backward holds a recompute copy.
IR = textwrap.dedent(f"""\
    # Total subgraphs: 1
    subgraph @TrainOneStepCell_construct_127() {{
      %89(equiv_51_output) = PrimFunc_Mul(%87, %88) {{instance name: mul2}} primitive_attrs: {{offload: Bool(1), backward_prefetch: I64(2)}} cnode_attrs: {{checkpoint: Bool(1)}} cnode_primal_attrs: {{unique_id: "79948"}}
          : (<Tensor[Float32], (2, 64, 64)>) -> (<Tensor[Float32], (2, 64, 64)>)
          # Fullname with scope: ({SCOPE}/1-LLamaDecodeLayer/attention_norm-LlamaRMSNorm/Mul-op1)
      %90(equiv_286_x) = PrimFunc_Reshape(%89, (I64(-1), I64(64))) cnode_attrs: {{recompute_sub_graph: U64(0), recompute_id: I64(5), recompute: Bool(1), need_cse_after_recompute: Bool(1)}}
          : (<Tensor[Float32], (2, 64, 64)>) -> (<Tensor[Float32], (128, 64)>)
          # Fullname with scope: (recompute_{SCOPE}/1-LLamaDecodeLayer/attention-LLamaAttention/wq-Linear/Reshape-op0)
      %91(x) = PrimFunc_MatMul(%90, %12, Bool(0), Bool(1)) {{instance name: matmul}} cnode_attrs: {{recompute: Bool(1)}}
          : (<Tensor[Float32], (128, 64)>) -> (<Tensor[Float32], (128, 64)>)
          # Fullname with scope: (recompute_{SCOPE}/1-LLamaDecodeLayer/attention-LLamaAttention/wq-Linear/MatMul-op0)
      %92(y) = PrimFunc_Reshape(%91, (I64(2), I64(64), I64(4), I64(16))) {{instance name: reshape}} primitive_attrs: {{recompute: Bool(0)}} cnode_attrs: {{recompute: Bool(0)}}
          : (<Tensor[Float32], (128, 64)>) -> (<Tensor[Float32], (2, 64, 4, 16)>)
          # Fullname with scope: (recompute_{SCOPE}/1-LLamaDecodeLayer/attention-LLamaAttention/Reshape-op0)
      %93(z) = PrimFunc_Add(%82, %92) {{instance name: add}} primitive_attrs: {{offload: Bool(1), backward_prefetch: "Auto"}}
          : (<Tensor[Float32], (2, 64, 64)>) -> (<Tensor[Float32], (2, 64, 64)>)
          # Fullname with scope: ({SCOPE}/2-LLamaDecodeLayer/Add-op0)
      %540(CNode_433) = PrimFunc_Reshape(%538, (I64(-1), I64(64))) cnode_attrs: {{recompute_sub_graph: U64(0), recompute_id: I64(1), duplicated: Bool(1)}}
          : (<Tensor[Float32], (2, 64, 64)>) -> (<Tensor[Float32], (128, 64)>)
          # Fullname with scope: (recompute_{SCOPE}/1-LLamaDecodeLayer/attention-LLamaAttention/wq-Linear/Reshape-op2)
      %600(g) = PrimFunc_MatMul(%540, %13) {{instance name: matmul}} cnode_attrs: {{}}
          : (<Tensor[Float32], (128, 64)>) -> (<Tensor[Float32], (128, 64)>)
          # Fullname with scope: (Gradients/{SCOPE}/1-LLamaDecodeLayer/attention-LLamaAttention/wq-Linear/MatMul-op1)
    }}
    """)


def _set(layer, path, setting, value, target="primitive", rule="swap_config.op_swap[0]"):
    return {"layer": layer, "path": path, "target": target, "type": "X", "set": {setting: value}, "rule": rule,
            "line": 9}


PLAN = [_set(1, "attention_norm.mul2", "offload", 2),
        _set(1, "attention", "recompute_cell", {}, "cell", "recompute_config.select_recompute['attention']"),
        _set(1, "attention.wq.reshape", "recompute", False, rule="recompute_config.select_recompute_exclude[0]"),
        _set(2, "add", "offload", "Auto", rule="swap_config.op_swap[1]")]


def _graph(tmp_path):
    path = tmp_path / "20_validate_0001.ir"
    path.write_text(IR)
    return read_ir(path, LLAMA.ir_layer_scope)


def test_nodes_carry_layer_path_and_marks(tmp_path):
    nodes = {node.ref: node for node in _graph(tmp_path).nodes}
    mul2 = nodes["%89"]
    assert (mul2.layer, mul2.cell_path, mul2.path, mul2.offload, mul2.prefetch) == \
        (1, "attention_norm", "attention_norm.mul2", True, 2)
    assert nodes["%90"].recomputed and nodes["%90"].path is None and nodes["%90"].cell_path == "attention.wq"
    assert nodes["%93"].prefetch == "Auto" and nodes["%93"].path == "add"
    assert nodes["%540"].duplicated and not nodes["%540"].recomputed
    assert nodes["%600"].backward and nodes["%600"].layer == 1
    assert nodes["%92"].flag("recompute") is False


def test_a_matching_report_agrees_and_rule_2_is_found(tmp_path):
    checks = compare({"set": PLAN}, _graph(tmp_path), num_layers=3)
    assert [check.disagreements for check in checks] == [[], [], []]
    assert checks[1].rule2 == ["layer 1: the offload of attention_norm.mul2 does not take effect: its output is "
                               "consumed by recomputed attention.wq (Reshape) (rule 2)"]
    assert checks[1].copies == 1 and checks[1].offloaded == {"2": 1}
    assert checks[2].offloaded == {"Auto": 1}


def test_marks_the_plan_did_not_set_disagree(tmp_path):
    checks = compare({"set": PLAN[1:]}, _graph(tmp_path), num_layers=3)
    assert checks[1].disagreements == ["attention_norm.mul2: offload=2 in the graph, not set by the plan"]


def test_a_different_prefetch_disagrees(tmp_path):
    plan = [_set(1, "attention_norm.mul2", "offload", 7), *PLAN[1:]]
    checks = compare({"set": plan}, _graph(tmp_path), num_layers=3)
    assert checks[1].disagreements == ["attention_norm.mul2: offload=2 in the graph, the plan set 7",
                                       "swap_config.op_swap[0]: none of its 1 operators carries offload in the graph"]


def test_a_rule_that_left_no_mark_disagrees(tmp_path):
    # An operator the compiler removed is fine, as long as each rule left a mark somewhere in the layer.
    plan = [*PLAN, _set(2, "cast", "offload", "Auto", rule="swap_config.op_swap[1]")]
    assert compare({"set": plan}, _graph(tmp_path), num_layers=3)[2].disagreements == []
    plan = [*PLAN, _set(2, "feed_forward.mul", "offload", "Auto", rule="swap_config.op_swap[3]")]
    checks = compare({"set": plan}, _graph(tmp_path), num_layers=3)
    assert checks[2].disagreements == ["swap_config.op_swap[3]: none of its 1 operators carries offload in the graph"]


def test_recomputed_cell_without_its_scope_disagrees(tmp_path):
    plan = [*PLAN, _set(2, "feed_forward", "recompute_cell", {}, "cell")]
    checks = compare({"set": plan}, _graph(tmp_path), num_layers=3)
    assert checks[2].disagreements == ["feed_forward: recomputed by the plan, no recompute_ scope in the graph"]
    checks = compare({"set": [PLAN[0], PLAN[3]]}, _graph(tmp_path), num_layers=3)
    assert "recompute_ scope on attention, attention.wq, which the plan does not recompute" in checks[1].disagreements


def test_a_mark_carried_onto_a_fused_operator_is_a_note(tmp_path):
    # The plan excluded wq's reshape; the compiler fused wq's output reshape into attention's.
    checks = compare({"set": PLAN}, _graph(tmp_path), num_layers=3)
    assert "attention.reshape carries the recompute mark of attention.wq.reshape: MindSpore fused the two " \
           "operators while compiling" in checks[1].notes
