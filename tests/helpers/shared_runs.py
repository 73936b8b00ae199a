"""Children that tests in several modules read, run once per pytest session and shared by its xdist workers.

A training or compile child costs the suite most of its time (MindSpore's compile of the tiny model). Where two
modules start the very same child (the same command line, config and environment), the first test that asks runs it
into a folder of the session's base temporary directory, which every xdist worker of the session shares, while it
holds that folder's lock; every later test, in any module or worker, waits for the lock and reads what the run left
(its exit code, stdout and stderr, and the files it wrote). A run whose command could not start leaves no result, so
the next test that asks runs it again and fails in its own name; a run that exits non-zero is kept like any other,
and each test that reads it asserts on its exit code itself.

The helpers take pytest's `tmp_path_factory`: under xdist each worker's base temporary directory is
`pytest-N/popen-gwK`, and `pytest-N` is the session's.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from launching import POOL_LOG, TINY, launcher_command, launcher_env

ROOT = Path(__file__).resolve().parents[2]
_DONE = "completed.json"


def session_folder(tmp_path_factory) -> Path:
    """The folder every worker of this pytest session shares."""
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared_runs"
    folder.mkdir(exist_ok=True)
    return folder


def run_once(tmp_path_factory, name: str, command: Callable[[Path], list[str]], *, env: dict, cwd: Path | None = None,
             timeout: float = 900) -> tuple[subprocess.CompletedProcess, Path]:
    """`command(folder)` run once per session in `cwd` (default: its own folder): the finished process and the folder
    the run may write into."""
    folder = session_folder(tmp_path_factory) / name
    with open(folder.parent / f"{name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)            # released when the file closes, also if the run raises
        done = folder / _DONE
        if not done.is_file():
            folder.mkdir(exist_ok=True)
            ran = subprocess.run(command(folder), cwd=cwd or folder, env=env, capture_output=True, text=True,
                                 timeout=timeout)
            done.write_text(json.dumps({"args": ran.args, "returncode": ran.returncode, "stdout": ran.stdout,
                                        "stderr": ran.stderr}))
    kept = json.loads(done.read_text())
    return subprocess.CompletedProcess(kept["args"], kept["returncode"], kept["stdout"], kept["stderr"]), folder


def verify_shipped(tmp_path_factory, config: str, *flags: str) -> subprocess.CompletedProcess:
    """`python -m mf_memopt verify configs/X.yaml --json FLAGS` in the checkout, once per session."""
    name = "verify-" + "-".join([Path(config).stem, *(flag.strip("-") for flag in flags)])
    env = {**os.environ, "GLOG_v": "3", "PYTHONPATH": str(ROOT)}
    done, _ = run_once(tmp_path_factory, name,
                       lambda folder: [sys.executable, "-m", "mf_memopt", "verify", config, "--json", *flags],
                       env=env, cwd=ROOT, timeout=600)
    return done


def llama_tiny_trained(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path, Path]:
    """The launcher's run of the shipped tiny Llama as it is, the whole generated dataset (16 steps, a checkpoint
    after steps 8 and 16), with MindSpore's pool log, once per session: the finished process, its --output_dir and
    its token file. Readers copy what they would change."""
    def command(folder: Path) -> list[str]:
        return launcher_command(TINY, "--run_mode", "train", "--output_dir", str(folder / "output"), "--force",
                                "--train_dataset_dir", str(folder / "data" / "llama_tiny.mindrecord"))

    done, folder = run_once(tmp_path_factory, "launcher-llama_tiny", command, env=launcher_env(**POOL_LOG), timeout=600)
    return done, folder / "output", folder / "data" / "llama_tiny.mindrecord"
