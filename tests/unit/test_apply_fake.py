"""apply_plan on fake cells shaped like MindFormers' Llama: what is set, what is logged, what is refused."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from fakes import all_prims, llama_model, marks

from mf_memopt import ConfigError, apply_plan, load_plan

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def _plan(num_layers=4, recompute=None, swap=None):
    doc = {"model": {"model_config": {"num_layers": num_layers}}}
    if recompute is not None:
        doc["recompute_config"] = recompute
    if swap is not None:
        doc["swap_config"] = swap
    return load_plan(doc)


def _layer(model, index):
    return model.model.layers._cells[str(index)]


def _line_of(config: Path, text: str) -> int:
    return next(number for number, line in enumerate(config.read_text().splitlines(), 1) if text in line)


def _lines(report, prefix):
    return [line for line in report.log_lines if line.startswith(prefix)]


def test_seed_case_3_sets_and_logs_op_swap():
    model = llama_model(4)
    report = apply_plan(load_plan(CONFIGS / "swap_case3_op_swap.yaml"), model, device_target="Ascend")
    assert _lines(report, "Set op_swap at layer") == [
        "Set op_swap at layer 0: .attention, value=20",
        "Set op_swap at layer 1: .attention, value=20, .feed_forward, value=15",
        "Set op_swap at layer 2: .attention, value=20, .feed_forward, value=15",
        "Set op_swap at layer 3: .attention, value=10",
    ]
    layer1 = marks(_layer(model, 1))
    assert layer1["attention.wq.matmul"] == {"offload": True, "backward_prefetch": 20}
    assert layer1["feed_forward.w1.activation.silu"] == {"offload": True, "backward_prefetch": 15}
    assert "attention_norm.mul" not in layer1
    assert {attrs["backward_prefetch"] for attrs in marks(_layer(model, 3)).values()} == {10}
    assert not any(path.startswith("feed_forward") for path in marks(_layer(model, 3)))


def test_seed_case_2_swaps_whole_layers():
    model = llama_model(4)
    report = apply_plan(load_plan(CONFIGS / "swap_case2_layer_swap.yaml"), model, device_target="Ascend")
    assert _lines(report, "Set layer swap") == ["Set layer swap at layer 0 and value is: 20",
                                                "Set layer swap at layer 3 and value is: 20"]
    for index in (0, 3):
        layer = _layer(model, index)
        assert len(marks(layer)) == len(list(all_prims(layer)))
    assert marks(_layer(model, 1)) == {}


def test_seed_case_4_log_matches_the_seed():
    model = llama_model(4)
    report = apply_plan(load_plan(CONFIGS / "swap_case4_with_recompute.yaml"), model, device_target="Ascend")
    assert [line for line in report.log_lines if line.startswith("Set ")] == [
        "Set select recompute at layer 0: feed_forward",
        "Set op_swap at layer 0: .attention, value=20",
        "Set op_swap at layer 1: .attention, value=20, .feed_forward, value=15",
        "Set op_swap at layer 2: .attention, value=20, .feed_forward, value=15",
        "Set select recompute at layer 3: feed_forward",
        "Set op_swap at layer 3: .attention, value=10",
    ]
    assert _layer(model, 0).feed_forward.recompute_calls == [{}]
    assert _layer(model, 1).feed_forward.recompute_calls == []


def test_seed_case_1_default_strategy_with_flash_attention():
    model = llama_model(4, flash_attention=True)
    report = apply_plan(load_plan(CONFIGS / "swap_case1_default.yaml"), model, device_target="Ascend")
    assert _lines(report, "Set op_swap") == [f"Set op_swap at layer {index}: attention.flash_attention, value=10"
                                             for index in range(4)]
    assert marks(_layer(model, 2)) == {"attention.flash_attention.flash_attention":
                                       {"offload": True, "backward_prefetch": 10}}


def test_pattern_that_matches_nothing_is_refused_before_anything_is_set():
    model = llama_model(4)
    plan = _plan(recompute={"select_recompute": ["feed_forward\\.mul"]}, swap=None)
    plan_with_bad = _plan(recompute={"select_recompute": {"feed_forward\\.mul": [1], "feed_forward\\.w4": [1]}})
    with pytest.raises(ConfigError) as raised:
        apply_plan(plan_with_bad, model, device_target="CPU")
    (issue,) = raised.value.issues
    assert issue.path == "recompute_config.select_recompute['feed_forward\\.w4']"
    assert issue.message.startswith("pattern `feed_forward\\.w4` matches nothing in layer 0: segment `w4` "
                                    "matched nothing in feed_forward; names there: w1, w2, w3, mul, cast")
    assert issue.hint in {"did you mean `w1`?", "did you mean `w2`?", "did you mean `w3`?"}
    assert all(marks(_layer(model, index)) == {} for index in range(4))
    assert plan.layers  # the valid plan still applies afterwards
    apply_plan(plan, model, device_target="CPU")
    assert marks(_layer(model, 0)) == {"feed_forward.mul": {"recompute": True}}


def test_default_strategy_without_flash_attention_names_the_available_cells():
    with pytest.raises(ConfigError) as raised:
        apply_plan(load_plan(CONFIGS / "swap_case1_default.yaml"), llama_model(4), device_target="CPU")
    (issue,) = raised.value.issues
    assert (issue.path, issue.line) == ("swap_config.default_prefetch",
                                        _line_of(CONFIGS / "swap_case1_default.yaml", "default_prefetch:"))
    assert "pattern `.*\\.flash_attention` matches nothing in layers 0, 1, 2, 3" in issue.message
    assert "matched nothing in ffn_norm, attention_norm, attention, feed_forward; names there:" in issue.message
    assert "wq, wk, wv, wo, apply_rotary_emb" in issue.message
    assert issue.hint == ("the default swap strategy swaps attention.flash_attention, which exists only with "
                          "model.model_config.use_flash_attention: True; or list what to swap in op_swap")


def test_every_match_of_a_pattern_is_set_and_logged():
    model = llama_model(1)
    report = apply_plan(_plan(num_layers=1, recompute={"select_comm_recompute": [".*_norm\\.mul"],
                                                       "select_recompute": [".*\\.w[13]\\.matmul"]}),
                        model, device_target="CPU")
    assert _lines(report, "Set select") == [
        "Set select recompute at layer 0: feed_forward.w1.matmul, feed_forward.w3.matmul",
        "Set select comm recompute at layer 0: ffn_norm.mul, attention_norm.mul",
    ]
    assert marks(_layer(model, 0)) == {
        "ffn_norm.mul": {"recompute_comm_op": True}, "attention_norm.mul": {"recompute_comm_op": True},
        "feed_forward.w1.matmul": {"recompute": True}, "feed_forward.w3.matmul": {"recompute": True}}


def test_exclude_must_name_primitives():
    with pytest.raises(ConfigError) as raised:
        apply_plan(_plan(num_layers=1, recompute={"select_recompute_exclude": ["attention"]}), llama_model(1),
                   device_target="CPU")
    (issue,) = raised.value.issues
    assert issue.message == ("pattern `attention` names only cells in layer 0 (attention), but "
                             "select_recompute_exclude sets an attribute of primitive operators")


def test_exclude_wins_inside_a_recomputed_cell():
    model = llama_model(1)
    apply_plan(_plan(num_layers=1, recompute={"select_recompute": ["feed_forward"],
                                              "select_recompute_exclude": ["feed_forward\\.mul"]}),
               model, device_target="CPU")
    layer = _layer(model, 0)
    assert layer.feed_forward.recompute_calls == [{}]
    assert marks(layer) == {"feed_forward.mul": {"recompute": False}}


def test_recompute_wins_over_swap_on_each_primitive():
    model = llama_model(1)
    plan = _plan(num_layers=1, recompute={"select_recompute": {"feed_forward\\.w1": [0]}},
                 swap={"swap": True, "layer_swap": [{"backward_prefetch": 4, "layers": [0]}]})
    report = apply_plan(plan, model, device_target="Ascend")
    layer = _layer(model, 0)
    assert layer.feed_forward.w1.recompute_calls == [{}]
    unswapped = sorted(path for path, prim in all_prims(layer) if "offload" not in prim.attrs)
    assert unswapped == ["feed_forward.w1.activation.silu", "feed_forward.w1.cast", "feed_forward.w1.matmul",
                         "feed_forward.w1.reshape", "feed_forward.w1.shape"]
    assert _lines(report, "Not swapped") == [
        "Not swapped at layer 0, because recompute wins over swap: feed_forward.w1.matmul, feed_forward.w1.cast, "
        "feed_forward.w1.reshape, feed_forward.w1.shape, feed_forward.w1.activation.silu"]
    assert report.to_dict()["not_offloaded"][0] == {
        "layer": 0, "path": "feed_forward.w1.matmul", "swap_rule": "swap_config.layer_swap[0]", "swap_line": None,
        "reason": "recomputed (recompute_config.select_recompute['feed_forward\\.w1']); recompute wins over swap"}


def test_op_swap_overrides_layer_swap_prefetch():
    model = llama_model(1)
    apply_plan(_plan(num_layers=1, swap={"swap": True, "layer_swap": [{"backward_prefetch": 4, "layers": [0]}],
                                         "op_swap": [{"op_name": "attention", "backward_prefetch": 9,
                                                      "layers": True}]}), model, device_target="Ascend")
    prefetch = {path.split(".")[0]: attrs["backward_prefetch"] for path, attrs in marks(_layer(model, 0)).items()}
    assert prefetch["attention"] == 9 and prefetch["feed_forward"] == 4


def test_overlapping_op_swaps_with_different_prefetch_are_refused():
    plan = _plan(num_layers=1, swap={"swap": True, "op_swap": [
        {"op_name": "attention", "backward_prefetch": 9, "layers": [0]},
        {"op_name": "attention\\.wq", "backward_prefetch": 2, "layers": [0]}]})
    model = llama_model(1)
    with pytest.raises(ConfigError) as raised:
        apply_plan(plan, model, device_target="Ascend")
    assert {issue.path for issue in raised.value.issues} == {"swap_config.op_swap[1]"}
    assert "the prefetch is ambiguous" in raised.value.issues[0].message
    assert marks(_layer(model, 0)) == {}


def test_full_recompute_passes_the_options_that_were_written():
    model = llama_model(2)
    report = apply_plan(_plan(num_layers=2, recompute={"recompute": [1], "recompute_slice_activation": True}),
                        model, device_target="CPU")
    assert _layer(model, 0).recompute_calls == [{"recompute_slice_activation": True}]
    assert _layer(model, 1).recompute_calls == []
    assert _lines(report, "Set full") == ["Set full recompute at layer 0"]


def test_layer_count_must_match_the_plan():
    with pytest.raises(ConfigError) as raised:
        apply_plan(_plan(num_layers=3), llama_model(4), device_target="CPU")
    assert raised.value.issues[0].message == "the model has 4 decoder layers but the plan has 3"


def test_a_list_of_layers_is_accepted():
    model = llama_model(2)
    layers = [_layer(model, 0), _layer(model, 1)]
    apply_plan(_plan(num_layers=2, recompute={"recompute": [1]}), layers, device_target="CPU")
    assert layers[0].recompute_calls == [{}]


def test_report_is_json_and_names_every_target():
    model = llama_model(4)
    report = apply_plan(load_plan(CONFIGS / "swap_case4_with_recompute.yaml"), model, device_target="CPU")
    data = json.loads(report.to_json())
    assert data["set"][0] == {"layer": 0, "path": "feed_forward", "target": "cell", "type": "FakeCell",
                              "set": {"recompute_cell": {}}, "rule": "recompute_config.select_recompute['feed_forward']",
                              "line": _line_of(CONFIGS / "swap_case4_with_recompute.yaml", "'feed_forward': [0, 3]")}
    offloads = [entry for entry in data["set"] if "offload" in entry["set"]]
    assert len(offloads) == sum(len(marks(_layer(model, index))) for index in range(4))


def test_offload_on_cpu_says_nothing_is_swapped(caplog):
    caplog.set_level(logging.INFO, logger="mf_memopt")
    apply_plan(load_plan(CONFIGS / "swap_case2_layer_swap.yaml"), llama_model(4), device_target="CPU")
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert warnings == ["Offload attributes are recorded in the compiled graph, but only the Ascend backend moves "
                        "activations to host memory: on CPU nothing is swapped"]
    infos = [record.getMessage() for record in caplog.records if record.levelno == logging.INFO]
    assert "Set layer swap at layer 3 and value is: 20" in infos


def test_recompute_marks_the_model_already_carries_also_win_over_swap():
    model = llama_model(1)
    layer = _layer(model, 0)
    layer.attention.apply_rotary_emb.recompute()      # e.g. set by the model's own code
    layer.ffn_norm.cast.recompute(True)
    report = apply_plan(_plan(num_layers=1, swap={"swap": True, "layer_swap": [{"backward_prefetch": 1,
                                                                                 "layers": [0]}]}),
                        model, device_target="Ascend")
    reasons = {skip["path"]: skip["reason"] for skip in report.to_dict()["not_offloaded"]}
    assert reasons == {
        "ffn_norm.cast": "recomputed (the model's own recompute attribute); recompute wins over swap",
        "attention.apply_rotary_emb.add": "recomputed (the model's own Cell.recompute); recompute wins over swap",
        "attention.apply_rotary_emb.mul": "recomputed (the model's own Cell.recompute); recompute wins over swap"}
    assert "offload" not in layer.ffn_norm.cast.attrs and layer.ffn_norm.mul.attrs["offload"] is True
