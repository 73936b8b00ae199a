"""Failures from MindSpore and MindFormers during a run, said in one line that names the file and what to do.

The full traceback goes to `<output>/log/rank_<r>/mf_memopt_failure.log`; the terminal gets the line:

* the dataset cannot be read (MindSpore's pipeline error): the dataset file, the step, the last checkpoint, and
  `check-data` to find the damaged record;
* a checkpoint cannot be read on resume: the file, its size, and the newest other checkpoint beside it;
* a disk fills during training: the file system (its mount point) and the file being written, the step, and
  this rank's unfinished checkpoint save (`.tmp`), which is removed (other ranks' saves are theirs).

Anything else is not translated: its traceback stays, since no one line could say more.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from .errors import LaunchError
from .outputs import checkpoint_files

_CHECKPOINT = re.compile(r"Failed to read the checkpoint file (\S+?)\.? The file may be corrupted")
_PIPELINE_MESSAGE = re.compile(r"Dataset Pipeline Error Message:\s*-*\s*(?:\[ERROR\]\s*)?(?:\[[^\]]*\]\s*)?([^\n]+)")
_NO_SPACE = "No space left on device"


@dataclass
class RunFacts:
    """What the launcher knows when training fails: where the run writes and what it reads."""

    output: Path
    rank: int = 0
    datasets: list[str] = field(default_factory=list)
    step: int = 0                       # steps of this run that finished


def failure_log(facts: RunFacts) -> Path:
    return facts.output / "log" / f"rank_{facts.rank}" / "mf_memopt_failure.log"


def translate(error: BaseException, facts: RunFacts) -> LaunchError | None:
    """The one line for a failure MindSpore or MindFormers raised while training, or None to let it through."""
    text = "".join(traceback.format_exception_only(type(error), error))
    for explain in (_disk_full, _damaged_checkpoint, _unreadable_dataset):
        line = explain(error, text, facts)
        if line is not None:
            return LaunchError(f"{line} (the traceback is in {_keep_traceback(error, facts)})")
    return None


def _keep_traceback(error: BaseException, facts: RunFacts) -> Path:
    path = failure_log(facts)
    with contextlib.suppress(OSError):  # a full disk: the line still says what happened
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as handle:
            handle.write("".join(traceback.format_exception(error)))
    return path


def _disk_full(error: BaseException, text: str, facts: RunFacts) -> str | None:
    if not (isinstance(error, OSError) and error.errno == errno.ENOSPC) and _NO_SPACE not in text:
        return None
    partial = _own_partial_saves(facts)
    written = _full_file(error, partial)
    full = (f"the file system at {mount_point(written)} filled up while {written} was written" if written
            else "a file system filled up (the error names no file)")
    removed = _remove(partial)
    gone = f"; removed this rank's unfinished save {', '.join(removed)}" if removed else ""
    last = last_checkpoint(facts)
    then = "free space and resume from it" if "good checkpoint" in last else "free space and start again"
    return f"{full}, after {facts.step} step(s) of this run{gone}; {last}; {then}"


def _own_partial_saves(facts: RunFacts) -> list[Path]:
    """This rank's unfinished checkpoint saves (MindSpore writes `<name>.tmp` and renames it when done); other
    ranks' may still be being written by their live workers."""
    return sorted((facts.output / "checkpoint" / f"rank_{facts.rank}").glob("*.tmp"))


def _full_file(error: BaseException, partial: list[Path]) -> Path | None:
    """The file whose write found no space: the one the error names, else the save this rank had under way."""
    named = getattr(error, "filename", None)
    if named:
        return Path(named)
    return partial[-1] if partial else None


def mount_point(path: Path) -> Path:
    """The mount point of the file system `path` is on (or would be, for a path not yet there)."""
    current = Path(os.path.abspath(path))
    while not current.exists() or not os.path.ismount(current):
        if current.parent == current:
            break
        current = current.parent
    return current


def _remove(paths: list[Path]) -> list[str]:
    removed = []
    for path in paths:
        with contextlib.suppress(OSError):
            path.unlink()
            removed.append(str(path))
    return removed


def _damaged_checkpoint(error: BaseException, text: str, facts: RunFacts) -> str | None:
    found = _CHECKPOINT.search(text)
    if found is None:
        return None
    path = Path(found.group(1))
    size = f"{path.stat().st_size / 2**20:.1f} MiB" if path.is_file() else "missing"
    others = [candidate for candidate in checkpoint_files(path.parent) if candidate != path]
    newest = (f"the newest other checkpoint there is {others[-1]}" if others
              else f"{path.parent} has no other checkpoint")
    return f"checkpoint {path} ({size}) cannot be read: it is truncated or damaged; {newest}"


def _unreadable_dataset(error: BaseException, text: str, facts: RunFacts) -> str | None:
    if "dataset pipeline" not in text.lower() and not _raised_in(error, "mindspore/dataset"):
        return None
    reason = _PIPELINE_MESSAGE.search(text)
    why = f" ({reason.group(1).strip()})" if reason else ""
    files = ", ".join(facts.datasets) or "its dataset"
    return (f"MindSpore could not read the dataset {files}{why}, after {facts.step} step(s) of this run; "
            f"{last_checkpoint(facts)}; find the damaged record with `python -m mf_memopt check-data CONFIG`")


def _raised_in(error: BaseException, package: str) -> bool:
    return any(package in frame.filename.replace("\\", "/") for frame in traceback.extract_tb(error.__traceback__))


def last_checkpoint(facts: RunFacts) -> str:
    saved = checkpoint_files(facts.output / "checkpoint" / f"rank_{facts.rank}")
    return f"the last good checkpoint is {saved[-1]}" if saved else "no checkpoint was saved yet"
