"""Ctrl-C ends a run with status 130 and one line saying where it stopped and what it wrote.

While a compiled step runs, MindSpore's own SIGINT handler (DefaultIntHandler, installed at
the OS level by its SignalGuard, unseen by Python's `signal.getsignal`) turns Ctrl-C into a
SIGTERM to the process, which would end it with status 143 and no message. So SIGTERM is
handled like SIGINT here, and SIGHUP (the terminal closed) too: each raises KeyboardInterrupt in
Python as soon as MindSpore returns control, and the launcher prints its line and exits 130.
`install()` is called at start and again by the training callback, because MindSpore's guard
restores handlers it saw earlier.

A second stop while the first unwinds ends the process at once, unless it comes within
`SAME_STOP_SECONDS` of the first: a job manager that signals every process of a job reaches a
supervised training process twice at once (directly and through its supervisor), and that is one stop.
"""

from __future__ import annotations

import os
import signal
import time

INTERRUPTED = 130
STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
SAME_STOP_SECONDS = 1.0

_stopped_at: float | None = None


def install() -> None:
    """Handle the stop signals (again); after a stop, the handlers that end the process stay."""
    for signum in STOPS:
        signal.signal(signum, _interrupt if _stopped_at is None else _again)


def finish() -> None:
    """After the stop has been said: the process is only exiting, so further stop signals (a job manager's copy
    arriving late) are ignored at the OS level, where Python's exit would otherwise restore their default action."""
    for signum in STOPS:
        signal.signal(signum, signal.SIG_IGN)


def _interrupt(signum, frame) -> None:
    global _stopped_at
    _stopped_at = time.monotonic()
    for stop in STOPS:
        signal.signal(stop, _again)
    raise KeyboardInterrupt


def _again(signum, frame) -> None:
    # A second signal while MindSpore is busy in C++ (compiling) ends the process at once; a copy of the first does not.
    if _stopped_at is None or time.monotonic() - _stopped_at >= SAME_STOP_SECONDS:
        os._exit(INTERRUPTED)
