"""The launcher trains in a child process it supervises, so that no run ends in a bare signal.

MindSpore runs native code in the training process (its dataset reader, its kernels); a damaged MindRecord page can
crash it with SIGSEGV, and a killed worker dies with SIGKILL, neither of which Python can catch. So the launcher
starts the training in a child (the same launcher, marked `MF_MEMOPT_SUPERVISED`) and waits:

* the child reports where it writes, what it reads and each finished step on a pipe;
* SIGINT, SIGTERM and SIGHUP are passed on to the child's process group (a stop that comes while the child is
  being started, once it is), and the child stops as before (one line, status 130);
* the child dies when the supervisor does (PR_SET_PDEATHSIG), so nothing trains on unsupervised;
* a child that died from a signal is said in one line: the signal, the rank and step it reached, the last good
  checkpoint, and, where the dataset is small enough to read again at once (`datacheck.AUTO_CHECK_BYTES`, read
  for at most `datacheck.AUTO_CHECK_SECONDS`), whether and where it is damaged. The status is 1, not the signal's.

The supervisor reads no config (the child's one reading is the run's) and imports no MindSpore.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

SUPERVISED = "MF_MEMOPT_SUPERVISED"
PROGRESS_FD = "MF_MEMOPT_PROGRESS_FD"
SUPERVISOR = "MF_MEMOPT_SUPERVISOR_PID"     # the process a user sees (and ends) for the run
_PR_SET_PDEATHSIG = 1
_PASSED_ON = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def supervised() -> bool:
    return os.environ.get(SUPERVISED) == "1"


def report(**event) -> None:
    """In the child: tell the supervisor something (no-op when not supervised)."""
    fd = os.environ.get(PROGRESS_FD)
    if not fd:
        return
    with contextlib.suppress(OSError):
        os.write(int(fd), (json.dumps(event) + "\n").encode())


def supervise(argv: list[str], prefix: str) -> int:
    """Run the launcher with `argv` in a supervised child; its status, or 1 after a death by signal."""
    read_end, write_end = os.pipe()
    package_root = str(Path(__file__).resolve().parents[2])     # the child imports this very package
    env = {**os.environ, SUPERVISED: "1", PROGRESS_FD: str(write_end), SUPERVISOR: str(os.getpid()),
           "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))}
    relay = _Relay()
    previous = {signum: signal.signal(signum, relay) for signum in _PASSED_ON}
    try:
        # Its own process group: Ctrl-C reaches the supervisor alone, which passes it on once.
        child = subprocess.Popen([sys.executable, "-m", "mf_memopt.runtime.launch", *argv], env=env,
                                 pass_fds=(write_end,), preexec_fn=_die_with_parent, process_group=0)
        relay.start(child)
        os.close(write_end)
        facts: dict = {"step": 0}
        reader = threading.Thread(target=_collect, args=(read_end, facts), daemon=True)
        reader.start()
        status = child.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    reader.join(timeout=5)
    if status >= 0:
        return status
    print(f"{prefix}: {death_line(-status, facts)}", file=sys.stderr, flush=True)
    return 1


class _Relay:
    """The supervisor's stop handler: a stop is passed on to the child's process group (the launcher and what it
    started there, as Ctrl-C at a terminal reaches a whole foreground group); one that arrives while the child is
    being started is held, and passed on once the child is known, instead of ending the supervisor."""

    def __init__(self) -> None:
        self.child: subprocess.Popen | None = None
        self.held: list[int] = []

    def __call__(self, signum, _frame) -> None:
        if self.child is None:
            self.held.append(signum)
        else:
            _pass_on(self.child, signum)

    def start(self, child: subprocess.Popen) -> None:
        self.child = child
        for signum in self.held:
            _pass_on(child, signum)


def _die_with_parent() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _pass_on(child: subprocess.Popen, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signum)


def _collect(read_end: int, facts: dict) -> None:
    with os.fdopen(read_end, "r", encoding="utf-8", errors="replace") as events:
        for line in events:
            try:
                facts.update(json.loads(line))
            except ValueError:
                continue


def death_line(signum: int, facts: dict) -> str:
    """What the run reached before its process died from `signum`, and what to look at."""
    from .datacheck import AUTO_CHECK_BYTES, AUTO_CHECK_SECONDS, check_data, total_bytes
    from .failures import RunFacts, last_checkpoint

    name = signal.Signals(signum).name if signum in signal.Signals._value2member_map_ else f"signal {signum}"
    where = f"rank {facts.get('rank', 0)}: " if facts.get("workers", 1) > 1 else ""
    line = f"{where}training died from {name} after {facts['step']} step(s) of this run"
    output = facts.get("output")
    if output is None:
        return f"{line}, before it reported its output directory"
    run = RunFacts(output=Path(output), rank=facts.get("rank", 0), datasets=facts.get("datasets", []),
                   step=facts["step"])
    line += f"; {last_checkpoint(run)}"
    if run.datasets and signum != signal.SIGKILL:
        line += "; " + _data_verdict(run.datasets, total_bytes(run.datasets), AUTO_CHECK_BYTES,
                                     lambda files: check_data(files, timeout=AUTO_CHECK_SECONDS))
    return f"{line}; logs in {run.output / 'log'}"


def _data_verdict(files: list[str], size: int, limit: int, check) -> str:
    command = f"check {', '.join(files)} with `python -m mf_memopt check-data CONFIG`"
    if size > limit:
        return f"if its dataset is damaged, MindSpore's reader crashes like this: {command}"
    try:
        checked = check(files)
    except subprocess.TimeoutExpired as stop:         # a reader that loops on damaged data: the reader was ended
        return f"its dataset was not read to the end within {stop.timeout:.0f} s (damaged data can do that): {command}"
    if checked.damaged:
        return checked.line()
    return f"its dataset {', '.join(files)} reads whole ({checked.read} records), so the cause is elsewhere"
