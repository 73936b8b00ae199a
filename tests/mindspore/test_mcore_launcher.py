"""The shipped tiny Qwen3 (MindFormers' own mcore model) through the launcher on CPU: it trains on a generated
dataset with `input_ids` and `labels`, the plan's lines name mcore cells, recompute lowers the memory-pool peak
without changing a loss, and the compiled graph carries what the plan and MindFormers' cells set."""

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
from shared_runs import verify_shipped

from mf_memopt.runs.measure import CPU_PEAK


ROOT = Path(__file__).resolve().parents[2]
QWEN3 = ROOT / "configs" / "qwen3_tiny.yaml"
LOSS = re.compile(r"step:\[\s*(\d+)/\s*\d+\], loss:\[([\d.]+)/")
RECOMPUTE = {"none": {"recompute": False, "select_recompute": False},
             "full": {"recompute": True, "select_recompute": False},
             "mlp": {"recompute": False, "select_recompute": {"mlp": True}}}


def _launch(config: Path, output: Path, steps: int) -> subprocess.CompletedProcess:
    env = launcher_env(**POOL_LOG)
    done = subprocess.run(launcher_command(config, "--run_mode", "train", "--train_steps", str(steps),
                                           "--output_dir", str(output),
                                           "--train_dataset_dir", str(output / "data" / "tokens.mindrecord")),
                          capture_output=True, text=True, timeout=900, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


@cache
def _trained(recompute: str, tmp: str, clip: bool = True) -> tuple[int, dict[int, float], str]:
    data = yaml.safe_load(QWEN3.read_text())
    data["recompute_config"] = {**RECOMPUTE[recompute], "select_comm_recompute": False}
    data["runner_wrapper"]["use_clip_grad"] = clip
    name = recompute if clip else f"{recompute}_noclip"
    config = Path(tmp) / f"qwen3_{name}.yaml"
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    done = _launch(config, Path(tmp) / name, steps=3)
    peaks = CPU_PEAK.findall(done.stdout + done.stderr)
    assert peaks, "MindSpore printed no memory-pool peak"
    losses = {int(step): float(loss) for step, loss in LOSS.findall(done.stdout)}
    return int(peaks[-1]), losses, done.stdout


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("qwen3"))


def test_the_tiny_qwen3_trains_and_the_log_names_mcore_cells(work):
    _, losses, out = _trained("mlp", work)
    assert sorted(losses) == [1, 2, 3] and losses[3] < losses[1]
    assert [f"Set select recompute at layer {index}: mlp" in out for index in range(4)] == [True] * 4
    assert "CPU has no kernel for Morph, Outer, RmsNorm, FlashAttentionScore: replaced by stand-ins under the " \
           "same names (1 CPUEmbeddingLookup, 2 CPUOuter, 17 CPURmsNorm, 4 CPUFlashAttentionScore)" in out
    assert "MindFormers' mcore cells mark these operators for recompute themselves, in every layer; mf_memopt " \
           "leaves them: self_attention.linear_qkv.reshape, mlp.reshape, mlp.linear_fc1.reshape" in out


def test_recompute_lowers_the_pool_peak_and_changes_no_loss(work):
    none, none_losses, _ = _trained("none", work)
    full, full_losses, _ = _trained("full", work)
    mlp, mlp_losses, _ = _trained("mlp", work)
    assert full <= 0.75 * none, (none, full)
    assert mlp < none, (none, mlp)
    assert none_losses == full_losses == mlp_losses


def test_without_clip_grad_the_step_compiles_and_reports_the_norm(work):
    """MindFormers' step returns None as the norm without clip-grad, which an mcore step cannot return on CPU. (That
    full recompute still saves memory in this step form is measured by `python benchmarks/step_forms.py --model
    qwen3`, which trains every step form.)"""
    _, losses, out = _trained("full", work, clip=False)
    assert sorted(losses) == [1, 2, 3] and losses[3] < losses[1]
    assert "use_clip_grad is False: the step reports the gradients' global norm without clipping by it" in out
    norms = [float(value) for value in re.findall(r"global_norm: \[([\d.]+)\]", out)]
    assert len(norms) == 3 and all(value > 0 for value in norms)


def _verify(config: Path, cwd: Path) -> dict:
    done = subprocess.run([sys.executable, "-m", "mf_memopt", "verify", str(config), "--json"], capture_output=True,
                          text=True, timeout=900, cwd=cwd, env={**os.environ, "GLOG_v": "3", "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(done.stdout)


def test_verify_finds_the_plan_and_mindformers_own_marks_in_the_graph(tmp_path_factory):
    done = verify_shipped(tmp_path_factory, "configs/qwen3_tiny.yaml")    # the session's one (test_verify_e2e.py)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["agrees"] is True
    assert [layer["recompute"] for layer in result["layers"]] == [["mlp"]] * 4
    assert all(layer["copies"] > 0 for layer in result["layers"])


def test_verify_proves_the_fused_mlp_linears_backward_reads_only_their_compressed_copies(tmp_path):
    data = yaml.safe_load(QWEN3.read_text())
    data["recompute_config"] = {**RECOMPUTE["none"], "select_comm_recompute": False}
    data["compress_config"] = {"compress": True, "op_compress": [
        {"op_name": r"mlp\.linear_fc(1|2)", "method": "int8", "layers": True}]}
    config = tmp_path / "int8.yaml"
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    result = _verify(config, tmp_path)
    assert result["agrees"] is True
    assert [sorted(layer["compressed"]) for layer in result["layers"]] == [["mlp.linear_fc1 (int8)",
                                                                          "mlp.linear_fc2 (int8)"]] * 4
