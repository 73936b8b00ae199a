"""The tiny twins of the pipeline YAMLs MindFormers 1.9 ships (Qwen3 32B, Qwen3-30B-A3B, TeleChat3 36B, DeepSeek-V3
671B and 12B) and of the project's legacy Llama pipeline configs, built on CPU with MindFormers' own stage
assignment (`tests/children/twin_builds.py`, in a child process): mf_memopt's marks equal MindFormers'
`LayerSetting`'s on every cell and primitive of the decoder and MTP layers, `pipeline_stage` included, except where a
documented rule says otherwise (`mf_memopt/config/differences.py`, docs/configuration.md); each such difference is
asserted here, and `validate` reports it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import cache
from pathlib import Path

import pipeline_twins
import pytest

from mf_memopt import load_plan


ROOT = Path(__file__).resolve().parents[2]
TWINS = [*pipeline_twins.MCORE, *pipeline_twins.VARIANTS, *pipeline_twins.LEGACY]


@cache
def _results(names: tuple[str, ...]) -> dict:
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "children" / "twin_builds.py"), *names],
                          capture_output=True, text=True, timeout=1800, cwd=ROOT, env={**os.environ, "GLOG_v": "3"})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _result(name: str) -> dict:
    """One child process per family: a build switches MindFormers' process-wide context."""
    legacy = name in pipeline_twins.LEGACY
    return _results(tuple(pipeline_twins.LEGACY if legacy else [*pipeline_twins.MCORE, *pipeline_twins.VARIANTS]))[name]


def _data(name: str) -> dict:
    return pipeline_twins.twin(pipeline_twins.shipped(name), "./output")


@pytest.mark.parametrize("name", TWINS)
def test_a_twin_keeps_its_yamls_layout(name):
    shipped, twin = pipeline_twins.shipped(name), _data(name)
    for path in pipeline_twins.LAYOUT:
        assert _get(twin, path) == _get(shipped, path), path
    model, tiny = shipped["model"]["model_config"], twin["model"]["model_config"]
    assert {key: tiny.get(key) for key in pipeline_twins.MODEL_LAYOUT} == \
           {key: model.get(key) for key in pipeline_twins.MODEL_LAYOUT}
    assert twin["use_legacy"] is (shipped.get("use_legacy", True) is not False)
    key = "num_layers" if twin["use_legacy"] else "num_hidden_layers"
    assert tiny[key] <= model[key] and tiny["hidden_size"] == 64
    assert load_plan(twin).layout.stages == shipped["parallel_config"]["pipeline_stage"]


def test_the_twins_cover_every_pipeline_layout_the_issue_names():
    layouts = {name: load_plan(_data(name)).layout for name in TWINS}
    assert {name: (layout.stages, layout.chunks) for name, layout in layouts.items()} == {
        "qwen3_32b": (4, 1), "qwen3_30b_a3b": (4, 1), "telechat3_36b": (2, 2), "deepseek3_671b": (8, 2),
        "deepseek3_12b": (16, 1), "deepseek3_671b_swap": (8, 2), "llama2_7b_swap_pp2": (2, 1),
        "interleave_48l_pp5": (5, 2),
        "per_stage_counts_pp16": (16, 1)}
    assert _data("deepseek3_671b")["model"]["model_config"]["num_nextn_predict_layers"] == 1


def _get(data: dict, path: tuple[str, ...]):
    for key in path:
        data = (data or {}).get(key)
    return data


def _full_layers(marks: dict) -> set[str]:
    return {path for path, value in marks.items() if path.count(".") == (1 if path.startswith("layers") else 2)
            and value.get("cell_recompute")}


def _under(path: str, layers: set[str]) -> bool:
    return any(path.startswith(layer + ".") for layer in layers)


def _documented(name: str, theirs: dict, ours: dict) -> tuple[dict, dict]:
    """Both marks with the documented differences taken out, after checking each is what its rule says."""
    data = _data(name)
    recompute = data.get("recompute_config") or {}
    full = _full_layers(theirs)
    assert full == _full_layers(ours)
    theirs, ours = json.loads(json.dumps(theirs)), json.loads(json.dumps(ours))
    # recompute-options-written: the written options reach every operator of a fully recomputed layer
    for key, mark in (("mp_comm_recompute", "recompute_comm_op"), ("recompute_slice_activation", "slice_activation")):
        if key not in recompute or (key == "recompute_slice_activation" and recompute.get("recompute") is True):
            continue
        for path, marks in ours.items():
            if _under(path, full) and "cell_recompute" not in marks:      # the operators, not the cells
                assert marks.pop(mark) == recompute[key], (path, mark)
                assert mark not in theirs.get(path, {}), path
    # no-default-slice-marks: MindFormers' slice_activation: False under recompute: true, not written
    if recompute.get("recompute") is True and "recompute_slice_activation" not in recompute:
        for path, marks in theirs.items():
            if _under(path, full) and "cell_recompute" not in marks:
                assert marks.pop("slice_activation") is False, path
    plan = load_plan(data)
    _unshared(plan, theirs, ours)
    # rule 3, recompute beats swap: a swap dropped where the layer is fully recomputed (validate's conflict), and no
    # offload on an operator that is itself recomputed
    dropped = {f"layers.{layer}" for conflict in plan.conflicts if conflict.rule == "recompute-over-swap"
               and conflict.effect == "dropped" and conflict.kept.what == "full recompute" for layer in conflict.layers}
    for path, marks in theirs.items():
        if _under(path, dropped) or marks.get("recompute") is True and "offload" in marks:
            assert "offload" not in ours.get(path, {}), path
            _pop(marks, SWAP)
    return ({path: marks for path, marks in theirs.items() if marks},
            {path: marks for path, marks in ours.items() if marks})


