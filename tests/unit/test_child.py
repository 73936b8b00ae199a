"""A command's children end with the command: `child.run_owned`'s child and everything it started (even in a
session of its own, as msrun starts its workers), also when the user presses Ctrl-C twice or the stop comes while
the child is being started; and the launcher's supervised child with its process group (`runtime/supervise.py`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from mf_memopt.runtime.child import GRACE_SECONDS, Stopped, run_owned
from processes import alive

# A child that ignores SIGTERM (as a training step busy in a kernel may, for longer than the grace period) and
# says so by writing its pid.
STUBBORN = ("import os, signal, sys, time\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "open(sys.argv[1], 'w').write(str(os.getpid()))\n"
            "time.sleep(120)\n")


ROOT = Path(__file__).resolve().parents[2]

# A child that starts a grandchild in a session of its own (as msrun starts each worker), writes both pids, waits.
WITH_GRANDCHILD = ("import os, subprocess, sys, time\n"
                   "grandchild = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'],\n"
                   "                              start_new_session=True)\n"
                   "open(sys.argv[1], 'w').write(f'{os.getpid()} {grandchild.pid}')\n"
                   "time.sleep(120)\n")

# A command whose child is started by a Popen that signals the command (SIGTERM) before it returns: the stop comes
# between the start of the child and anything the command does next. The Popen writes the child's pid.
STOPPED_WHILE_STARTING = """
import os, signal, subprocess, sys
from mf_memopt.runtime.child import Stopped, run_owned

class Signalling(subprocess.Popen):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        open(sys.argv[1], "w").write(str(self.pid))
        os.kill(os.getpid(), signal.SIGTERM)

subprocess.Popen = Signalling
try:
    run_owned([sys.executable, "-c", "import time; time.sleep(120)"], cwd=".", env=dict(os.environ), timeout=60)
except Stopped as stop:
    print(stop)
    sys.exit(stop.exit_status)
"""

# The launcher's supervisor, whose child (`python -m mf_memopt.runtime.launch ...`) is replaced by a stand-in
# launcher that starts a helper in its own process group and writes both pids; with `early`, the Popen signals
# the supervisor (SIGTERM) before it returns.
SUPERVISOR = """
import os, signal, subprocess, sys
from mf_memopt.runtime import supervise

LAUNCHER = ("import os, subprocess, sys, time\\n"
            "helper = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\\n"
            "open(sys.argv[1], 'w').write(f'{os.getpid()} {helper.pid}')\\n"
            "time.sleep(120)\\n")

class StandIn(subprocess.Popen):
    def __init__(self, args, **kwargs):
        super().__init__([sys.executable, "-c", LAUNCHER, *args[3:]], **kwargs)
        open(sys.argv[1] + ".launcher", "w").write(str(self.pid))
        if sys.argv[2] == "early":
            os.kill(os.getpid(), signal.SIGTERM)

subprocess.Popen = StandIn
sys.exit(supervise.supervise([sys.argv[1]], "launcher"))
"""



def _wait_gone(pids: list[int], seconds: float) -> list[int]:
    """The pids still alive after `seconds` (at once when none is)."""
    deadline = time.monotonic() + seconds
    while any(map(alive, pids)) and time.monotonic() < deadline:
        time.sleep(0.02)
    return [pid for pid in pids if alive(pid)]


def _pids(path: Path, count: int, seconds: float = 60) -> list[int]:
    """The `count` pids a process writes to `path`, once written."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        words = path.read_text().split() if path.is_file() else []
        if len(words) == count:
            return [int(word) for word in words]
        time.sleep(0.02)
    raise AssertionError(f"nothing written to {path} within {seconds} s")


def _kill(pids: list[int]) -> None:
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def _command(code: str, *args: str, cwd: Path) -> subprocess.Popen:
    """`code` run by this checkout's package, in a session of its own (a signal to it reaches it alone); its output
    goes to files (`_finished` reads them), which a process it leaves behind cannot hold open as it would a pipe."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    with open(cwd / "out", "w") as out, open(cwd / "err", "w") as err:
        return subprocess.Popen([sys.executable, "-c", code, *args], cwd=cwd, env=env, stdout=out, stderr=err,
                                start_new_session=True)


def _finished(command: subprocess.Popen, cwd: Path) -> tuple[int, str, str]:
    """The command's status, stdout and stderr, once it has ended."""
    status = command.wait(timeout=60)
    return status, (cwd / "out").read_text(), (cwd / "err").read_text()


