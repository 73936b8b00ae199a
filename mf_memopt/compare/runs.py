"""Train one config for N steps with the launcher in a child process and read back what it did.

The child is the project's launcher with `--record_steps` (`runtime/train.py`), started by the one child runner
(`runner.train`): one JSON line per step with the exact float32 loss, global norm, overflow flag and loss scale,
then a SHA-256 digest of every trained parameter. It runs in a directory of its own, and reads the dataset the YAML
names, resolved from the caller's working directory as a training run started there would read it (a
`generated_dataset` is written there once and then shared by both runs). On CPU the memory-pool peak is read from
MindSpore's exit report, as `estimate --measure` reads it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..runs.runner import ChildFailed, train

RunFailed = ChildFailed
"""A training child failed or wrote no record (the runner's one error)."""


@dataclass(frozen=True, slots=True)
class Step:
    step: int
    loss: float | None
    global_norm: float | None
    overflow: bool | None
    loss_scale: float | None


@dataclass(frozen=True, slots=True)
class Run:
    config: str
    steps: tuple[Step, ...]
    parameters: dict[str, str] = field(default_factory=dict)     # name -> SHA-256 of its bytes
    peak_bytes: int | None = None                                  # MindSpore's figure (CPU: whole MiB)


def train_recorded(config: Path, *, steps: int, work: Path, runtime: str, dataset: Path | None,
                   timeout: float | None = 3600) -> Run:
    """Train `config` for `steps` steps into `work` (reading `dataset` when given); its step record, parameter
    digests and peak."""
    work.mkdir(parents=True, exist_ok=True)
    record = work / "steps.jsonl"
    run = train(config.resolve(), steps=steps, work=work, runtime=runtime, dataset=dataset, record=record,
                timeout=timeout, log_file=work / "train.log")
    return _read(config, record, run.peak_bytes)


def _read(config: Path, record: Path, peak: int | None) -> Run:
    try:
        lines = [json.loads(line) for line in record.read_text().splitlines() if line.strip()]
    except (OSError, ValueError) as error:
        raise RunFailed(f"training {config} left no readable step record {record}: {error}") from None
    steps = tuple(Step(step=entry["step"], loss=entry.get("loss"), global_norm=entry.get("global_norm"),
                       overflow=entry.get("overflow"), loss_scale=entry.get("loss_scale"))
                  for entry in lines if "step" in entry)
    parameters = next((entry["parameters"] for entry in lines if "parameters" in entry), {})
    if not steps:
        raise RunFailed(f"training {config} recorded no step in {record}")
    return Run(config=os.fspath(config), steps=steps, parameters=parameters, peak_bytes=peak)
