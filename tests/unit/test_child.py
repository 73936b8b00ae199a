"""`child.run_owned`: a command's child ends with the command, even when the user presses Ctrl-C twice."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from mf_memopt.child import GRACE_SECONDS, Stopped, run_owned

# A child that ignores SIGTERM (as a training step busy in a kernel may, for longer than the grace period) and
# says so by writing its pid.
STUBBORN = ("import os, signal, sys, time\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "open(sys.argv[1], 'w').write(str(os.getpid()))\n"
            "time.sleep(120)\n")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


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
        assert not _alive(pid), "the child outlived the command"
        assert ended < GRACE_SECONDS              # the second Ctrl-C did not wait out the grace period
    finally:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
