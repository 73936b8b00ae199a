"""run_mindformer_memopt.py on real MindFormers models, trained by MindFormers' Trainer on a generated
MindRecord file: what a user runs, sees, greps and finds in the output directory."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from functools import cache
from pathlib import Path

import pytest
import yaml
from launching import POOL_LOG, launcher_command, launcher_env
from shared_runs import llama_tiny_trained

from mf_memopt.runs.measure import CPU_PEAK


ROOT = Path(__file__).resolve().parents[2]
WORK = Path()       # the module's own temporary directory (`_work`): nothing is written into the checkout
# MindFormers' MFLossMonitor line: "{ Epoch:[  1/  1], step:[    3/   16], loss:[5.418386/5.512039], ..."
LOSS = re.compile(r"step:\[\s*(\d+)/\s*(\d+)\], loss:\[([\d.]+)/")


def _checkout() -> set[str]:
    """Every file of the checkout outside hidden directories (.git, .venv, tool caches) and __pycache__."""
    found = set()
    for folder, folders, files in os.walk(ROOT):
        folders[:] = [name for name in folders if not name.startswith(".") and name != "__pycache__"]
        found |= {os.path.relpath(os.path.join(folder, name), ROOT) for name in files}
    return found


@pytest.fixture(scope="module")
def default(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path, Path]:
    """The shipped tiny Llama trained on its whole dataset with the pool log: the session's one run
    (`shared_runs.llama_tiny_trained`; test_damage.py resumes from a copy of its checkpoints)."""
    done, output, tokens = llama_tiny_trained(tmp_path_factory)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done, output, tokens


@pytest.fixture(scope="module", autouse=True)
def _work(tmp_path_factory):
    """Run every launch in a temporary directory, and check that no file appeared in the checkout meanwhile."""
    global WORK
    WORK = tmp_path_factory.mktemp("launcher")
    before = _checkout()
    yield
    assert sorted(_checkout() - before) == []


def _launch(config: str, *args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    """The launcher on `config` (relative: the checkout's), run in `cwd` (default: the module's directory)."""
    return subprocess.run(launcher_command(ROOT / config, *args), cwd=cwd or WORK, env=launcher_env(**(env or {})),
                          capture_output=True, text=True, timeout=600)


def _tokens(config: str) -> str:
    return str(WORK / "data" / f"{Path(config).stem}.mindrecord")


@cache
def _trained(config: str, steps: int = 2) -> tuple[subprocess.CompletedProcess, Path]:
    output = WORK / f"{Path(config).stem}-{steps}"
    shutil.rmtree(output, ignore_errors=True)              # checkpoints of an earlier session would add up
    done = _launch(config, "--run_mode", "train", "--train_steps", str(steps), "--output_dir",
                   str(output), "--force", "--train_dataset_dir", _tokens(config))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done, output


def _messages(done: subprocess.CompletedProcess, start: str) -> list[str]:
    """mf_memopt's INFO messages that start with `start`."""
    return [line.split(" - INFO - ", 1)[1] for line in done.stdout.splitlines()
            if " - INFO - " in line and line.split(" - INFO - ", 1)[1].startswith(start)]


def _losses(done: subprocess.CompletedProcess) -> dict[int, float]:
    return {int(match.group(1)): float(match.group(3)) for match in LOSS.finditer(done.stdout)}


def _peak(done: subprocess.CompletedProcess) -> int:
    peaks = CPU_PEAK.findall(done.stdout + done.stderr)
    assert peaks, "MindSpore printed no memory-pool peak"
    return int(peaks[-1])


def test_default_config_trains_its_dataset_and_writes_checkpoints(default):
    done, output, _ = default
    assert _messages(done, "Set ") == [f"Set select recompute at layer {index}: feed_forward" for index in range(4)]
    assert _messages(done, "Formative") == [
        "Formative layer_recompute: [[0]]", "Formative select_recompute: {'feed_forward': [[4]]}",
        "Formative select_comm_recompute: {'.*\\.norm': [[0]]}", "Formative select_recompute_exclude: {}",
        "Formative select_comm_recompute_exclude: {}"]
    losses = _losses(done)
    assert sorted(losses) == list(range(1, 17))          # 32 samples, batch 2: the dataset's 16 steps
    assert losses[16] < losses[1] - 0.5
    checkpoints = sorted(path.name for path in (output / "checkpoint" / "rank_0").glob("*.ckpt"))
    assert checkpoints == ["llama_tiny_rank_0-1_16.ckpt", "llama_tiny_rank_0-1_8.ckpt"]
    assert (output / "log" / "rank_0" / "info.log").exists()
    report = json.loads((output / "apply_report.json").read_text())
    assert [(entry["layer"], entry["path"], entry["set"]) for entry in report["set"]] == \
        [(index, "feed_forward", {"recompute_cell": {}}) for index in range(4)]
    assert "runner_wrapper MFTrainOneStepCell runs on CPU as CPUTrainOneStepCell" in done.stdout
    assert _messages(done, "training finished after 16 step(s) of this run, loss ")


