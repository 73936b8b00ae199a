"""`python -m mf_memopt verify` on every shipped config that trains: the compiled graph agrees with the plan.

A shipped config's verify runs once per session (`shared_runs.verify_shipped`): test_compare_e2e.py and
test_mcore_launcher.py read the same run of swap_case2_layer_swap.yaml and qwen3_tiny.yaml."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from shared_runs import verify_shipped


ROOT = Path(__file__).resolve().parents[2]
TRAINABLE = sorted(path.relative_to(ROOT).as_posix() for path in (ROOT / "configs").glob("*.yaml"))


def _verify(config: str) -> subprocess.CompletedProcess:
    """verify of a config of this test's own (not shipped: run here, not shared)."""
    env = {**os.environ, "GLOG_v": "3", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "mf_memopt", "verify", config, "--json"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def _result(done: subprocess.CompletedProcess) -> dict:
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return json.loads(done.stdout)


def _shipped(tmp_path_factory, config: str) -> dict:
    return _result(verify_shipped(tmp_path_factory, config))


@pytest.mark.parametrize("config", TRAINABLE)
def test_compiled_graph_agrees_with_the_plan(config, tmp_path_factory):
    result = _shipped(tmp_path_factory, config)
    assert result["agrees"] is True
    # four decoder layers, and the tiny DeepSeek-V3's MTP layer, checked as `mtp.0`
    names = [layer["name"] or str(layer["layer"]) for layer in result["layers"]]
    assert names == ["0", "1", "2", "3", *(["mtp.0"] if "deepseek" in config else [])]
    assert [layer["disagreements"] for layer in result["layers"]] == [[]] * len(names)


def test_deepseek_full_recompute_swap_and_the_mtp_layers_own_pattern_agree(tmp_path):
    """Full recompute of the first three layers (the up projections' reshapes fused after matmuls the IR scopes
    outside the layer), op_swap of the last layer's attention (its stand-ins' equal Muls merged under one name) and
    a pattern naming the MTP layer's MLP, which the MTP layer takes with the last layer's plan."""
    data = yaml.safe_load((ROOT / "configs" / "deepseek3_tiny.yaml").read_text())
    # with a pattern dict MindFormers reads the recompute list as layer ids
    data["recompute_config"] = {"recompute": [0, 1, 2], "select_recompute": {r"transformer_layer\.mlp": True},
                                "select_comm_recompute": False}
    data["swap_config"] = {"swap": True, "op_swap": [{"op_name": "self_attention", "backward_prefetch": 5,
                                                      "layers": [3]}]}
    config = tmp_path / "deepseek.yaml"
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    result = _result(_verify(str(config)))
    assert result["agrees"] is True, [layer["disagreements"] for layer in result["layers"]]
    by_name = {layer["name"] or str(layer["layer"]): layer for layer in result["layers"]}
    assert [by_name[name]["recompute"] for name in ("0", "1", "2")] == [["layer"]] * 3
    assert by_name["mtp.0"]["recompute"] == ["transformer_layer.mlp"] and by_name["mtp.0"]["copies"] > 0
    assert by_name["3"]["offloaded"] == {"5": by_name["3"]["offloaded"]["5"]} and not by_name["mtp.0"]["offloaded"]
    assert any("MindSpore merged equal primitives" in note for note in by_name["3"]["notes"])


def test_recomputed_cells_are_copied_into_the_backward(tmp_path_factory):
    layers = _shipped(tmp_path_factory, "configs/llama_tiny.yaml")["layers"]
    assert [layer["recompute"] for layer in layers] == [["feed_forward"]] * 4
    assert all(layer["copies"] > 0 and not layer["notes"] for layer in layers)


def test_offloads_carry_the_configured_prefetch(tmp_path_factory):
    layers = _shipped(tmp_path_factory, "configs/swap_case3_op_swap.yaml")["layers"]
    assert [sorted(layer["offloaded"]) for layer in layers] == [["20"], ["15", "20"], ["15", "20"], ["10"]]


def test_marks_that_save_nothing_are_reported(tmp_path_factory):
    layers = _shipped(tmp_path_factory, "configs/recompute_select_patterns.yaml")["layers"]
    assert "feed_forward.mul is marked for recompute, but the graph has no recompute copy of it (its consumers " \
           "keep their own inputs): it saves no memory here" in layers[3]["notes"]


def test_rule_2_conflict_is_found_and_strict_fails_on_it(tmp_path_factory):
    layers = _shipped(tmp_path_factory, "configs/swap_rule2_example.yaml")["layers"]
    assert [layer["rule2"] for layer in layers] == [
        [], ["layer 1: the offload of attention_norm.mul2 does not take effect: its output is consumed by "
             "recomputed attention.wq (Reshape) (rule 2)"], [], []]
    assert verify_shipped(tmp_path_factory, "configs/swap_rule2_example.yaml", "--strict").returncode == 1
