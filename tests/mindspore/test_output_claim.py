"""An output directory belongs to one run, and must have room for what the run writes (runtime/claim.py): two training runs on one directory (the claim itself: tests/unit/test_output_claim.py)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from launching import launcher_command, launcher_env

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs" / "llama_tiny.yaml"


def _command(config: Path, output: Path, *extra: str) -> list[str]:
    return launcher_command(config, "--run_mode", "train", "--output_dir", str(output), *extra)


def _wait_for_holder(lock: Path, run: subprocess.Popen, timeout: float = 300) -> None:
    """Until `run` holds `lock`: the holder's name is written after the flock is taken, so once the file names the
    run, the lock is held."""
    deadline = time.monotonic() + timeout
    while not (lock.is_file() and lock.read_text().startswith(f"process {run.pid}, ")):
        assert run.poll() is None, f"the first run ended (exit {run.returncode}) before it held {lock}"
        assert time.monotonic() < deadline, f"the first run did not hold {lock} within {timeout:.0f} s"
        time.sleep(0.05)


def test_the_second_of_two_runs_on_one_directory_stops_and_the_first_keeps_its_work(tmp_path):
    output = tmp_path / "out"
    dataset = ["--train_dataset_dir", str(tmp_path / "tokens.mindrecord")]
    first = subprocess.Popen(_command(TINY, output, *dataset), cwd=tmp_path, env=launcher_env(), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    _wait_for_holder(output / ".mf_memopt.rank0.lock", first)
    began = time.monotonic()
    second = subprocess.run(_command(TINY, output, *dataset), cwd=tmp_path, env=launcher_env(), capture_output=True,
                            text=True, timeout=300)
    assert second.returncode == 1 and time.monotonic() - began < 15
    assert second.stderr.splitlines()[-1].startswith(f"run_mindformer_memopt.py: output directory {output} is in "
                                                     f"use by another run (process {first.pid}, started ")
    assert "Set select" not in second.stdout
    out, err = first.communicate(timeout=600)
    assert first.returncode == 0, err[-3000:]
    checkpoints = sorted(path.name for path in (output / "checkpoint" / "rank_0").glob("*.ckpt"))
    assert checkpoints == ["llama_tiny_rank_0-1_16.ckpt", "llama_tiny_rank_0-1_8.ckpt"]
    assert "2 checkpoint(s)" in out.splitlines()[-1]