def _interrupt_twice(ready: Path, gap: float) -> None:
    """Ctrl-C once the child is up, and again `gap` seconds later (inside the grace period)."""
    deadline = time.monotonic() + 60
    while not (ready.is_file() and ready.read_text()):
        if time.monotonic() > deadline:
            return
        time.sleep(0.05)
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(gap)
    os.kill(os.getpid(), signal.SIGINT)


def test_a_second_ctrl_c_during_the_grace_period_kills_the_child_at_once(tmp_path):
    ready = tmp_path / "pid"
    interrupts = threading.Thread(target=_interrupt_twice, args=(ready, 0.5), daemon=True)
    # a Ctrl-C that arrives after run_owned has returned must not stop pytest
    pytests = signal.signal(signal.SIGINT, lambda *_: None)
    interrupts.start()
    began = time.monotonic()
    try:
        with pytest.raises(Stopped) as stopped:
            run_owned([sys.executable, "-c", STUBBORN, str(ready)], cwd=tmp_path, env=dict(os.environ), timeout=60)
        ended = time.monotonic() - began
        interrupts.join()
    finally:
        signal.signal(signal.SIGINT, pytests)
    pid = int(ready.read_text())
    try:
        assert stopped.value.signum == signal.SIGINT
        assert not alive(pid), "the child outlived the command"
        assert ended < GRACE_SECONDS              # the second Ctrl-C did not wait out the grace period
    finally:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def _interrupt_once(ready: Path) -> None:
    _pids(ready, 2)
    os.kill(os.getpid(), signal.SIGINT)


def test_a_stopped_command_ends_what_its_child_started_in_a_session_of_its_own(tmp_path):
    ready = tmp_path / "pids"
    interrupt = threading.Thread(target=_interrupt_once, args=(ready,), daemon=True)
    pytests = signal.signal(signal.SIGINT, lambda *_: None)
    interrupt.start()
    try:
        with pytest.raises(Stopped):
            run_owned([sys.executable, "-c", WITH_GRANDCHILD, str(ready)], cwd=tmp_path, env=dict(os.environ),
                      timeout=60)
        interrupt.join()
    finally:
        signal.signal(signal.SIGINT, pytests)
    pids = _pids(ready, 2)
    try:
        assert [pid for pid in pids if alive(pid)] == [], "the child or its grandchild outlived the command"
    finally:
        _kill(pids)


def test_a_stop_while_the_child_is_being_started_is_the_commands_stop_and_ends_the_child(tmp_path):
    command = _command(STOPPED_WHILE_STARTING, str(tmp_path / "pid"), cwd=tmp_path)
    finished = _finished(command, tmp_path)
    (pid,) = _pids(tmp_path / "pid", 1)
    try:
        assert finished == (128 + signal.SIGTERM, "stopped by SIGTERM\n", "")
        assert not alive(pid), "the child outlived the command"
    finally:
        _kill([pid])


def test_a_stopped_supervisor_passes_the_stop_to_the_launchers_whole_process_group(tmp_path):
    ready = tmp_path / "pids"
    supervisor = _command(SUPERVISOR, str(ready), "later", cwd=tmp_path)
    pids = []
    try:
        pids = _pids(ready, 2)
        supervisor.send_signal(signal.SIGTERM)
        status, _, err = _finished(supervisor, tmp_path)
        assert status == 1
        assert err == ("launcher: training died from SIGTERM after 0 step(s) of this run, before it reported its "
                       "output directory\n")
        assert _wait_gone(pids, 5) == [], "the launcher or what it started outlived the stop"
    finally:
        _kill([supervisor.pid, *pids])


def test_a_stop_while_the_supervisor_starts_the_launcher_is_passed_on_once_it_has(tmp_path):
    ready = tmp_path / "pids"
    supervisor = _command(SUPERVISOR, str(ready), "early", cwd=tmp_path)
    status, _, err = _finished(supervisor, tmp_path)
    (launcher,) = _pids(Path(f"{ready}.launcher"), 1)
    pids = [launcher, *map(int, ready.read_text().split() if ready.is_file() else [])]   # the stop may come first
    try:
        assert status == 1, err           # not the default action of SIGTERM (-15)
        assert "launcher: training died from SIGTERM" in err
        assert _wait_gone(pids, 5) == []
    finally:
        _kill(pids)
