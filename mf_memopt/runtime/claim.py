"""An output directory belongs to one run, and must have room for what the run writes.

* **One run per directory.** A run holds an exclusive lock (`flock`) on `.mf_memopt.rank<r>.lock` in its output
  directory for its whole life: a second run on the directory stops before it writes anything, naming the
  directory and the process that holds it. Each rank locks its own file (msrun's scheduler, which runs the
  script too, its own), so the workers of one msrun job share the directory; two jobs (or two plain runs) do
  not. The kernel releases the lock when the holder dies; the file
  then still names it, and the next run takes over with a warning.
* **Room.** Before training, a real probe is written (1 MiB, synced: a full disk fails here, not in the first
  checkpoint), and the free space is compared with what the run will write: every checkpoint it keeps
  (parameters and optimizer moments, times `keep_checkpoint_max`) plus its logs, for every rank of the job.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .errors import LaunchError

PROBE_BYTES = 1 << 20
LOG_BYTES = 64 << 20            # MindFormers' and mf_memopt's logs, the apply report and the run's record


class OutputInUse(LaunchError):
    """Another live run holds the output directory."""


class NoRoom(LaunchError):
    """The output directory's file system cannot hold what the run will write."""


@dataclass
class Claim:
    path: Path
    fd: int
    taken_over: str | None = None       # the holder the previous run left in the lock file, if it died

    def release(self) -> None:
        """Unlock explicitly: closing the file alone leaves the lock held while a process forked from the run
        (a dataset worker) still has the file open."""
        if self.fd < 0:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(self.fd, 0)     # a clean end leaves no holder behind
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)
        self.fd = -1


def claim_output_dir(path: Path, role: str) -> Claim:
    """Lock `path` for this process of the run (`rank<r>`, or msrun's `scheduler`); `OutputInUse` when a live run
    holds it."""
    lock = path / f".mf_memopt.{role}.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        holder = _holder(fd)
        os.close(fd)
        if error.errno in (errno.EAGAIN, errno.EACCES):
            raise OutputInUse(f"output directory {path} is in use by another run ({holder or 'a live process'}); "
                              "give this run its own --output_dir, or wait for that one to end") from None
        raise
    previous = _holder(fd)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, _describe_self().encode(), 0)
    except OSError as error:           # a full disk: the lock file is made, its first bytes are not
        os.close(fd)
        raise NoRoom(f"output directory {path} cannot be written ({error.strerror or error})") from None
    return Claim(path=path, fd=fd, taken_over=previous or None)


def _holder(fd: int) -> str:
    try:
        return os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
    except OSError:
        return ""


def _describe_self() -> str:
    """The run as its user knows it: the launcher's process (the supervisor of this training process)."""
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    command = " ".join(os.path.basename(part) if index == 0 else part for index, part in enumerate(sys.argv))
    pid = os.environ.get("MF_MEMOPT_SUPERVISOR_PID") or os.getpid()
    return f"process {pid}, started {started}: {command[:300]}"


def check_room(path: Path, checkpoint_bytes: int | None, keep: int, ranks: int = 1) -> str:
    """Write a real probe and compare the free space with what the run will write; the figures, for the log.
    `NoRoom` names both figures when they do not fit.

    Every one of the job's `ranks` writes its own checkpoints and logs, and each checks the same free space: a
    shared output directory (or one file system under the workers' directories) must hold all of them."""
    probe = path / f".mf_memopt.probe.{os.getpid()}"
    try:
        with open(probe, "wb") as handle:
            handle.write(b"\0" * PROBE_BYTES)
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as error:
        raise NoRoom(f"output directory {path} cannot be written ({error.strerror or error}): "
                     f"a probe of {_mib(PROBE_BYTES)} failed") from None
    finally:
        probe.unlink(missing_ok=True)
    free = shutil.disk_usage(path).free
    need = ranks * (LOG_BYTES + (checkpoint_bytes or 0) * keep)
    what = (f"{keep} checkpoint(s) of about {_mib(checkpoint_bytes)} and the logs" if checkpoint_bytes
            else "the logs (the checkpoint size is not known for this model)")
    what += f", for each of {ranks} ranks" if ranks > 1 else ""
    if free < need:
        raise NoRoom(f"output directory {path} has {_mib(free)} free, but the run writes about {_mib(need)} "
                     f"({what}); free space or choose another --output_dir")
    return f"output directory {path}: {_mib(free)} free, the run writes about {_mib(need)} ({what})"


def _mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"
