"""The run's output directory: checked before any heavy work, and what a run wrote there.

MindFormers' logs (`log/`), checkpoints (`checkpoint/`) and strategy files go under it as
they go under MindFormers' own `output_dir`, and so does the apply report. A second run into
the same directory keeps the previous apply report under a new name unless `--force` is given.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from .environment import msrun_workers, rank
from .errors import LaunchError


class OutputError(LaunchError):
    """The output directory cannot be used; raised before anything is built."""


def check_output_dir(path: Path) -> Path:
    """Create `path` if needed and prove it is a writable directory; the absolute path."""
    path = Path(os.path.abspath(path))
    for ancestor in (path, *path.parents):
        if ancestor.exists():
            if not ancestor.is_dir():
                what = "is" if ancestor == path else f"lies under {ancestor}, which is"
                raise OutputError(f"output directory {path} {what} not a directory")
            break
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".write-test-"):
            pass
    except OSError as error:
        raise OutputError(f"output directory {path} is not writable ({error.strerror or error})") from None
    return path


def worker_output(path: Path, *, use_parallel: bool) -> Path:
    """Where this process writes. Under msrun without use_parallel every worker trains its own copy of the
    model as rank 0 of 1; each then gets `worker_<id>/` under the output directory, or they would write the
    same checkpoint and report files at once."""
    if msrun_workers() <= 1 or use_parallel:
        return path
    return path / f"worker_{rank()}"


def report_name(rank: int, world_size: int) -> str:
    return f"apply_report_rank{rank}.json" if world_size > 1 else "apply_report.json"


def write_report(path: Path, text: str, *, force: bool, what: str = "apply report") -> str:
    """Write the apply report (or another record of the run); a previous one is kept under a dated name unless
    `force`. Says which."""
    if not path.exists():
        path.write_text(text)
        return f"{what} written to {path}"
    if force:
        path.write_text(text)
        return f"{what} written to {path}, replacing the previous one (--force)"
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(path.stat().st_mtime))
    kept = _free_name(path.with_name(f"{path.stem}.{stamp}{path.suffix}"))
    path.rename(kept)
    path.write_text(text)
    return f"{what} written to {path}; the previous run's is kept as {kept.name} (--force replaces it)"


def _free_name(path: Path) -> Path:
    candidate, number = path, 1
    while candidate.exists():
        candidate = path.with_name(f"{path.stem}-{number}{path.suffix}")
        number += 1
    return candidate


def written_files(output: Path, rank: int) -> list[str]:
    """What this rank has left under the output directory so far, for an interrupted run's message."""
    found = []
    reports = sorted([*output.glob("apply_report*.json"), *output.glob("run_config*.yaml")])
    if reports:
        found.append(", ".join(str(report) for report in reports))
    checkpoints = checkpoint_files(output / "checkpoint" / f"rank_{rank}")
    if checkpoints:
        found.append(f"{len(checkpoints)} checkpoint(s), the last {checkpoints[-1]}")
    if (output / "log").is_dir():
        found.append(f"logs in {output / 'log'}")
    return found


CHECKPOINT_SUFFIXES = (".ckpt", ".safetensors")   # MindFormers' legacy models save .ckpt, its mcore models safetensors


def checkpoint_files(directory: Path) -> list[Path]:
    """The checkpoints in a directory, oldest first."""
    if not directory.is_dir():
        return []
    return sorted((file for file in directory.iterdir() if file.suffix in CHECKPOINT_SUFFIXES and file.is_file()),
                  key=lambda file: file.stat().st_mtime)
