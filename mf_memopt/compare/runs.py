"""Train one config for N steps with the launcher in a child process and read back what it did.

The child is the project's launcher with `--record_steps` (`runtime/train.py`): one JSON line per
step with the exact float32 loss, global norm, overflow flag and loss scale, then a SHA-256 digest
of every trained parameter. It runs in a directory of its own, and reads the dataset the YAML
names, resolved from the caller's working directory as a training run started there would read
it (a `generated_dataset` is written there once and then shared by both runs). On CPU the memory-pool peak is read from
MindSpore's exit report, as `estimate --measure` reads it.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from ..child import run_owned
from ..estimate.measure import ASCEND_PEAK, CPU_PEAK, child_environment, failure_summary, launcher_head


class RunFailed(RuntimeError):
    """A training child failed or wrote no record; the message says which config and why, in a few lines."""


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
    command = [*launcher_head(), "--config", str(config.resolve()), "--run_mode", "train", "--train_steps",
               str(steps), "--output_dir", str(work / "output"), "--record_steps", str(record)]
    if dataset is not None:
        command += ["--train_dataset_dir", str(dataset)]
    env = child_environment(runtime, work)
    try:
        done = run_owned(command, cwd=work, env=env, timeout=timeout)
    except subprocess.TimeoutExpired as error:
        raise RunFailed(f"training {config} did not finish within {timeout:.0f} s") from error
    (work / "train.log").write_text(done.stdout or "")
    if done.returncode != 0:
        raise RunFailed(f"training {config} failed (exit {done.returncode}): {failure_summary(done.stdout or '')}; "
                        f"its log: {work / 'train.log'}")
    return _read(config, record, done.stdout or "", runtime)


def _read(config: Path, record: Path, log: str, runtime: str) -> Run:
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
    found = (CPU_PEAK if runtime == "cpu" else ASCEND_PEAK).findall(log)
    peak = round(float(found[-1]) * 2**20) if found else None
    return Run(config=os.fspath(config), steps=steps, parameters=parameters, peak_bytes=peak)
