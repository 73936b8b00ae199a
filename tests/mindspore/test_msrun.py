"""scripts/msrun_launcher.sh with two CPU workers, as MindFormers users run it."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[2]
SCRIPT = str(ROOT / "scripts" / "msrun_launcher.sh")
CASE3 = str(ROOT / "configs" / "swap_case3_op_swap.yaml")
STEP = re.compile(r"step:\[\s*(\d+)/\s*\d+\], loss:\[")


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    # Workers run `python` from PATH: put this interpreter's environment first.
    env = {**os.environ, "GLOG_v": "3", "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(["bash", SCRIPT, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _info(log: Path, start: str) -> list[str]:
    return [line.split(" - INFO - ", 1)[1] for line in log.read_text().splitlines()
            if " - INFO - " in line and line.split(" - INFO - ", 1)[1].startswith(start)]


@pytest.fixture
def workdir(tmp_path):
    shutil.copy(ROOT / "run_mindformer_memopt.py", tmp_path)
    return tmp_path


def test_seed_case_3_on_two_workers_logs_the_seed_lines(workdir):
    done = _run(f"run_mindformer_memopt.py --config {CASE3} --run_mode train --train_steps 2", "2",
                str(_free_port()), "output/msrun", "True", "300", cwd=workdir)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for rank in (0, 1):
        assert _info(workdir / "output" / "msrun" / f"worker_{rank}.log", "Set op_swap at layer") == [
            "Set op_swap at layer 0: .attention, value=20",
            "Set op_swap at layer 1: .attention, value=20, .feed_forward, value=15",
            "Set op_swap at layer 2: .attention, value=20, .feed_forward, value=15",
            "Set op_swap at layer 3: .attention, value=10"]
    log = (workdir / "output" / "msrun" / "worker_1.log").read_text()
    assert "mf_memopt[rank 1]" in log
    assert "2 workers train the same model independently because use_parallel is False" in log
    for worker in (0, 1):       # each independent worker writes its own report and MindFormers logs
        own = workdir / "output" / f"worker_{worker}"
        assert (own / "apply_report.json").exists() and (own / "log").is_dir()
    assert not (workdir / "output" / "apply_report.json").exists()


def test_data_parallel_training_on_two_workers(workdir):
    """MindFormers' Trainer shards the generated MindRecord file: 32 samples, batch 2, 2 workers -> 8 steps."""
    logs = workdir / "dp_logs"
    done = _run("run_mindformer_memopt.py --config " + str(ROOT / "configs" / "llama_tiny.yaml") +
                " --run_mode train --use_parallel True", "2", str(_free_port()), str(logs), "True", "300",
                cwd=workdir)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for rank in (0, 1):
        log = logs / f"worker_{rank}.log"
        assert _info(log, "data parallel training") == [f"data parallel training: rank {rank} of 2 on CPU"]
        assert _info(log, "Set select recompute at layer 0") == ["Set select recompute at layer 0: feed_forward"]
        assert [int(step) for step in STEP.findall(log.read_text())] == list(range(1, 9))
        assert (workdir / "output" / f"apply_report_rank{rank}.json").exists()
        assert (workdir / "output" / "checkpoint" / f"rank_{rank}" / f"llama_tiny_rank_{rank}-1_8.ckpt").exists()
    assert (workdir / "output" / "data" / "llama_tiny_tokens.mindrecord").exists()   # written once, by one worker


def test_the_tiny_qwen3_trains_data_parallel_on_two_workers(workdir):
    """MindFormers' mcore models refuse a data_parallel that is not the number of workers; the launcher sets it
    and says so, and each worker trains its half of the data."""
    logs = workdir / "qwen3_logs"
    done = _run("run_mindformer_memopt.py --config " + str(ROOT / "configs" / "qwen3_tiny.yaml") +
                " --run_mode train --train_steps 2 --use_parallel True", "2", str(_free_port()), str(logs), "True",
                "300", cwd=workdir)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for rank in (0, 1):
        log = logs / f"worker_{rank}.log"
        assert _info(log, "parallel_config.data_parallel") == [
            "parallel_config.data_parallel is 1: data parallel training on 2 workers runs with data_parallel 2"]
        assert _info(log, "Set select recompute at layer 3") == ["Set select recompute at layer 3: mlp"]
        assert [int(step) for step in STEP.findall(log.read_text())] == [1, 2]
    assert (workdir / "output" / "data" / "qwen3_tiny_tokens.mindrecord").exists()


def test_wrong_argument_count_prints_the_usage(workdir):
    done = _run("run_mindformer_memopt.py", "2", "3", cwd=workdir)
    assert done.returncode == 1
    assert "WORKER_NUM MASTER_PORT LOG_DIR JOIN CLUSTER_TIME_OUT" in done.stderr
