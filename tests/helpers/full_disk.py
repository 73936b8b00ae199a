"""A disk that fills on cue, so that the full-disk tests run as any user (mounting a small file system needs root).

A `sitecustomize` put first on the launched process's PYTHONPATH replaces `open`: once the cue file exists in the
directory, opening a file below it for writing makes the file, as a full disk does, and then fails with ENOSPC
("No space left on device"), as the first write to it would. MindSpore's checkpoint writer (`FileSystem.create`,
mindspore/common/file_system.py) and the launcher's space probe open their files this way; the lock file, written
with `os.pwrite` to an already open descriptor, is not affected.
"""

from __future__ import annotations

import os
from pathlib import Path

CUE = ".disk_full"
DIRECTORY = "MF_MEMOPT_TEST_FULL_DIR"
_HOOK = f"""\
import builtins, errno, os

_full = os.environ.get({DIRECTORY!r})
if _full:
    _open = builtins.open

    def _open_on_a_full_disk(file, mode="r", *args, **kwargs):
        path = os.path.abspath(os.fsdecode(file)) if isinstance(file, (str, bytes, os.PathLike)) else ""
        writing = any(flag in mode for flag in "wax+")
        if writing and path.startswith(_full + os.sep) and os.path.exists(os.path.join(_full, {CUE!r})):
            _open(file, mode, *args, **kwargs).close()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
        return _open(file, mode, *args, **kwargs)

    builtins.open = _open_on_a_full_disk
"""


def full_disk_env(env: dict, hooks: Path, directory: Path) -> dict:
    """`env` for a process whose writes below `directory` fail once `fill(directory)` has been called."""
    hooks.mkdir(parents=True, exist_ok=True)
    (hooks / "sitecustomize.py").write_text(_HOOK)
    return {**env, DIRECTORY: str(directory.resolve()),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(hooks), env.get("PYTHONPATH")]))}


def fill(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / CUE).touch()
