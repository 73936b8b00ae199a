"""`python -m mf_memopt compare` on the shipped configs: real training runs of both configs, read back step by step."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml
from shared_runs import verify_shipped


ROOT = Path(__file__).resolve().parents[2]
OFF = {"recompute": False, "select_recompute": False, "select_comm_recompute": False}


def _variant(tmp_path: Path, config: str, name: str, **sections) -> Path:
    document = yaml.safe_load((ROOT / "configs" / config).read_text())
    document.update(sections)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def _compare(tmp_path: Path, *args: str) -> tuple[int, dict]:
    done = subprocess.run([sys.executable, "-m", "mf_memopt", "compare", *args, "--json"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=1200,
                          env={"GLOG_v": "3", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT),
                               "HOME": str(tmp_path)})
    assert done.returncode in (0, 1), done.stderr[-3000:]
    return done.returncode, json.loads(done.stdout)


def test_full_recompute_trains_bit_identically_to_the_shipped_llama_plan_and_lowers_the_peak(tmp_path):
    full = _variant(tmp_path, "llama_tiny.yaml", "full.yaml", recompute_config={**OFF, "recompute": True})
    status, result = _compare(tmp_path, str(ROOT / "configs" / "llama_tiny.yaml"), str(full), "--steps", "3")
    assert status == 0 and result["verdict"] == "identical" and result["kind"] == "bit-identical"
    assert len(result["steps"]) == 3 and all(step["loss_drift"] == 0 for step in result["steps"])
    assert all(step["base"]["global_norm"] is not None for step in result["steps"])
    assert result["parameters"] > 0 and result["differing_parameters"] == []
    assert set(result["changes"]) == {"recompute_config.recompute: False -> True",
                                      "recompute_config.select_recompute: (not set) -> False",
                                      "recompute_config.select_recompute.feed_forward: True -> (not set)"}
    assert result["peak_bytes"]["candidate"] < result["peak_bytes"]["base"]


def test_the_shipped_qwen3_plan_trains_bit_identically_to_no_recompute(tmp_path):
    none = _variant(tmp_path, "qwen3_tiny.yaml", "none.yaml", recompute_config=dict(OFF))
    status, result = _compare(tmp_path, str(none), str(ROOT / "configs" / "qwen3_tiny.yaml"), "--steps", "2")
    assert status == 0 and result["verdict"] == "identical", result
    assert result["differing_parameters"] == [] and result["parameters"] > 0


def test_a_shipped_swap_plans_offload_marks_reach_the_graph_and_change_no_number(tmp_path, tmp_path_factory):
    """What this proves on CPU, exactly: the candidate's compiled graph carries the plan's offload marks, and a
    graph with them trains bit-identically to one without. CPU moves nothing to the host, so it says nothing about
    the transfer itself; on Ascend the same comparison covers the transfer too."""
    # the session's one verify of the shipped config (test_verify_e2e.py reads the same run)
    verified = verify_shipped(tmp_path_factory, "configs/swap_case2_layer_swap.yaml")
    assert verified.returncode == 0, verified.stderr[-3000:]
    graph = json.loads(verified.stdout)
    assert graph["agrees"] and [sorted(layer["offloaded"]) for layer in graph["layers"]] == [["20"], [], [], ["20"]]
    base = _variant(tmp_path, "swap_case2_layer_swap.yaml", "no_swap.yaml", swap_config={"swap": False})
    status, result = _compare(tmp_path, str(base), str(ROOT / "configs" / "swap_case2_layer_swap.yaml"),
                              "--steps", "2")
    assert status == 0 and result["verdict"] == "identical" and result["kind"] == "bit-identical", result
    assert set(result["changes"]) == {"swap_config.swap: False -> True",
                                      "swap_config.layer_swap: (not set) -> [{'backward_prefetch': 20, 'layers': [0, 3]}]"}
    assert all(step["loss_drift"] == 0 for step in result["steps"]) and result["differing_parameters"] == []


def test_lossless_compression_is_identical_and_int2_everywhere_is_flagged_with_the_layers_to_keep_exact(tmp_path):
    base = ROOT / "configs" / "compress_int8_mlp.yaml"
    plain = _variant(tmp_path, "compress_int8_mlp.yaml", "plain.yaml", compress_config={"compress": False})
    status, result = _compare(tmp_path, str(plain), str(ROOT / "configs" / "compress_dense_level0.yaml"),
                              "--steps", "2")
    assert base.exists() and status == 0 and result["verdict"] == "identical", result
    int2 = _variant(tmp_path, "compress_int8_mlp.yaml", "int2.yaml", compress_config={"compress": True, "op_compress": [
        {"op_name": r"attention\.(wq|wk|wv|wo)", "method": "int2", "layers": True},
        {"op_name": r"feed_forward\.(w1|w2|w3)", "method": "int2", "layers": True}]})
    # measured: every step's drift is 0 for two steps (the first update is at learning rate 0), then 0.24%, 0.39%
    status, result = _compare(tmp_path, str(plain), str(int2), "--steps", "4", "--tolerance", "0.1",
                              "--max-runs", "2")
    assert status == 1 and result["verdict"] == "drifts beyond tolerance", result
    assert result["loss_drift"] > 0.0005 and result["kind"] == "within tolerance"
    assert result["bisection"] and result["keep_exact"]


def test_int8_on_the_qwen3s_fused_mlp_linears_stays_within_tolerance_and_lowers_the_peak(tmp_path):
    none = _variant(tmp_path, "qwen3_tiny.yaml", "none.yaml", recompute_config=dict(OFF))
    int8 = _variant(tmp_path, "qwen3_tiny.yaml", "int8.yaml", recompute_config=dict(OFF), compress_config={
        "compress": True, "op_compress": [{"op_name": r"mlp\.linear_fc(1|2)", "method": "int8", "layers": True}]})
    status, result = _compare(tmp_path, str(none), str(int8), "--steps", "3")
    assert status == 0 and result["verdict"] == "within tolerance", result
    assert result["steps"][0]["loss_drift"] == 0                  # the forward does not see the compression
    assert 0 < max(step["loss_drift"] for step in result["steps"]) < 1e-3   # measured: 1e-5 over 3 steps
    assert result["peak_bytes"]["candidate"] < result["peak_bytes"]["base"]
