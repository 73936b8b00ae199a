"""Stopping `verify` while its msrun workers compile ends every process of the job: msrun, its scheduler and log
tails, and the workers, which msrun starts each in a session of its own (`os.setsid`), out of reach of a signal to
msrun's process group.

The command here is verify's step for a pipeline config (`verify.pipeline.compile_ranks`: the ranks compiled under
msrun, one worker per rank), in a process of its own that says its stop as `verify` does. The config is the tiny
Llama on 2 CPU workers, which compile it for real (a pipeline config cannot compile on CPU); the stop comes once
both workers have written their apply reports, when MindSpore is compiling their graphs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "llama_tiny.yaml"
GONE_WITHIN_SECONDS = 10.0

COMMAND = """
import sys
from pathlib import Path
from mf_memopt.runtime.child import Stopped
from mf_memopt.verify import pipeline

config, base = sys.argv[1], Path(sys.argv[2])
try:
    pipeline.compile_ranks(config, base / "ir", base / "reports", 2)
except Stopped as stop:
    print(f"verify: {stop}", flush=True)
    sys.exit(stop.exit_status)
"""


def _descendants(pid: int) -> list[int]:
    """Every process below `pid` now, however deep (read from /proc)."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                children = [int(child) for child in (task / "children").read_text().split()]
            except OSError:
                continue
            found += children
            todo += children
    return found


def _stat(pid: int) -> list[str]:
    """/proc/PID/stat's fields after the command name (state, ppid, process group, session, ...); [] once gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return []


def _alive(pid: int) -> bool:
    """Running, or stopped: anything but ended (a zombie has ended; only its exit status is left)."""
    stat = _stat(pid)
    return bool(stat) and stat[0] != "Z"


def _own_session(pid: int) -> bool:
    stat = _stat(pid)
    return bool(stat) and int(stat[3]) == pid


def _command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _wait_for_the_compile(command: subprocess.Popen, reports: Path) -> None:
    """Until both workers have written their apply reports (what they do right before MindSpore compiles)."""
    deadline = time.monotonic() + 600
    while not all((reports / f"rank_{rank}.json").is_file() for rank in (0, 1)):
        assert command.poll() is None, f"the command ended before the workers compiled:\n{command.stdout.read()}"
        assert time.monotonic() < deadline, "the workers did not reach the compile within 600 s"
        time.sleep(0.1)


@pytest.mark.parametrize("stop", ["SIGTERM", "Ctrl-C"])
def test_stopping_verify_while_its_msrun_workers_compile_ends_every_process_of_the_job(stop, tmp_path):
    env = {**os.environ, "GLOG_v": "3", "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    # A session of its own, as a command started at a terminal: Ctrl-C reaches its foreground process group.
    command = subprocess.Popen([sys.executable, "-c", COMMAND, str(CONFIG), str(tmp_path)], cwd=tmp_path, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    job: list[int] = []
    try:
        _wait_for_the_compile(command, tmp_path / "reports")
        job = _descendants(command.pid)
        # msrun runs its scheduler with the workers' command, in msrun's process group; each worker has a session
        # of its own
        workers = [pid for pid in job if "precompile" in _command_line(pid) and "msrun" not in _command_line(pid)
                   and _own_session(pid)]
        assert len(workers) == 2 and all(map(_alive, workers)), {pid: _command_line(pid) for pid in job}
        if stop == "SIGTERM":
            os.kill(command.pid, signal.SIGTERM)
        else:
            os.killpg(command.pid, signal.SIGINT)
        stopped = time.monotonic()
        while any(map(_alive, job)) and time.monotonic() - stopped < GONE_WITHIN_SECONDS:
            time.sleep(0.1)
        left = {pid: _command_line(pid) for pid in job if _alive(pid)}
        out, _ = command.communicate(timeout=30)
        assert not left, f"alive {GONE_WITHIN_SECONDS:.0f} s after the stop: {left}"
        signum = signal.SIGTERM if stop == "SIGTERM" else signal.SIGINT
        assert command.returncode == 128 + signum
        assert f"verify: stopped by {signal.Signals(signum).name}" in out
    finally:
        for pid in [command.pid, *job]:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        command.wait()
