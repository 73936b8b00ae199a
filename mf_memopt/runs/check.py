"""`estimate CONFIG --measure`: the estimate next to the peak of a real training run, per stage.

The user's way to check the model on their own config (and the planner's closed loop):
the config is estimated, checked against what the backend can run (before anything is
compiled), trained for a few steps by the launcher in a child process, and the measured peak
is printed next to the prediction with the relative error.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from ..apply.family import backend_of
from ..config.device import device_of
from ..config.load import Document, load_document
from ..document.errors import raise_if_errors
from ..estimate.core import Estimate, estimate_config
from ..estimate.transfer import Hardware
from .measure import EXACT_ON_ASCEND, MeasureError, Measurement, measure_peak, reading_center


@dataclass(frozen=True, slots=True, kw_only=True)
class StageCheck:
    stage: int
    predicted_bytes: int
    measured_bytes: int | None      # None: this stage was not run by the single training process
    runtime: str = "cpu"
    exact: bool = False             # measured_bytes replayed to the byte (`--exact`), not a printed reading

    @property
    def error(self) -> float | None:
        """Against the exact peak, or the middle of the printed reading's interval (the CPU pool prints
        whole MiB, cut down)."""
        if not self.measured_bytes:
            return None
        center = float(self.measured_bytes) if self.exact else reading_center(self.measured_bytes, self.runtime)
        return (self.predicted_bytes - center) / center

    def to_dict(self) -> dict:
        return {"stage": self.stage, "predicted_bytes": self.predicted_bytes, "measured_bytes": self.measured_bytes,
                "exact": self.exact, "error": self.error}


def device_runtime(config: str | Path | Document) -> str:
    """The runtime of the config's device (`config.device`: ascend when context.device_target is not set)."""
    return device_of(load_document(config).source).runtime


def check_backend(document: Document, runtime: str) -> None:
    """Refuse settings the backend cannot run, before the child compiles anything."""
    source = document.source
    target = "CPU" if runtime == "cpu" else "Ascend"
    raise_if_errors(backend_of(document.family).backend_issues(source.get(("model", "model_config")), target, source))


def compare(estimate: Estimate, measurement: Measurement) -> list[StageCheck]:
    """Stage 0 is what one training process measures; later pipeline stages need msrun."""
    measured = measurement.exact_bytes or measurement.peak_bytes
    return [StageCheck(stage=stage.stage, predicted_bytes=stage.peak.peak,
                       measured_bytes=measured if stage.stage == 0 else None,
                       runtime=measurement.runtime, exact=measurement.exact_bytes is not None)
            for stage in estimate.stages]


def measure_and_compare(config: str | Path, *, runtime: str | None, hardware: Hardware, steps: int,
                        as_json: bool, exact: bool = False) -> int:
    document = None
    if runtime is None:                 # the config's device decides the runtime: read it now
        document = load_document(config)
        runtime = device_runtime(document)
    if exact and runtime != "cpu":
        print(f"estimate --measure --exact: {EXACT_ON_ASCEND}", file=sys.stderr)
        return 2
    document = document or load_document(config)
    estimate = estimate_config(document, runtime=runtime, hardware=hardware)
    check_backend(document, runtime)
    print(f"training {Path(config).name} for {steps} step(s) with the launcher ({runtime}) ...", file=sys.stderr,
          flush=True)
    try:
        measurement = measure_peak(document, runtime=runtime, steps=steps, exact=exact)
    except MeasureError as error:
        print(f"estimate --measure: {error}", file=sys.stderr)
        return 1
    checks = compare(estimate, measurement)
    if as_json:
        print(json.dumps({"config": str(config), "runtime": runtime, "steps": steps,
                          "measurement": measurement.to_dict(), "stages": [check.to_dict() for check in checks],
                          "estimate": estimate.to_dict()}, indent=2))
    else:
        print(check_text(estimate, measurement, checks))
    return 0


def check_text(estimate: Estimate, measurement: Measurement, checks: list[StageCheck]) -> str:
    what = "memory-pool peak" if measurement.runtime == "cpu" else "MindSpore memory statistics (peak)"
    rows = [["stage", "predicted", "measured", "error", "predicted peak at"]]
    for check, stage in zip(checks, estimate.stages):
        measured = "-" if check.measured_bytes is None else \
            f"{check.measured_bytes / 2**20:.{3 if check.exact else 0}f} MiB"
        error = "not run (pipeline stage > 0)" if check.error is None else f"{check.error:+.1%}"
        rows.append([str(check.stage), f"{check.predicted_bytes / 2**20:.1f} MiB", measured, error,
                     stage.peak.checkpoint])
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    lines = [f"{Path(estimate.config).name}: {estimate.runtime} runtime, {measurement.steps} training step(s); "
             f"measured: {what}" + (" (replayed from the allocation log, to the byte)" if measurement.exact_bytes
                                     else " (whole MiB, cut down: errors are against the middle of the MiB)"
                                     if measurement.runtime == "cpu" else ""), ""]
    lines += ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    return "\n".join(lines)
