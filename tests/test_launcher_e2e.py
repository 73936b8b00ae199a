"""run_mindformer_memopt.py on real MindFormers models: what a user runs, sees and greps."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

pytestmark = pytest.mark.mindspore

ROOT = Path(__file__).resolve().parents[1]
LOSS = re.compile(r"- INFO - step (\d+)/\d+: loss ([\d.]+), step time ([\d.]+) ms")


def _launch(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "GLOG_v": "3", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(ROOT / "run_mindformer_memopt.py"), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


@cache
def _trained(config: str, steps: int = 3) -> tuple[subprocess.CompletedProcess, Path]:
    output = ROOT / "output" / "tests" / Path(config).stem
    done = _launch("--config", config, "--run_mode", "train", "--train_steps", str(steps), "--output_dir",
                   str(output))
    assert done.returncode == 0, done.stderr[-3000:]
    return done, output


def _messages(done: subprocess.CompletedProcess, start: str) -> list[str]:
    return [line.split(" - INFO - ", 1)[1] for line in done.stdout.splitlines()
            if " - INFO - " in line and line.split(" - INFO - ", 1)[1].startswith(start)]


def _losses(done: subprocess.CompletedProcess) -> list[float]:
    return [float(match.group(2)) for match in LOSS.finditer(done.stdout)]


def test_default_config_trains_and_logs_what_was_set():
    done, output = _trained("configs/llama_tiny.yaml", steps=8)
    assert _messages(done, "Set ") == [f"Set select recompute at layer {index}: feed_forward" for index in range(4)]
    assert _messages(done, "Formative") == [
        "Formative layer_recompute: [[0]]", "Formative select_recompute: {'feed_forward': [[4]]}",
        "Formative select_comm_recompute: {'.*\\.norm': [[0]]}", "Formative select_recompute_exclude: {}",
        "Formative select_comm_recompute_exclude: {}"]
    losses = _losses(done)
    assert len(losses) == 8 and losses[-1] < losses[0] - 0.3
    report = json.loads((output / "apply_report.json").read_text())
    assert [(entry["layer"], entry["path"], entry["set"]) for entry in report["set"]] == \
        [(index, "feed_forward", {"recompute_cell": {}}) for index in range(4)]
    assert "mf_memopt[rank 0][" in done.stdout


SEED_LINES = {
    "configs/swap_case1_default.yaml": ("Set op_swap at layer", [
        f"Set op_swap at layer {index}: attention.flash_attention, value=10" for index in range(4)]),
    "configs/swap_case2_layer_swap.yaml": ("Set layer swap at", [
        "Set layer swap at layer 0 and value is: 20", "Set layer swap at layer 3 and value is: 20"]),
    "configs/swap_case3_op_swap.yaml": ("Set op_swap at layer", [
        "Set op_swap at layer 0: .attention, value=20",
        "Set op_swap at layer 1: .attention, value=20, .feed_forward, value=15",
        "Set op_swap at layer 2: .attention, value=20, .feed_forward, value=15",
        "Set op_swap at layer 3: .attention, value=10"]),
    "configs/swap_case4_with_recompute.yaml": ("Set ", [
        "Set select recompute at layer 0: feed_forward",
        "Set op_swap at layer 0: .attention, value=20",
        "Set op_swap at layer 1: .attention, value=20, .feed_forward, value=15",
        "Set op_swap at layer 2: .attention, value=20, .feed_forward, value=15",
        "Set select recompute at layer 3: feed_forward",
        "Set op_swap at layer 3: .attention, value=10"]),
}


@pytest.mark.parametrize("config", SEED_LINES, ids=lambda path: Path(path).stem)
def test_seed_swap_cases_train_and_print_the_seed_lines(config):
    done, _ = _trained(config)
    prefix, expected = SEED_LINES[config]
    assert _messages(done, prefix) == expected
    assert "only the Ascend backend moves activations to host memory: on CPU nothing is swapped" in done.stdout
    assert "lazy_inline stays off on CPU" in done.stdout


def test_default_swap_strategy_runs_on_cpu_with_the_same_numbers():
    flash, _ = _trained("configs/swap_case1_default.yaml")
    plain, _ = _trained("configs/swap_case2_layer_swap.yaml")
    assert "4 flash_attention cells (attention.flash_attention of each layer) were replaced by CPUFlashAttention" \
        in flash.stdout
    assert _losses(flash) == _losses(plain)  # same weights: flash attention on CPU equals plain attention


def test_other_run_modes_are_refused(tmp_path):
    done = _launch("--config", "configs/llama_tiny.yaml", "--run_mode", "predict", cwd=tmp_path)
    assert done.returncode == 2
    assert "--run_mode predict is not supported: this launcher trains (--run_mode train)" in done.stderr


def test_config_errors_stop_before_training(tmp_path):
    done = _launch("--config", str(ROOT / "tests/data/invalid/negative_count.yaml"), cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.endswith("recompute_config.recompute[0]: must be >= 0, got -1 (expected a layer count "
                                "(integer >= 0, or true for all, false for none))\n")
    assert "Traceback" not in done.stderr


def test_a_pattern_missing_from_the_model_stops_before_anything_is_set(tmp_path):
    text = (ROOT / "configs/llama_tiny.yaml").read_text().replace(
        "  select_comm_recompute: False", "  select_comm_recompute: True   # .*\\.norm: no such primitive on CPU")
    config = tmp_path / "comm.yaml"
    config.write_text(text)
    done = _launch("--config", str(config), cwd=tmp_path)
    assert done.returncode == 1
    first = done.stderr.splitlines()[0]
    assert first.startswith(f"{config}:")
    assert "recompute_config.select_comm_recompute: pattern `.*\\.norm` matches nothing in layers 0, 1, 2, 3: " \
           "segment `norm` matched nothing in ffn_norm, attention_norm, attention, feed_forward" in first
    assert first.endswith("(the default comm pattern names RmsNorm's fused `norm` operator, which exists only with "
                          "model.model_config.fused_rms_norm: True (not on CPU); name the operators instead, e.g. "
                          "'attention_norm\\.mul2')")
    assert "Set select" not in done.stdout and "step 1/" not in done.stdout


def test_pipeline_configs_are_for_planning_only(tmp_path):
    done = _launch("--config", str(ROOT / "configs/planning/seed003_interleave_48l.yaml"), cwd=tmp_path)
    assert done.returncode == 1
    assert "pipeline_stage is 5; the launcher trains with data parallelism only" in done.stderr
