"""A child process a command owns: when the command is stopped (SIGTERM, SIGINT, SIGHUP), the child and everything
it started are ended too, and the command's temporary files are removed as the stop unwinds.

`estimate --measure` and `auto --measure` train in a child, and `verify` compiles in one; without this a SIGTERM
to the command would end it at once and leave the child training, with its temporary directory, for good.

Everything the child started is reached, in whatever process group or session it runs: msrun starts each worker
in a session of its own (`os.setsid`) and ends its workers only on SIGINT, and only once it has started them all.
So the child's environment carries a mark (`JOB`) that every process below it inherits, and ending the child
signals every process whose environment (/proc/PID/environ) carries the child's mark, wherever it was started
and whoever its parent is now. A process that starts with an environment of its own, not inherited, is not
reached.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

STOPPING = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
GRACE_SECONDS = 5.0
JOB = "MF_MEMOPT_JOB"
"""In a child's environment: the marks of the owned children it runs below, space-separated, its own last."""
_POLL_SECONDS = 0.05


class Stopped(Exception):  # noqa: N818 (a stop, not an error)
    """The command was told to stop by `signal`; its child has been ended."""

    def __init__(self, signum: int):
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum

    @property
    def exit_status(self) -> int:
        return 128 + self.signum


class _Stops:
    """The stop handler. A stop that arrives while the child is being started is held, and raised as `Stopped`
    once the child is known, so that no stop ends the command with its child unowned; after the first `Stopped`,
    later stops are only counted (a second one hurries the end, as Ctrl-C twice)."""

    def __init__(self) -> None:
        self.held: list[int] = []
        self.armed = False

    def __call__(self, signum, _frame) -> None:
        self.held.append(signum)
        if self.armed:
            self.armed = False
            raise Stopped(signum)

    def arm(self) -> None:
        if self.held:
            raise Stopped(self.held[0])
        self.armed = True

    def hurried(self) -> bool:
        return len(self.held) > 1


def run_owned(command: Sequence[str], *, cwd: str | os.PathLike, env: dict, timeout: float | None = None,
              merge_output: bool = True) -> subprocess.CompletedProcess:
    """`subprocess.run` whose child is ended with the command: on a stop, every process of the child's job (its
    process group, and every process that carries its mark) gets SIGTERM (SIGKILL after a grace period) and
    `Stopped` is raised; on a timeout, the job is ended the same way and `TimeoutExpired` raised as usual."""
    mark = f"{os.getpid()}.{secrets.token_hex(6)}"
    stops = _Stops()
    previous = {signum: signal.signal(signum, stops) for signum in STOPPING}
    try:
        process = _start(command, cwd=cwd, env={**env, JOB: _marks(mark)}, merge_output=merge_output, stops=stops)
        try:
            stops.arm()
            out, err = process.communicate(timeout=timeout)
        except BaseException:
            stops.armed = False
            _end(process, mark, stops.hurried)
            raise
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def _start(command: Sequence[str], *, cwd: str | os.PathLike, env: dict, merge_output: bool,
           stops: _Stops) -> subprocess.Popen:
    """The child, in a session of its own (a Ctrl-C at the terminal reaches the command alone, which ends it)."""
    try:
        return subprocess.Popen(list(command), cwd=cwd, env=env, stdout=subprocess.PIPE, text=True,
                                stderr=subprocess.STDOUT if merge_output else subprocess.PIPE, start_new_session=True)
    except Exception as error:
        if stops.held:              # a stop came while the child failed to start: the stop is what is said
            raise Stopped(stops.held[0]) from error
        raise


def _marks(mark: str) -> str:
    """The child's marks: this process's own (when it runs below an owned child itself), then the child's."""
    return " ".join(filter(None, [os.environ.get(JOB, ""), mark]))


def _members(mark: str) -> list[int]:
    """The live processes whose environment carries `mark` (zombies carry none)."""
    wanted = mark.encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:                                 # ended meanwhile, or another user's
            continue
        for variable in environ.split(b"\0"):
            if variable.startswith(JOB.encode() + b"=") and wanted in variable[len(JOB) + 1:].split():
                found.append(int(entry.name))
                break
    return found


class _Hurry(Exception):  # noqa: N818 (a second stop while the child is being ended)
    pass


def _hurry(_signum, _frame):
    raise _Hurry


def _end(process: subprocess.Popen, mark: str, hurried: Callable[[], bool]) -> None:
    """SIGTERM to the child's job, then SIGKILL after the grace period or at a second stop signal (Ctrl-C twice;
    `hurried`: one came already), whichever comes first; returns once the child and its job are gone, so the
    caller's report is true."""
    for signum in STOPPING:
        signal.signal(signum, _hurry)
    try:
        if not hurried():
            _signal_job(process, mark, signal.SIGTERM)
            if _wait_job(process, mark, GRACE_SECONDS):
                return
    except _Hurry:
        pass
    for signum in STOPPING:           # nothing interrupts the kill
        signal.signal(signum, signal.SIG_IGN)
    _signal_job(process, mark, signal.SIGKILL)
    _wait_job(process, mark, GRACE_SECONDS)       # a process in uninterruptible sleep is left to end on its own


def _signal_job(process: subprocess.Popen, mark: str, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):      # the group has ended already
        os.killpg(process.pid, signum)
    for pid in _members(mark):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


def _wait_job(process: subprocess.Popen, mark: str, seconds: float) -> bool:
    """Whether the child (reaped here) and every process of its job ended within `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=_POLL_SECONDS)
        if process.returncode is not None and not _members(mark):
            return True
        if time.monotonic() >= deadline:
            return False