def test_harmless_mindformers_warnings_are_one_line_on_the_console_and_kept_in_the_log(default):
    done, output, _ = default
    assert "No module named 'hyper_parallel'" not in done.stdout and "The input config" not in done.stdout
    (summary,) = [line for line in _messages(done, "") if "harmless MindFormers warning(s) not shown" in line]
    assert "optional PyNative models need the unpublished hyper_parallel package" in summary
    assert summary.endswith(f"they are in {output}/log/rank_*/info.log")
    info = (output / "log" / "rank_0" / "info.log").read_text()
    assert "No module named 'hyper_parallel'" in info and "The input config" in info


def test_resume_from_a_checkpoint_continues_where_the_run_was(default):
    full, output, tokens = default
    resumed = _launch("configs/llama_tiny.yaml", "--output_dir", str(WORK / "resumed"), "--force",
                      "--train_dataset_dir", str(tokens), "--train_steps", "2",
                      "--load_checkpoint", str(output / "checkpoint"),
                      "--resume_training", "llama_tiny_rank_0-1_8.ckpt")
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    losses = _losses(resumed)
    assert sorted(losses) == [9, 10]                     # the data, step counter and schedule go on from 8
    assert losses[9] == pytest.approx(_losses(full)[9], abs=1e-4)


def test_recompute_lowers_the_pool_peak_on_the_training_path(tmp_path, default):
    recomputed, _, tokens = default
    document = yaml.safe_load((ROOT / "configs/llama_tiny.yaml").read_text())
    document["recompute_config"]["select_recompute"] = False
    config = tmp_path / "no_recompute.yaml"
    config.write_text(yaml.safe_dump(document))
    plain = _launch(str(config), "--output_dir", str(tmp_path / "out"), "--train_steps", "1",
                    "--train_dataset_dir", str(tokens), env=POOL_LOG)
    assert plain.returncode == 0, plain.stdout[-3000:] + plain.stderr[-3000:]
    assert _peak(recomputed) < 0.8 * _peak(plain)


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
    assert sorted(_losses(done)) == [1, 2]


def test_default_swap_strategy_runs_on_cpu_with_the_same_numbers():
    flash, _ = _trained("configs/swap_case1_default.yaml")
    plain, _ = _trained("configs/swap_case2_layer_swap.yaml")
    assert "4 flash_attention cells (attention.flash_attention of each layer) were replaced by CPUFlashAttention" \
        in flash.stdout
    assert _losses(flash) == _losses(plain)  # same weights and data: flash attention on CPU equals plain attention


def test_other_run_modes_are_refused(tmp_path):
    done = _launch("configs/llama_tiny.yaml", "--run_mode", "predict", cwd=tmp_path)
    assert done.returncode == 2
    assert "--run_mode predict is not supported: this launcher trains (--run_mode train)" in done.stderr


def test_config_errors_stop_before_training(tmp_path):
    done = _launch(str(ROOT / "tests/data/invalid/negative_count.yaml"), cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.endswith("recompute_config.recompute[0]: must be >= 0, got -1 (expected a layer count "
                                "(integer >= 0, or true for all, false for none))\n")
    assert "Traceback" not in done.stderr


def test_a_pattern_missing_from_the_model_stops_before_anything_is_set(tmp_path):
    text = (ROOT / "configs/llama_tiny.yaml").read_text().replace(
        "  select_comm_recompute: False", "  select_comm_recompute: True   # .*\\.norm: no such primitive on CPU")
    config = tmp_path / "comm.yaml"
    config.write_text(text)
    done = _launch(str(config), "--output_dir", str(tmp_path / "out"), cwd=tmp_path)
    assert done.returncode == 1
    first = done.stderr.splitlines()[0]
    assert first.startswith(f"{config}:")
    assert "recompute_config.select_comm_recompute: pattern `.*\\.norm` matches nothing in layers 0, 1, 2, 3: " \
           "segment `norm` matched nothing in ffn_norm, attention_norm, attention, feed_forward" in first
    assert first.endswith("(the default comm pattern names RmsNorm's fused `norm` operator, which exists only with "
                          "model.model_config.fused_rms_norm: True (not on CPU); name the operators instead, e.g. "
                          "'attention_norm\\.mul2')")
    assert "Set select" not in done.stdout and "step:[" not in done.stdout


def test_a_pipeline_config_for_ascend_stops_here_naming_ascend(tmp_path):
    done = _launch(str(ROOT / "configs/planning/interleave_48l_pp5.yaml"), cwd=tmp_path)
    assert done.returncode == 1
    assert "context.device_target is Ascend (MindFormers' default: context.device_target is not set), and this " \
           "MindSpore cannot load it" in done.stderr
