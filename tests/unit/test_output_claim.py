"""An output directory belongs to one run, and must have room for what the run writes (runtime/claim.py)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from full_disk import fill, full_disk_env
from launching import launcher_command, launcher_env
from mf_memopt.runtime import claim as claims
from mf_memopt.runtime.claim import NoRoom, OutputInUse, check_room, claim_output_dir

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs" / "llama_tiny.yaml"


def test_a_live_run_holds_its_output_directory(tmp_path):
    first = claim_output_dir(tmp_path, "rank0")
    with pytest.raises(OutputInUse) as refused:
        claim_output_dir(tmp_path, "rank0")
    assert str(refused.value).startswith(f"output directory {tmp_path} is in use by another run (process "
                                         f"{os.getpid()}, started ")
    other_rank = claim_output_dir(tmp_path, "rank1")     # the workers of one msrun job share the directory
    scheduler = claim_output_dir(tmp_path, "scheduler")  # and so does its scheduler
    for claim in (first, other_rank, scheduler):
        claim.release()
    claim_output_dir(tmp_path, "rank0").release()        # released: the next run takes it


def test_a_run_that_died_leaves_its_name_and_the_next_one_takes_over(tmp_path):
    (tmp_path / ".mf_memopt.rank0.lock").write_text("process 999999, started 2026-11-24 10:00:00: run.py")
    taken = claim_output_dir(tmp_path, "rank0")
    assert taken.taken_over == "process 999999, started 2026-11-24 10:00:00: run.py"
    taken.release()
    assert claim_output_dir(tmp_path, "rank0").taken_over is None    # a clean end leaves no holder behind


def test_too_little_room_names_both_figures(tmp_path, monkeypatch):
    monkeypatch.setattr(claims.shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(100 << 20, 90 << 20,
                                                                                           10 << 20))
    with pytest.raises(NoRoom) as refused:
        check_room(tmp_path, 40 << 20, 2)
    assert str(refused.value) == (f"output directory {tmp_path} has 10.0 MiB free, but the run writes about 144.0 "
                                  "MiB (2 checkpoint(s) of about 40.0 MiB and the logs); free space or choose "
                                  "another --output_dir")
    assert list(tmp_path.iterdir()) == []                  # the probe is gone


def test_the_room_needed_counts_every_rank_that_writes_there(tmp_path, monkeypatch):
    monkeypatch.setattr(claims.shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(1 << 30, 700 << 20,
                                                                                           300 << 20))
    assert "writes about 144.0 MiB" in check_room(tmp_path, 40 << 20, 2)       # one rank fits
    with pytest.raises(NoRoom) as refused:
        check_room(tmp_path, 40 << 20, 2, ranks=4)
    assert str(refused.value) == (f"output directory {tmp_path} has 300.0 MiB free, but the run writes about 576.0 "
                                  "MiB (2 checkpoint(s) of about 40.0 MiB and the logs, for each of 4 ranks); free "
                                  "space or choose another --output_dir")


def _command(config: Path, output: Path, *extra: str) -> list[str]:
    return launcher_command(config, "--run_mode", "train", "--output_dir", str(output), *extra)


def test_a_full_disk_is_one_short_answer_naming_the_directory(tmp_path):
    output = tmp_path / "out"
    fill(output)
    done = subprocess.run(_command(TINY, output), cwd=tmp_path,
                          env=full_disk_env(launcher_env(), tmp_path / "hooks", output), capture_output=True, text=True,
                          timeout=300)
    lines = (done.stdout + done.stderr).splitlines()
    assert done.returncode == 1 and len(lines) <= 20, lines
    assert "Traceback" not in done.stderr
    assert lines[-1].startswith(f"run_mindformer_memopt.py: output directory {output} cannot be written (No space "
                                "left on device)")


def test_a_released_directory_is_free_even_while_a_process_forked_from_the_run_lives(tmp_path):
    """MindSpore's dataset workers and other helpers are forked from the training process and inherit the lock's
    file; the run's end must free the directory all the same."""
    claim = claim_output_dir(tmp_path, "rank0")
    forked = os.fork()
    if forked == 0:                                  # the forked process holds the inherited file and waits
        time.sleep(30)
        os._exit(0)
    try:
        claim.release()
        claim_output_dir(tmp_path, "rank0").release()
    finally:
        os.kill(forked, signal.SIGKILL)
        os.waitpid(forked, 0)
