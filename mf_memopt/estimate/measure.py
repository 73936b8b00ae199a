"""Measure a config's real peak: train it with the launcher in a child process and read the peak.

CPU: MindSpore prints its memory-pool state at exit when the PRE_ACT submodule logs at INFO
(`GLOG_v=2 MS_SUBMODULE_LOG_v="{PRE_ACT:1}"`): `DumpDynamicMemPoolStateInfo] ... peak used
mem:NNNM` (whole MiB, truncated). Ascend: with `MS_MEMORY_STATISTIC=1` MindSpore prints its
device memory statistics at the end of the run, among them `Actual peak memory usage` (MiB).

With `exact` (CPU only) the child also writes MindSpore's allocation log, and the peak is
replayed from it to the byte (`pool_log`); the replay must fall inside the MiB MindSpore printed.

The child is the project's launcher (`run_mindformer_memopt.py --config X --run_mode train
--train_steps N --output_dir TMP`) in a temporary directory. A failed child is reported by
its own last error line, never by its whole traceback.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..child import run_owned
from ..config.source import load_source
from ..runtime.data import DATASET_DIR, GENERATED
from .pool_log import ALLOCATION_LOG_LEVELS, CPU_PEAK, NoAllocations, replay

__all__ = ["CPU_PEAK", "MeasureError", "Measurement", "measure_peak", "reading_center"]

ASCEND_PEAK = re.compile(r"[Aa]ctual peak memory usage[^0-9]*([0-9.]+)\s*M")
LAUNCHER = Path(__file__).resolve().parents[2] / "run_mindformer_memopt.py"
_LAUNCH_INLINE = "import sys; from mf_memopt.runtime.launch import main; sys.exit(main())"


def launcher_head() -> list[str]:
    """The command that starts the launcher: the checkout's script, or the installed package's `main`
    (an installed wheel has no run_mindformer_memopt.py beside it)."""
    return [sys.executable, str(LAUNCHER)] if LAUNCHER.is_file() else [sys.executable, "-c", _LAUNCH_INLINE]


# MindSpore prints the CPU pool peak in whole MiB, cut down: a reading of m MiB means a peak in
# [m, m + 1) MiB. Errors are taken against the middle of that interval.
CPU_READING_STEP = 2**20


def reading_center(peak_bytes: int, runtime: str = "cpu") -> float:
    """The middle of the interval a printed peak stands for (Ascend prints fractions of a MiB)."""
    return peak_bytes + CPU_READING_STEP / 2 if runtime == "cpu" else float(peak_bytes)


EXACT_ON_ASCEND = ("--exact replays the CPU memory pool's allocation log; Ascend's memory statistics print "
                   "fractions of a MiB already: leave --exact out")


class MeasureError(RuntimeError):
    """The training child failed or printed no peak; the message is short and says why."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Measurement:
    config: str
    runtime: str
    steps: int
    peak_bytes: int                 # MindSpore's figure, whole MiB
    source: str                     # which log line it was read from
    exact_bytes: int | None = None  # replayed from the allocation log (`exact`), to the byte

    def to_dict(self) -> dict:
        return {"config": self.config, "runtime": self.runtime, "steps": self.steps, "peak_bytes": self.peak_bytes,
                "peak_mib": self.peak_bytes / 2**20, "source": self.source, "exact_bytes": self.exact_bytes}


def measure_peak(config: str | Path, *, runtime: str = "cpu", steps: int = 1, timeout: float | None = 1800,
                 workdir: str | Path | None = None, exact: bool = False) -> Measurement:
    """Train `config` for `steps` steps in a child process and return MindSpore's peak."""
    if steps < 1:
        raise MeasureError(f"--steps must be at least 1, got {steps}")
    if exact and runtime != "cpu":
        raise MeasureError(EXACT_ON_ASCEND)
    config = Path(config).resolve()
    with tempfile.TemporaryDirectory(prefix="mf_memopt_measure_", dir=workdir) as tmp:
        log = _train(config, runtime, steps, Path(tmp), timeout, allocation_log=exact)
    peak, source = _peak(log, runtime)
    exact_bytes = _replayed(log, peak) if exact else None
    return Measurement(config=str(config), runtime=runtime, steps=steps, peak_bytes=peak, source=source,
                       exact_bytes=exact_bytes)


