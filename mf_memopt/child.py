"""A child process a command owns: when the command is stopped (SIGTERM, SIGINT, SIGHUP), the child and everything
it started are ended too, and the command's temporary files are removed as the stop unwinds.

`estimate --measure` and `auto --measure` train in a child, and `verify` compiles in one; without this a SIGTERM
to the command would end it at once and leave the child training, with its temporary directory, for good.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Sequence

STOPPING = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
GRACE_SECONDS = 5.0


class Stopped(Exception):  # noqa: N818 (a stop, not an error)
    """The command was told to stop by `signal`; its child has been ended."""

    def __init__(self, signum: int):
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum

    @property
    def exit_status(self) -> int:
        return 128 + self.signum


def run_owned(command: Sequence[str], *, cwd: str | os.PathLike, env: dict, timeout: float | None = None,
              merge_output: bool = True) -> subprocess.CompletedProcess:
    """`subprocess.run` whose child is ended with the command: on a stop, the child's whole process group gets
    SIGTERM (SIGKILL after a grace period) and `Stopped` is raised; on a timeout, `TimeoutExpired` as usual."""
    process = subprocess.Popen(list(command), cwd=cwd, env=env, stdout=subprocess.PIPE, text=True,
                               stderr=subprocess.STDOUT if merge_output else subprocess.PIPE, start_new_session=True)
    previous = {signum: signal.getsignal(signum) for signum in STOPPING}

    def stop(signum, _frame):
        raise Stopped(signum)

    for signum in STOPPING:
        signal.signal(signum, stop)
    try:
        out, err = process.communicate(timeout=timeout)
    except BaseException:
        _end(process)
        raise
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


class _Hurry(Exception):  # noqa: N818 (a second stop while the child is being ended)
    pass


def _hurry(_signum, _frame):
    raise _Hurry


def _end(process: subprocess.Popen) -> None:
    """SIGTERM to the child's process group, then SIGKILL after the grace period or at a second stop signal
    (Ctrl-C twice), whichever comes first; returns once the child is gone, so the caller's report is true."""
    for signum in STOPPING:
        signal.signal(signum, _hurry)
    try:
        _signal_group(process, signal.SIGTERM)
        process.wait(timeout=GRACE_SECONDS)
    except (subprocess.TimeoutExpired, _Hurry):
        for signum in STOPPING:           # nothing interrupts the kill
            signal.signal(signum, signal.SIG_IGN)
        _signal_group(process, signal.SIGKILL)
        process.wait()


def _signal_group(process: subprocess.Popen, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):      # the group has ended already
        os.killpg(process.pid, signum)
