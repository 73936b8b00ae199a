"""The processes a test's launcher started, read from /proc (Linux)."""

from __future__ import annotations

from pathlib import Path


def only_child(pid: int) -> int:
    """The one process `pid` started (the launcher's supervised training child)."""
    (child,) = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return int(child)


def alive(pid: int) -> bool:
    """Running or stopped: anything but ended (a zombie, which only its parent's wait removes, has ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"