def _unshared(plan, theirs: dict, ours: dict) -> None:
    """Unshared operators: MindFormers' MoE routers share one gating activation object, so an offload one layer's
    swap sets on it is on every layer's (MindFormers' marks: one value everywhere); mf_memopt gives each layer its
    own, offloaded only in the layers whose plan swaps it (here: the layer swaps, and the MTP layer after the last
    layer)."""
    shared = [path for path in theirs if path.endswith("mlp.router.gating_activation")]
    if not any("offload" in theirs[path] for path in shared):
        return
    # one object: the same marks in every layer, those of the models built before it in the process included
    assert len({json.dumps(theirs[path], sort_keys=True) for path in shared}) == 1
    swapped = {f"layers.{layer.layer}" for layer in plan.layers if layer.layer_swap is not None}
    if f"layers.{plan.num_layers - 1}" in swapped:
        swapped.add("mtp.layers.0")
    for path in shared:
        theirs[path] = {}
    for path in [path for path in ours if path.endswith("mlp.router.gating_activation")]:
        assert "offload" not in ours[path] or _under(path, swapped), path
        _pop(ours[path], SWAP)


SWAP = ("offload", "backward_prefetch")


def _pop(marks: dict, keys: tuple[str, ...]) -> None:
    for key in keys:
        marks.pop(key, None)


@pytest.mark.parametrize("name", TWINS)
def test_the_same_marks_and_stages_as_mindformers_except_the_documented_rules(name):
    result = _result(name)
    theirs, ours = _documented(name, result["theirs"], result["ours"])
    assert {path: marks["pipeline_stage"] for path, marks in ours.items() if "pipeline_stage" in marks} == \
           {path: marks["pipeline_stage"] for path, marks in theirs.items() if "pipeline_stage" in marks}
    decoder = {f"layers.{layer}": stage for layer, stage in result["stages"].items()}
    assert {path: theirs[path]["pipeline_stage"] for path in decoder} == decoder      # the plan's stages too
    assert ours == theirs


@pytest.mark.parametrize("name", ["deepseek3_671b", "deepseek3_12b"])
def test_the_mtp_layer_sits_on_the_last_stage_with_the_last_layers_plan(name):
    result = _result(name)
    stages = _data(name)["parallel_config"]["pipeline_stage"]
    assert result["ours"]["mtp.layers.0"] == result["theirs"]["mtp.layers.0"] == {"cell_recompute": True,
                                                                                  "pipeline_stage": stages - 1}


def test_the_mtp_layer_is_swapped_with_the_last_layer():
    result = _result("deepseek3_671b_swap")
    for marks in (result["ours"], result["theirs"]):
        assert marks["mtp.layers.0"] == {"pipeline_stage": 7}
        assert marks["mtp.layers.0.enorm.norm"] == marks["layers.60.input_layernorm.norm"] == {
            "offload": True, "backward_prefetch": 3}


@pytest.mark.parametrize("name", TWINS)
def test_validate_reports_each_documented_difference(name):
    """On the YAML itself, as `validate` reads it: one note per rule it meets, at the key's line."""
    recompute = _data(name).get("recompute_config") or {}
    if name in pipeline_twins.VARIANTS:
        path = pipeline_twins.shipped(name)         # no file: no lines
    elif name in pipeline_twins.MCORE:
        path = pipeline_twins.WHEEL / pipeline_twins.MCORE[name]
    else:
        path = ROOT / pipeline_twins.LEGACY[name]
    plan = load_plan(path)
    rules = [note.message.split("]")[0].split("[")[1] for note in plan.differences]
    full = any(layer.full_recompute is not None for layer in plan.layers)
    expected = []
    if full and "mp_comm_recompute" in recompute:
        expected.append("recompute-options-written")
    if full and "recompute_slice_activation" in recompute and recompute.get("recompute") is not True:
        expected.append("recompute-options-written")
    if full and recompute.get("recompute") is True and "recompute_slice_activation" not in recompute:
        expected.append("no-default-slice-marks")
    if name == "deepseek3_671b_swap":
        expected.append("unshared-operators")
    assert rules == expected
    assert all(note.severity == "note" and (note.line is not None or name in pipeline_twins.VARIANTS)
               for note in plan.differences)