def _replayed(log: str, printed: int) -> int:
    try:
        replayed = replay(log.splitlines())
    except NoAllocations as error:
        raise MeasureError(f"--exact: {error}") from error
    if not replayed.inside(printed // 2**20):
        raise MeasureError(f"--exact: the allocation log replays to {replayed.bytes / 2**20:.3f} MiB, outside the "
                           f"{printed // 2**20} MiB MindSpore printed; use the printed figure (leave --exact out)")
    return replayed.bytes


def child_command(config: Path, steps: int, output_dir: Path) -> list[str]:
    return [*launcher_head(), "--config", str(config), "--run_mode", "train", "--train_steps", str(steps),
            "--output_dir", str(output_dir), *dataset_arguments(config, output_dir)]


def dataset_arguments(config: Path, output_dir: Path) -> list[str]:
    """Where the child reads its data: tokens the YAML asks to generate are written under the child's own output;
    the YAML's own dataset is read where it is, a relative path taken from this process's directory (the child
    runs in another)."""
    source = load_source(config)
    if source.has(GENERATED):
        return ["--train_dataset_dir", str(output_dir / "data" / "tokens.mindrecord")]
    dataset = source.get(DATASET_DIR)
    return ["--train_dataset_dir", str(Path(str(dataset)).resolve())] if isinstance(dataset, str) and dataset else []


def child_environment(runtime: str, work: Path, *, allocation_log: bool = False) -> dict[str, str]:
    package_root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")])),
           "LOG_MF_PATH": str(work / "mindformers_log")}
    if runtime == "cpu":
        env.update({"GLOG_v": "2", "MS_SUBMODULE_LOG_v": ALLOCATION_LOG_LEVELS if allocation_log else "{PRE_ACT:1}"})
    else:
        env.update({"MS_MEMORY_STATISTIC": "1", "GLOG_v": env.get("GLOG_v", "2")})
    return env


def _train(config: Path, runtime: str, steps: int, work: Path, timeout: float | None, *,
           allocation_log: bool = False) -> str:
    command = child_command(config, steps, work / "output")
    env = child_environment(runtime, work, allocation_log=allocation_log)
    try:
        done = run_owned(command, cwd=work, env=env, timeout=timeout)
    except subprocess.TimeoutExpired as error:
        raise MeasureError(f"training {config.name} did not finish within {timeout:.0f} s") from error
    if done.returncode != 0:
        raise MeasureError(f"training {config.name} failed (exit {done.returncode}): {failure_summary(done.stdout)}")
    return done.stdout


def _peak(log: str, runtime: str) -> tuple[int, str]:
    pattern = CPU_PEAK if runtime == "cpu" else ASCEND_PEAK
    found = pattern.findall(log)
    if not found:
        what = "memory-pool peak (DumpDynamicMemPoolStateInfo)" if runtime == "cpu" else \
            "memory statistics (Actual peak memory usage, MS_MEMORY_STATISTIC=1)"
        raise MeasureError(f"the training run printed no {what}; last lines:\n{_tail(log, 8)}")
    return round(float(found[-1]) * 2**20), pattern.pattern


_ERROR_LINE = re.compile(r"^(?:[\w.]*(?:Error|Exception)\b.*|.*ConfigError.*|\S+:\d+: .*)$")


def failure_summary(log: str) -> str:
    """The lines that say why a child failed: a ConfigError's issue lines, else the exception line."""
    lines = [line.rstrip() for line in log.splitlines() if line.strip()]
    issues = [line for line in lines if re.match(r"^\S+\.ya?ml:\d+: ", line)]
    if issues:
        return "\n".join(issues)
    errors = [line for line in lines if _ERROR_LINE.match(line) and not line.startswith("Traceback")]
    if errors:
        first = errors[-1]
        detail = next((line.strip() for line in lines[lines.index(first) + 1:]
                       if line.strip().startswith("-") or "fail" in line.lower()), "")
        return first[:400] + (f" {detail[:300]}" if detail else "")
    return _tail(log, 5)


def _tail(text: str, count: int) -> str:
    return "\n".join(text.splitlines()[-count:])
