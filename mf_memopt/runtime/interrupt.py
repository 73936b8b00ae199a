"""Ctrl-C ends a run with status 130 and one line saying where it stopped and what it wrote.

While a compiled step runs, MindSpore's own SIGINT handler (DefaultIntHandler, installed at
the OS level by its SignalGuard, unseen by Python's `signal.getsignal`) turns Ctrl-C into a
SIGTERM to the process, which would end it with status 143 and no message. So SIGTERM is
handled like SIGINT here: both raise KeyboardInterrupt in Python as soon as MindSpore returns
control, and the launcher prints its line and exits 130. `install()` is called at start and
again by the training callback, because MindSpore's guard restores handlers it saw earlier.
"""

from __future__ import annotations

import os
import signal

INTERRUPTED = 130


def install() -> None:
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)


def _interrupt(signum, frame) -> None:
    # A second signal while MindSpore is busy in C++ (compiling) ends the process at once.
    signal.signal(signal.SIGINT, lambda *_: os._exit(INTERRUPTED))
    signal.signal(signal.SIGTERM, lambda *_: os._exit(INTERRUPTED))
    raise KeyboardInterrupt
