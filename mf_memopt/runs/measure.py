"""Measure a config's real peak: train it with the launcher in a child process and read the peak.

CPU: MindSpore prints its memory-pool state at exit when the PRE_ACT submodule logs at INFO
(`GLOG_v=2 MS_SUBMODULE_LOG_v="{PRE_ACT:1}"`): `DumpDynamicMemPoolStateInfo] ... peak used
mem:NNNM` (whole MiB, truncated). Ascend: with `MS_MEMORY_STATISTIC=1` MindSpore prints its
device memory statistics at the end of the run, among them `Actual peak memory usage` (MiB).

With `exact` (CPU only) the child also writes MindSpore's allocation log, and the peak is
replayed from it to the byte (`pool_log`); the replay must fall inside the MiB MindSpore printed.

The child is the project's launcher, run in a temporary directory by the one child runner
(`runner.train`). A failed child is reported by its own last error line, never by its whole
traceback.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..config.device import DEVICE_TARGET, device_of
from ..config.load import Document
from ..document.errors import ConfigError
from ..document.source import Source
from ..estimate.pool_log import CPU_PEAK, NoAllocations, replay
from .runner import ASCEND_PEAK, ChildFailed, failure_summary, tail, train, yaml_dataset

__all__ = ["ASCEND_PEAK", "CPU_PEAK", "MeasureError", "Measurement", "failure_summary", "measure_peak",
           "reading_center"]

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


def measure_peak(config: str | Path | Document, *, runtime: str = "cpu", steps: int = 1,
                 timeout: float | None = 1800, workdir: str | Path | None = None, exact: bool = False) -> Measurement:
    """Train `config` (a path, or a document already read) for `steps` steps in a child process and return
    MindSpore's peak."""
    if steps < 1:
        raise MeasureError(f"--steps must be at least 1, got {steps}")
    if exact and runtime != "cpu":
        raise MeasureError(EXACT_ON_ASCEND)
    document = config if isinstance(config, Document) else None
    if document is not None:
        _check_runtime(document.source, runtime)
    config = Path(config.source.file if isinstance(config, Document) else config).resolve()
    with tempfile.TemporaryDirectory(prefix="mf_memopt_measure_", dir=workdir) as tmp:
        work = Path(tmp)
        try:
            run = train(config, steps=steps, work=work, runtime=runtime,
                        dataset=yaml_dataset(document or config, work / "output"), allocation_log=exact,
                        timeout=timeout)
        except ChildFailed as error:
            raise MeasureError(str(error)) from error
    if run.peak_bytes is None:
        what = "memory-pool peak (DumpDynamicMemPoolStateInfo)" if runtime == "cpu" else \
            "memory statistics (Actual peak memory usage, MS_MEMORY_STATISTIC=1)"
        raise MeasureError(f"the training run printed no {what}; last lines:\n{tail(run.log, 8)}")
    exact_bytes = _replayed(run.log, run.peak_bytes) if exact else None
    return Measurement(config=str(config), runtime=runtime, steps=steps, peak_bytes=run.peak_bytes,
                       source=run.peak_source, exact_bytes=exact_bytes)


def _check_runtime(source: Source, runtime: str) -> None:
    """A command's `--runtime` must name the device the YAML trains on: the launcher trains on the YAML's
    `context.device_target` whatever the flag says, and the run would fail only after training (its peak read for
    the other device). `ConfigError` at that key, before anything trains."""
    device = device_of(source)
    if runtime != device.runtime:
        asked = "CPU" if runtime == "cpu" else "Ascend"
        message = f"--runtime {runtime}, but the YAML trains on {device.describe()}"
        raise ConfigError([source.issue(DEVICE_TARGET, message,
                                        f"leave --runtime out, or set context.device_target: {asked}")])


def _replayed(log: str, printed: int) -> int:
    try:
        replayed = replay(log.splitlines())
    except NoAllocations as error:
        raise MeasureError(f"--exact: {error}") from error
    if not replayed.inside(printed // 2**20):
        raise MeasureError(f"--exact: the allocation log replays to {replayed.bytes / 2**20:.3f} MiB, outside the "
                           f"{printed // 2**20} MiB MindSpore printed; use the printed figure (leave --exact out)")
    return replayed.bytes
