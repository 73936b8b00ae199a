#!/usr/bin/env python
"""(g) Hostile inputs: time and memory of `validate`, `plan` and `estimate` on every class of bad input.

    python benchmarks/hostile.py                      # this checkout
    python benchmarks/hostile.py --baseline 09e95cc   # also the package as it was at a git revision
    python benchmarks/hostile.py --only regex         # the inputs whose name contains "regex"

Each input of `tests/unit/test_hostile_inputs.py` is written to a file and given to
`python -m mf_memopt COMMAND FILE` in a fresh process (at most 30 s and 4 GiB of address space);
the table shows, per input, the outcome of each command (validate/plan/estimate: ok = exit 0,
err = a clean error, TRACEBACK, HANG = killed after 30 s, KILLED = out of memory), and the
slowest wall time and largest peak RSS of the three. Target: every input answered
with exit 0 or a clean error within 10 s and 1 GB.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
COMMANDS = ("validate", "plan", "estimate")
LIMIT_S, LIMIT_BYTES = 30, 4 * 2**30
SHORT = {"exit 0": "ok", "error": "err", "traceback": "TRACEBACK", "killed": "KILLED", "timeout": "HANG"}


def run_one(code_dir: Path, command: str, config: Path) -> tuple[str, float, float]:
    """(outcome, seconds, peak RSS in MiB) of one CLI run."""
    env = {**os.environ, "PYTHONPATH": str(code_dir), "GLOG_v": "3"}
    with tempfile.TemporaryFile() as err_file:
        start = time.perf_counter()
        process = subprocess.Popen(
            [sys.executable, "-m", "mf_memopt", command, str(config)], cwd=config.parent, env=env,
            stdout=subprocess.DEVNULL, stderr=err_file,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (LIMIT_BYTES, LIMIT_BYTES)))
        status, usage, outcome = _wait(process)
        seconds = time.perf_counter() - start
        err_file.seek(0)
        err = err_file.read()
    if outcome is None:
        code = os.waitstatus_to_exitcode(status)
        if code < 0 or b"MemoryError" in err:
            outcome = "killed"
        elif b"Traceback" in err:
            outcome = "traceback"
        else:
            outcome = {0: "exit 0", 1: "error"}.get(code, f"exit {code}")
    return outcome, seconds, usage.ru_maxrss / 1024


def _wait(process: subprocess.Popen) -> tuple[int, resource.struct_rusage, str | None]:
    """Reap the child with its own resource usage (wait4), killing it after LIMIT_S."""
    deadline = time.monotonic() + LIMIT_S
    outcome = None
    while True:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            process.returncode = os.waitstatus_to_exitcode(status)
            return status, usage, outcome
        if time.monotonic() > deadline and outcome is None:
            process.kill()
            outcome = "timeout"
        time.sleep(0.01)


def run_case(code_dir: Path, content, workdir: Path) -> tuple[str, float, float]:
    sys.path[:0] = [str(REPO / "tests" / "unit"), str(REPO / "tests" / "helpers")]
    from test_hostile_inputs import _write

    case_dir = Path(tempfile.mkdtemp(dir=workdir))
    config = _write(case_dir, content)
    results = [run_one(code_dir, command, config) for command in COMMANDS]
    outcomes = "/".join(SHORT.get(result[0], result[0]) for result in results)
    return outcomes, max(result[1] for result in results), max(result[2] for result in results)


def checkout(revision: str, into: Path) -> Path:
    archive = subprocess.run(["git", "archive", revision, "mf_memopt"], cwd=REPO, check=True, capture_output=True).stdout
    tarfile.open(fileobj=BytesIO(archive)).extractall(into)
    return into


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", help="a git revision to compare with (its mf_memopt/ only)")
    parser.add_argument("--only", help="run the inputs whose name contains this text")
    args = parser.parse_args()
    sys.path[:0] = [str(REPO), str(REPO / "tests" / "unit"), str(REPO / "tests" / "helpers")]
    from test_hostile_inputs import ROWS

    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        sides = [("ours", REPO)]
        if args.baseline:
            sides.append((args.baseline, checkout(args.baseline, workdir / "baseline")))
        header = f"{'input':<48}" + "".join(f"{name + ': V/P/E':>28}{'s':>7}{'MiB':>7}" for name, _ in sides)
        print(header)
        worst_s = worst_mib = 0.0
        clean = 0
        rows = [row for row in ROWS if args.only is None or args.only in row[0]]
        for name, content, _ in rows:
            row = f"{name[:47]:<48}"
            for side, code_dir in sides:
                outcome, seconds, mib = run_case(code_dir, content, workdir)
                row += f"{outcome:>28}{seconds:>7.1f}{mib:>7.0f}"
                if side == "ours":
                    worst_s, worst_mib = max(worst_s, seconds), max(worst_mib, mib)
                    clean += set(outcome.split("/")) <= {"ok", "err"} and seconds <= 10 and mib <= 1024
            print(row, flush=True)
        print(f"ours: {clean}/{len(rows)} inputs answered cleanly within 10 s and 1 GB by all three commands; "
              f"slowest {worst_s:.1f} s, largest peak RSS {worst_mib:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
