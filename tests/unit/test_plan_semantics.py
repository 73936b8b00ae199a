"""What a config means, layer by layer: MindFormers' semantics plus the interaction rules."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from mf_memopt import ConfigError, load_plan
from mf_memopt.config.render import formative_lines

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def _doc(num_layers=4, stages=1, recompute=None, swap=None, **model):
    doc = {"model": {"model_config": {"num_layers": num_layers, **model}},
           "parallel_config": {"pipeline_stage": stages}}
    if model.get("pp_interleave_num", 1) > 1:
        doc["parallel"] = {"pipeline_config": {"pipeline_interleave": True}}
    if recompute is not None:
        doc["recompute_config"] = recompute
    if swap is not None:
        doc["swap_config"] = swap
    return doc


def _full(plan):
    return [layer.layer for layer in plan.layers if layer.full_recompute]


def _with(plan, kind):
    return {layer.layer: [use.pattern for use in getattr(layer, kind)] for layer in plan.layers
            if getattr(layer, kind)}


def test_seed_003_worked_example_recomputes_layers_0_1_4_24():
    plan = load_plan(CONFIGS / "planning" / "interleave_48l_pp5.yaml")
    assert _full(plan) == [0, 1, 4, 24]
    assert [(layer.stage, layer.chunk) for layer in plan.layers if layer.full_recompute] == \
        [(0, 0), (0, 0), (1, 0), (0, 1)]


def test_seed_003_formative_lines_match_the_seed_log():
    plan = load_plan(CONFIGS / "planning" / "interleave_48l_pp5.yaml")
    assert formative_lines(plan)[:3] == [
        "Formative layer_recompute: [[2, 1, 0, 0, 0], [1, 0, 0, 0, 0]]",
        "Formative select_recompute: {'feed_forward\\.w1\\.activation\\.silu': [[4, 5, 5, 5, 5], [5, 5, 5, 5, 4]], "
        "'feed_forward\\.mul': [[4, 5, 5, 5, 5], [5, 5, 5, 5, 4]], "
        "'feed_forward\\.w1\\.matmul': [[1, 0, 0, 0, 0], [2, 1, 0, 0, 0]], "
        "'feed_forward\\.w3\\.matmul': [[1, 1, 0, 0, 0], [1, 0, 0, 0, 0]]}",
        "Formative select_comm_recompute: {'ffn_norm\\.norm': [[4, 5, 5, 5, 5], [5, 5, 5, 5, 4]], "
        "'attention_norm\\.norm': [[4, 5, 5, 5, 5], [5, 5, 5, 5, 4]]}",
    ]


def test_per_stage_counts_take_the_first_layers_of_each_stage():
    plan = load_plan(_doc(num_layers=8, stages=2, recompute={"recompute": [1, 2]}))
    assert _full(plan) == [0, 4, 5]
    assert [layer.stage for layer in plan.layers] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_offsets_resize_the_stages():
    plan = load_plan(_doc(num_layers=10, stages=4, offset=[1, 0, 0, 1], recompute={"recompute": [1, 1, 1, 1]}))
    assert [layer.stage for layer in plan.layers] == [0, 0, 0, 1, 1, 2, 2, 3, 3, 3]
    assert _full(plan) == [0, 3, 5, 7]


def test_per_stage_count_is_spread_round_robin_over_chunks():
    plan = load_plan(_doc(num_layers=8, stages=2, pp_interleave_num=2, recompute={"recompute": [2, 1]}))
    # chunk 0: stage 0 -> layers 0-1, stage 1 -> 2-3; chunk 1: stage 0 -> 4-5, stage 1 -> 6-7
    assert _full(plan) == [0, 2, 4]
    assert formative_lines(plan)[0] == "Formative layer_recompute: [[1, 1], [1, 0]]"


def test_true_inside_a_count_list_means_the_whole_stage():
    plan = load_plan(_doc(num_layers=6, stages=2, recompute={"recompute": [True, 0]}))
    assert _full(plan) == [0, 1, 2]


def test_counts_are_capped_at_the_stage_size():
    plan = load_plan(_doc(num_layers=4, recompute={"recompute": [6]}))
    assert _full(plan) == [0, 1, 2, 3]
    assert [warning.path for warning in plan.warnings] == ["recompute_config.recompute[0]"]


def test_bool_select_recompute_uses_the_default_patterns():
    plan = load_plan(_doc(num_layers=2, recompute={"select_recompute": True, "select_comm_recompute": [1]}))
    assert _with(plan, "select_recompute") == {
        0: ["feed_forward\\.mul", "feed_forward\\.w1\\.activation\\.silu"],
        1: ["feed_forward\\.mul", "feed_forward\\.w1\\.activation\\.silu"]}
    assert _with(plan, "select_comm_recompute") == {0: [".*\\.norm"]}


def test_absent_sections_recompute_and_swap_nothing():
    plan = load_plan(_doc(num_layers=2))
    assert all(not any(layer.to_dict()[key] for key in ("full_recompute", "select_recompute", "op_swap"))
               for layer in plan.layers)
    assert formative_lines(plan) == [
        "Formative layer_recompute: [[0]]",
        "Formative select_recompute: {'feed_forward\\.mul': [[0]], 'feed_forward\\.w1\\.activation\\.silu': [[0]]}",
        "Formative select_comm_recompute: {'.*\\.norm': [[0]]}",
        "Formative select_recompute_exclude: {}",
        "Formative select_comm_recompute_exclude: {}",
    ]


def test_swap_on_switches_recompute_to_layer_indices():
    plan = load_plan(_doc(num_layers=8, stages=2, recompute={"recompute": [0, 5], "select_recompute": {
        "attention": [1, 6]}}, swap={"swap": True, "layer_swap": [{"backward_prefetch": 1, "layers": [7]}]}))
    assert _full(plan) == [0, 5]
    assert _with(plan, "select_recompute") == {1: ["attention"], 6: ["attention"]}
    assert formative_lines(plan)[0] == "Formative layer_recompute: [0, 5]"


def test_default_swap_strategy_swaps_flash_attention_everywhere():
    plan = load_plan(CONFIGS / "swap_case1_default.yaml")
    assert [layer.to_dict()["op_swap"] for layer in plan.layers] == [{".*\\.flash_attention": 10}] * 4
    assert load_plan(_doc(num_layers=1, swap={"swap": True})).layers[0].to_dict()["op_swap"] == \
        {".*\\.flash_attention": 1}


def test_seed_case_3_op_swap_per_layer():
    plan = load_plan(CONFIGS / "swap_case3_op_swap.yaml")
    assert [layer.to_dict()["op_swap"] for layer in plan.layers] == [
        {"attention": 20}, {"attention": 20, "feed_forward": 15}, {"attention": 20, "feed_forward": 15},
        {"attention": 10}]
    assert formative_lines(plan)[-2:] == [
        "Formative layer swap: []",
        "Formative op swap: {'attention': [{'backward_prefetch': 20, 'layers': [0, 1, 2]}, "
        "{'backward_prefetch': 10, 'layers': [3]}], 'feed_forward': [{'backward_prefetch': 15, 'layers': [1, 2]}]}",
    ]


def test_seed_case_4_has_no_conflicts():
    plan = load_plan(CONFIGS / "swap_case4_with_recompute.yaml")
    assert plan.conflicts == ()
    assert _with(plan, "select_recompute") == {0: ["feed_forward"], 3: ["feed_forward"]}


def test_layers_true_and_op_name_lists():
    plan = load_plan(_doc(num_layers=2, swap={"swap": True, "op_swap": [
        {"op_name": ["attention\\.wq", "attention\\.wk"], "backward_prefetch": "Auto", "layers": True}]}))
    assert [layer.to_dict()["op_swap"] for layer in plan.layers] == \
        [{"attention\\.wk": "Auto", "attention\\.wq": "Auto"}] * 2


def test_full_recompute_beats_select_and_is_reported():
    plan = load_plan(_doc(num_layers=4, recompute={"recompute": [2], "select_recompute": True}))
    assert sorted(_with(plan, "select_recompute")) == [2, 3]
    assert [(c.rule, c.layers, c.effect, c.dropped.pattern) for c in plan.conflicts] == [
        ("full-recompute-over-select", (0, 1), "dropped", "feed_forward\\.mul"),
        ("full-recompute-over-select", (0, 1), "dropped", "feed_forward\\.w1\\.activation\\.silu")]


def test_exclude_beats_the_select_pattern_it_covers():
    plan = load_plan(_doc(num_layers=3, recompute={"select_recompute": ["feed_forward\\.mul", "attention"],
                                                   "select_recompute_exclude": {".*\\.mul": [2]}}))
    assert _with(plan, "select_recompute") == {0: ["attention"], 1: ["attention"],
                                               2: ["feed_forward\\.mul", "attention"]}
    (conflict,) = plan.conflicts
    assert (conflict.rule, conflict.layers, conflict.kept.pattern) == ("exclude-over-select", (0, 1), ".*\\.mul")


def test_narrower_exclude_keeps_the_select_and_applies_inside_it():
    plan = load_plan(_doc(num_layers=1, recompute={"select_recompute": ["feed_forward"],
                                                   "select_recompute_exclude": ["feed_forward\\.mul"]}))
    assert plan.layers[0].to_dict()["select_recompute"] == ["feed_forward"]
    assert plan.layers[0].to_dict()["select_recompute_exclude"] == ["feed_forward\\.mul"]
    assert plan.conflicts == ()


SWAP_LAYERS_1_2 = {"swap": True, "layer_swap": [{"backward_prefetch": 3, "layers": [1, 2]}]}


def test_full_recompute_drops_the_swap_of_that_layer():
    plan = load_plan(_doc(num_layers=3, recompute={"recompute": [1]}, swap=SWAP_LAYERS_1_2))
    assert [layer.to_dict()["layer_swap"] for layer in plan.layers] == [None, None, 3]
    (conflict,) = plan.conflicts
    assert (conflict.rule, conflict.effect, conflict.layers) == ("recompute-over-swap", "dropped", (1,))
    assert conflict.kept.origin.key == "recompute_config.recompute"
    assert conflict.dropped.origin.key == "swap_config.layer_swap[0]"


def test_select_recompute_drops_an_op_swap_inside_it():
    plan = load_plan(_doc(num_layers=3, recompute={"select_recompute": {"feed_forward": [1]}}, swap={
        "swap": True, "op_swap": [{"op_name": "feed_forward\\.w1", "backward_prefetch": 2, "layers": [1, 2]}]}))
    assert [layer.to_dict()["op_swap"] for layer in plan.layers] == [{}, {}, {"feed_forward\\.w1": 2}]
    assert [(c.effect, c.layers) for c in plan.conflicts] == [("dropped", (1,))]


def test_swap_around_a_recomputed_operator_is_narrowed_not_dropped():
    plan = load_plan(_doc(num_layers=2, recompute={"select_recompute": {"feed_forward\\.mul": [0]}},
                          swap={"swap": True, "op_swap": [
                              {"op_name": "feed_forward", "backward_prefetch": 2, "layers": [0]}],
                                "layer_swap": [{"backward_prefetch": 1, "layers": [0]}]}))
    assert plan.layers[0].to_dict()["op_swap"] == {"feed_forward": 2}
    assert plan.layers[0].to_dict()["layer_swap"] == 1
    assert sorted((c.dropped.what, c.effect) for c in plan.conflicts) == [
        ("layer swap", "narrowed"), ("op swap `feed_forward`", "narrowed")]


def test_strict_turns_conflicts_into_errors_at_the_dropped_rule():
    doc = _doc(num_layers=3, recompute={"recompute": [1]}, swap=SWAP_LAYERS_1_2)
    with pytest.raises(ConfigError) as raised:
        load_plan(doc, strict=True)
    (issue,) = raised.value.issues
    assert issue.path == "swap_config.layer_swap[0]"
    assert "conflict (--strict)" in issue.message and "[recompute-over-swap]" in issue.message


def test_plan_is_frozen_and_json_serialisable():
    plan = load_plan(CONFIGS / "swap_case4_with_recompute.yaml")
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.layers[0].full_recompute = None  # type: ignore[misc]
    data = json.loads(json.dumps(plan.to_dict()))
    assert data["num_layers"] == 4
    assert data["layers"][3] == {
        "layer": 3, "stage": 0, "chunk": 0, "full_recompute": False, "select_recompute": ["feed_forward"],
        "select_comm_recompute": [], "select_recompute_exclude": [], "select_comm_recompute_exclude": [],
        "layer_swap": None, "op_swap": {"attention": 10}}


def test_a_problem_shared_by_the_default_patterns_is_reported_once():
    plan = load_plan(_doc(num_layers=4, recompute={"select_recompute": [9]}))
    assert [warning.path for warning in plan.warnings] == ["recompute_config.select_recompute[0]"]
