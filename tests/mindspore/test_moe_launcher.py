"""The shipped tiny Qwen3-MoE (MindFormers' own mcore MoE model) through the launcher on CPU: it trains on the
MoE stand-ins, recompute of the whole layer, of the MoE block or of the experts alone lowers the memory-pool peak
without changing a loss, the CPU estimate holds, and the compiled graph carries the plan's marks."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
import yaml
from launching import POOL_LOG, launcher_command, launcher_env

from mf_memopt.estimate import estimate_config
from mf_memopt.runs.measure import CPU_PEAK


ROOT = Path(__file__).resolve().parents[2]
MOE = ROOT / "configs" / "qwen3_moe_tiny.yaml"
DEEPSEEK = ROOT / "configs" / "deepseek3_tiny.yaml"
LOSS = re.compile(r"step:\[\s*(\d+)/\s*\d+\], loss:\[([\d.]+)/")
OFF = {"recompute": False, "select_recompute": False, "select_comm_recompute": False}
RECOMPUTE = {"none": OFF, "full": {**OFF, "recompute": True},
             "mlp": {**OFF, "select_recompute": {"mlp": True}},
             "experts": {**OFF, "select_recompute": {r"mlp\.experts": True}}}
# the tiny DeepSeek-V3 alone: the MLP cells and MindFormers' default comm pattern (`.*\.norm`: RmsNorm primitives on
# Ascend, their CPU stand-ins' operators here, test_stand_in_patterns.py)
DEEPSEEK_ONLY = {"mlp_comm": {**OFF, "select_recompute": {"mlp": True}, "select_comm_recompute": True}}


@cache
def _run(base: Path, recompute: str, tmp: str) -> tuple[int, dict[int, float], str, Path]:
    """Three steps of `base` with one of the recompute forms: the pool peak (MiB), the losses, the log, the YAML."""
    data = yaml.safe_load(base.read_text())
    data["recompute_config"] = {**RECOMPUTE, **DEEPSEEK_ONLY}[recompute]
    config = Path(tmp) / f"{base.stem}_{recompute}.yaml"
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    output = Path(tmp) / f"{base.stem}_{recompute}"
    done = subprocess.run(launcher_command(config, "--run_mode", "train", "--train_steps", "3",
                                           "--output_dir", str(output),
                                           "--train_dataset_dir", str(output / "data" / "tokens.mindrecord")),
                          capture_output=True, text=True, timeout=900, cwd=ROOT,
                          env=launcher_env(**POOL_LOG))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    peaks = CPU_PEAK.findall(done.stdout + done.stderr)
    assert peaks, "MindSpore printed no memory-pool peak"
    losses = {int(step): float(loss) for step, loss in LOSS.findall(done.stdout)}
    return int(peaks[-1]), losses, done.stdout, config


def _trained(recompute: str, tmp: str) -> tuple[int, dict[int, float], str, Path]:
    return _run(MOE, recompute, tmp)


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("qwen3_moe"))


def test_the_tiny_qwen3_moe_trains_on_the_moe_stand_ins(work):
    _, losses, out, _ = _trained("mlp", work)
    assert sorted(losses) == [1, 2, 3] and losses[3] < losses[1]
    assert [f"Set select recompute at layer {index}: mlp" in out for index in range(4)] == [True] * 4
    assert "CPU has no kernel for Morph, Outer, RmsNorm, FlashAttentionScore, TopkExt, Swiglu: replaced by " \
           "stand-ins under the same names (1 CPUEmbeddingLookup, 2 CPUOuter, 17 CPURmsNorm, " \
           "4 CPUFlashAttentionScore, 4 CPUTopk, 4 CPUDenseExperts, 4 CPUSwiglu)" in out
    assert "leaves them: self_attention.linear_qkv.reshape, mlp.experts.swiglu" in out
    assert "MindFormers shares 1 operator object(s) between the decoder layers (mlp.router.gating_activation)" in out


def test_recompute_lowers_the_pool_peak_and_changes_no_loss(work):
    peaks = {name: _trained(name, work)[0] for name in RECOMPUTE}
    losses = {name: _trained(name, work)[1] for name in RECOMPUTE}
    assert peaks["full"] <= 0.75 * peaks["none"], peaks
    assert peaks["mlp"] < peaks["none"] and peaks["experts"] < peaks["none"], peaks
    assert losses["full"] == losses["mlp"] == losses["experts"] == losses["none"]


@pytest.mark.parametrize("recompute", ["none", "full", "mlp", "experts"])
def test_the_cpu_estimate_is_within_ten_percent_of_the_pool_peak(work, recompute):
    peak, _, _, config = _trained(recompute, work)        # MindSpore prints whole MiB, rounded down
    estimated = estimate_config(str(config), runtime="cpu").stages[0].peak.peak / 2**20
    assert abs(estimated - (peak + 0.5)) / (peak + 0.5) <= 0.10, (estimated, peak)


def test_verify_finds_the_experts_offload_and_recompute_in_the_graph(tmp_path):
    """With swap on, a list picks layers by index: the router of layer 2 recomputed, the experts of layer 3
    offloaded (the offload marks are recorded in the graph; only Ascend moves the data)."""
    data = yaml.safe_load(MOE.read_text())
    data["recompute_config"] = {**OFF, "select_recompute": {r"mlp\.router": [2]}}
    data["swap_config"] = {"swap": True, "op_swap": [{"op_name": r"mlp\.experts", "backward_prefetch": 4,
                                                      "layers": [3]}]}
    config = tmp_path / "moe_verify.yaml"
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    done = subprocess.run([sys.executable, "-m", "mf_memopt", "verify", str(config), "--json"], capture_output=True,
                          text=True, timeout=900, cwd=tmp_path,
                          env={**os.environ, "GLOG_v": "3", "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["agrees"], result
    layers = {layer["layer"]: layer for layer in result["layers"]}
    assert [layers[index]["recompute"] for index in range(4)] == [[], [], ["mlp.router"], []]
    # MindFormers' own marks (the QKV reshape, the Swiglu's operators) give every layer the same copies; the router
    # adds its own in layer 2
    assert layers[2]["copies"] > layers[0]["copies"] == layers[1]["copies"] == layers[3]["copies"] > 0
    assert list(layers[3]["offloaded"]) == ["4"] and layers[3]["offloaded"]["4"] > 0
    assert not any(layers[index]["offloaded"] for index in range(3))


def _deepseek(recompute: str, tmp: str) -> tuple[int, dict[int, float], str]:
    return _run(DEEPSEEK, recompute, tmp)[:3]


def test_the_tiny_deepseek_v3_trains_and_its_mtp_layer_takes_the_last_layers_plan(work):
    _, losses, out = _deepseek("full", work)
    assert sorted(losses) == [1, 2, 3] and losses[3] < losses[1]
    assert [f"Set full recompute at layer {index}" in out for index in range(4)] == [True] * 4
    assert "MTP layer 0 (the last layer's plan, as MindFormers' LayerSetting): Set full recompute" in out
    assert "2 CPUEmbeddingLookup" in out          # the MTP layer's shared embedding too


def test_recompute_lowers_the_deepseek_peak_and_changes_no_loss(work):
    none, none_losses, _ = _deepseek("none", work)
    full, full_losses, _ = _deepseek("full", work)
    mlp, mlp_losses, _ = _deepseek("mlp_comm", work)
    assert full < 0.8 * none and mlp < none, (none, full, mlp)
    assert none_losses == full_losses == mlp_losses


def test_the_default_comm_pattern_marks_the_norm_stand_ins_and_trains(work):
    """`select_comm_recompute: True`, which `validate` accepts, is not refused at apply on CPU: MindFormers' default
    pattern names the RmsNorm primitives Ascend has, and marks the operators of the CPU stand-ins under the same
    names (test_stand_in_patterns.py verifies the marks in the compiled graph)."""
    _, losses, out = _deepseek("mlp_comm", work)
    for index in range(4):
        assert f"Set select comm recompute at layer {index}: input_layernorm.norm, pre_mlp_layernorm.norm" in out
    assert "Set select comm recompute: enorm.norm, hnorm.norm, final_layernorm.norm" in out
    assert sorted(losses) == [1, 2, 3] and losses[3] < losses[1]


def test_full_recompute_lowers_the_deepseek_peak_by_a_quarter(work):
    """Each router adds its expert load (the expert bias's count) to a Parameter during the forward. Written there,
    it cut the CPU step into a forward and a backward kernel graph, and full recompute saved 23% (100.16 -> 76.90
    MiB); the CPU step adds it after the optimizer instead (`cpu_wrapper.py`, 6.; test_router_additions.py): 30%."""
    _, _, out = _deepseek("full", work)
    assert "4 Parameter(s) MindFormers' MoE routers add to during the forward (expert_load) are added after the " \
           "optimizer instead" in out
    assert _deepseek("full", work)[0] <= 0.75 * _deepseek("none", work)[0]
