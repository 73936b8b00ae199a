"""The processes a test's launcher started, read from /proc (Linux)."""

from __future__ import annotations

from pathlib import Path


def only_child(pid: int) -> int:
    """The one process `pid` started (the launcher's supervised training child)."""
    (child,) = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return int(child)
