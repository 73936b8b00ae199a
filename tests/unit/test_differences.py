"""`validate` notes where mf_memopt's marks differ from MindFormers' own LayerSetting, one note per documented rule
(`mf_memopt/config/differences.py`), at the key it concerns; the differential tests assert each against
MindFormers' marks. A config that meets no rule gets no note."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from mf_memopt import load_plan
from mf_memopt.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _rules(plan) -> list[str]:
    return [note.message.split("[", 1)[1].split("]", 1)[0] for note in plan.differences]


def _data(name: str) -> dict:
    return yaml.safe_load((ROOT / "configs" / name).read_text())


def test_the_tiny_configs_meet_only_the_llama_attention_rule():
    for name in ("qwen3_tiny.yaml", "deepseek3_tiny.yaml", "qwen3_moe_tiny.yaml"):
        assert load_plan(ROOT / "configs" / name).differences == (), name
    # select_recompute with flash attention off, as on CPU
    assert _rules(load_plan(ROOT / "configs" / "llama_tiny.yaml")) == ["llama-attention-core"]


def test_mp_comm_recompute_with_counts_is_noted_with_its_effect():
    data = _data("qwen3_tiny.yaml")
    data["recompute_config"] = {"recompute": [2], "mp_comm_recompute": False, "recompute_slice_activation": True}
    data["parallel_config"]["model_parallel"] = 2
    plan = load_plan(data)
    assert _rules(plan) == ["recompute-options-written", "recompute-options-written"]
    comm, slice_ = plan.differences
    assert comm.path == "recompute_config.mp_comm_recompute" and comm.severity == "note"
    assert "MindFormers 1.9 ignores it" in comm.message and "recompute_comm_op: False" in comm.message
    assert "its output kept" in comm.message and "model_parallel is 1" not in comm.message
    assert slice_.path == "recompute_config.recompute_slice_activation"


def test_without_tensor_parallelism_the_note_says_the_mark_does_nothing():
    data = _data("qwen3_tiny.yaml")
    data["recompute_config"] = {"recompute": True, "mp_comm_recompute": True}
    plan = load_plan(data)
    assert _rules(plan) == ["recompute-options-written", "no-default-slice-marks"]
    assert plan.differences[0].message.endswith("model_parallel is 1, so there is no such communication")


def test_no_fully_recomputed_layer_no_note():
    data = _data("qwen3_tiny.yaml")
    data["recompute_config"] = {"recompute": False, "mp_comm_recompute": False}
    assert load_plan(data).differences == ()


def test_the_mcore_default_swap_strategy_is_noted():
    data = _data("qwen3_tiny.yaml")
    data["swap_config"] = {"swap": True, "default_prefetch": 3}
    plan = load_plan(data)
    assert "mcore-default-swap" in _rules(plan)


def test_the_llama_attention_core_is_noted_with_how_to_keep_it():
    data = _data("llama_tiny.yaml")
    data["recompute_config"] = {"select_recompute": True}
    data["model"]["model_config"]["use_flash_attention"] = False
    (note,) = load_plan(data).differences
    assert note.path == "recompute_config.select_recompute" and "attention\\.(batch_matmul_q_k" in note.hint
    flash = copy.deepcopy(data)
    flash["model"]["model_config"]["use_flash_attention"] = True
    assert load_plan(flash).differences == ()


@pytest.mark.parametrize("command", ["validate", "plan"])
def test_validate_and_plan_print_the_notes_to_stderr(command, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main([command, "configs/planning/per_stage_counts_pp16.yaml"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert [line.split(": ", 3)[1:3] for line in err] == [["recompute_config.mp_comm_recompute", "note"],
                                                           ["recompute_config.recompute_slice_activation", "note"]]
    assert err[0].startswith("configs/planning/per_stage_counts_pp16.yaml:37: ")
