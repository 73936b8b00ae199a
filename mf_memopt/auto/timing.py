"""What a recompute choice costs in time, measured: the step-time profile `auto --runtime cpu` prices plans with.

FLOPs say little about recompute time on CPU: the softmax, the norms, the casts and the attention-score tensors
are memory-bound and take far more time than their FLOPs say. So the cost of each choice is measured on the
config itself: the launcher trains the config with every layer given the same choice (keep, each cell, every
cell, full recompute), `STEPS` steps each in its own process, the runs interleaved over the choices `RUNS`
times. A choice's added time per layer and step is (its step time - keep's) / layers: the recompute as the
runtime runs it, every operator of the recomputed cells included. `problem.py` prices a plan as the sum of its
layers' added times.

The clock (`Trained.time_s`, `fastest`): the wall time of each step after the first `WARMUP` (the first compiles;
on CPU the next four run 30-50% slower while the run settles), and of a run the lower quartile of those steps: a
step that another process or a slow phase of the run stretched does not count, and the steps' CPU time is not used
(MindSpore's CPU threads spin while they wait, so a step's CPU time is about twice its wall time on two cores and
varies by 30% between runs of one plan). Runs of one plan still differ (by 18% on a 4-layer Llama, by up to
37% over the brute-force benchmark's five runs of a plan: a run can land in a slower stretch throughout), so a
plan's time is its fastest run's.

The profile is cached per model shape (every key of the YAML but the plan sections, the callbacks and the
paths: `shape_key`) as JSON under `cache_dir()` (`MF_MEMOPT_CACHE`, else `~/.cache/mf_memopt`), read back
through the guarded reader. Without a profile (`--runtime ascend`, or no `--profile` and nothing cached) the
FLOP model prices recompute at `--tflops`, and the report says which was used.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..config.reading import read_bytes
from ..config.source import Source
from ..estimate.measure import MeasureError
from ..runner import ChildFailed, train, yaml_dataset
from .choices import Choice

STEPS = 15                  # steps per run
WARMUP = 5                  # the first steps are not timed: the compile, then the run settling
RUNS = 2                    # runs per choice, interleaved (the run-to-run spread is large on a loaded machine)
EPOCHS = 10_000             # a short dataset is read again until STEPS steps are trained (--train_steps stops)
VERSION = 3                 # 3: the wall-clock lower quartile after WARMUP steps (2 timed CPU time from step 2)
_IGNORED = ("recompute_config", "swap_config", "callbacks", "output_dir", "load_checkpoint", "src_strategy_path_or_dir",
            "train_dataset", "train_dataset_task", "generated_dataset", "eval_dataset", "eval_dataset_task")
STEP_LINE = re.compile(r"mf_memopt stepclock: step (\d+) wall_ms ([\d.]+) cpu_ms ([\d.]+)")


@dataclass(frozen=True, slots=True, kw_only=True)
class Trained:
    """One training run: the memory-pool peak and the wall time of each timed step (seconds, after `WARMUP`)."""

    peak_bytes: int
    step_s: tuple[float, ...]           # the wall time of each timed step
    cpu_s: tuple[float, ...] = ()       # their CPU time (every thread of the process), for the record

    @property
    def time_s(self) -> float:
        """The run's step time: the lower quartile of its timed steps."""
        return lower_quartile(self.step_s)


def lower_quartile(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 4]


def fastest(runs: Sequence[Trained]) -> float:
    """A plan's step time over several runs: its fastest run's (`Trained.time_s`)."""
    return min(run.time_s for run in runs)


@dataclass(frozen=True, slots=True, kw_only=True)
class TimeTable:
    """Added seconds per layer and step of each choice (by `Choice.name`), and where they come from."""

    key: str
    layers: int
    base_s: float                           # step time with nothing recomputed
    added_s: dict[str, float]               # choice name -> added seconds per layer per step
    samples: dict[str, list[float]] = field(default_factory=dict)   # choice name -> each run's step time (s)
    source: str = ""
    load: str = ""
    noise_s: float = 0.0                    # the runs' spread per layer: choices closer than it are not told apart

    def seconds(self, choice: Choice) -> float:
        if choice.name not in self.added_s:
            raise ValueError(f"the time profile ({self.source}) has no entry for '{choice.name}': measure it again "
                             f"(auto --profile after deleting the cached file)")
        return self.added_s[choice.name]

    def to_dict(self) -> dict:
        return {"version": VERSION, "key": self.key, "layers": self.layers, "base_s": self.base_s,
                "added_s": self.added_s, "samples": self.samples, "source": self.source, "load": self.load,
                "noise_s": self.noise_s}

    @classmethod
    def from_dict(cls, data: dict) -> TimeTable:
        return cls(key=str(data["key"]), layers=int(data["layers"]), base_s=float(data["base_s"]),
                   added_s={str(k): float(v) for k, v in data["added_s"].items()},
                   samples={str(k): [float(x) for x in v] for k, v in data.get("samples", {}).items()},
                   source=str(data.get("source", "")), load=str(data.get("load", "")),
                   noise_s=float(data.get("noise_s", 0.0)))


def shape_key(source: Source) -> str:
    """A digest of what decides the step time: every top-level key but the plan sections, callbacks and paths."""
    data = {key: value for key, value in source.data.items() if key not in _IGNORED}
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:20]


def cache_dir() -> Path:
    root = os.environ.get("MF_MEMOPT_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "mf_memopt"


def cache_path(source: Source, directory: Path | None = None) -> Path:
    return (directory or cache_dir()) / "auto_times" / f"{shape_key(source)}.json"


def load_table(source: Source, directory: Path | None = None) -> TimeTable | None:
    """The cached profile of this model shape, or None (a missing, unreadable or foreign file counts as none)."""
    path = cache_path(source, directory)
    if not path.is_file():
        return None
    try:
        data = json.loads(read_bytes(path).decode("utf-8"))
        table = TimeTable.from_dict(data)
    except Exception:   # a broken cache is re-measured, never trusted
        return None
    if data.get("version") != VERSION or table.key != shape_key(source):
        return None
    return table


def save_table(table: TimeTable, source: Source, directory: Path | None = None) -> Path:
    path = cache_path(source, directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(table.to_dict(), indent=1), encoding="utf-8")
    return path


def load_average() -> str:
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        return "load average unknown"
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f} on {os.cpu_count()} CPUs"


def train_run(config: Path, work: Path, steps: int = STEPS, timeout: float | None = 1800) -> Trained:
    """Train `config` with the launcher in a child process (the package's one child runner), through `stepclock`,
    which times each step: its pool peak and the steps after the first `WARMUP`. The dataset is read again as
    often as `steps` needs (`--epochs`)."""
    work.mkdir(parents=True, exist_ok=True)
    try:
        # trained in this child itself (the launcher's supervised child), where the step callback runs
        done = train(config, steps=steps, work=work, dataset=yaml_dataset(config, work / "output"), timeout=timeout,
                     entry=[sys.executable, "-m", "mf_memopt.auto.stepclock"], env={"MF_MEMOPT_SUPERVISED": "1"},
                     extra=["--epochs", str(EPOCHS)])
    except ChildFailed as error:
        raise MeasureError(str(error)) from error
    if done.peak_bytes is None:
        raise MeasureError(f"training {config.name} printed no memory-pool peak (DumpDynamicMemPoolStateInfo)")
    wall, cpu = _step_times(done.log)
    return Trained(peak_bytes=done.peak_bytes, step_s=wall, cpu_s=cpu)


def _step_times(stdout: str, warmup: int = WARMUP) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(wall, cpu) seconds of each step after the first `warmup`, from `stepclock`'s lines (a run too short to
    have any: its steps after the first)."""
    steps = {int(number): (float(wall) / 1e3, float(cpu) / 1e3) for number, wall, cpu in STEP_LINE.findall(stdout)}
    if not steps:
        raise MeasureError("the training run printed no step times (mf_memopt.auto.stepclock)")
    ordered = sorted(steps.items())
    later = ([value for number, value in ordered if number > warmup]
             or [value for number, value in ordered if number > 1] or [value for _, value in ordered])
    return tuple(wall for wall, _ in later), tuple(cpu for _, cpu in later)


def profile(source: Source, layers: int, uniform: Callable[[Choice], str], choices: Sequence[Choice], *,
            runs: int = RUNS, steps: int = STEPS, train: Callable[[Path, Path, int], Trained] = train_run,
            report: Callable[[str], None] = lambda line: None) -> TimeTable:
    """Measure every choice's added time (see the module's docstring); `uniform(choice)` is the YAML text with
    every layer given `choice`."""
    names = sorted({choice.name for choice in choices} | {"keep"})
    by_name = {choice.name: choice for choice in choices} | {"keep": Choice()}
    samples: dict[str, list[float]] = {name: [] for name in names}      # each run's step time
    loads = [load_average()]
    with tempfile.TemporaryDirectory(prefix="mf_memopt_profile_") as tmp:
        for repeat in range(runs):
            for name in names:
                work = Path(tmp) / f"{_slug(name)}_{repeat}"
                work.mkdir()
                config = work / "config.yaml"
                config.write_text(uniform(by_name[name]), encoding="utf-8")
                began = time.perf_counter()
                trained = train(config, work, steps)
                samples[name].append(trained.time_s)
                report(f"profile: every layer {name}: step {trained.time_s * 1e3:.0f} ms "
                       f"({time.perf_counter() - began:.0f} s run)")
            loads.append(load_average())
    base = min(samples["keep"])
    measured = {name: max(0.0, min(values) - base) / layers for name, values in samples.items()}
    added = monotone(measured, by_name)
    noise = statistics.median(max(values) - min(values) for values in samples.values()) / layers
    return TimeTable(key=shape_key(source), layers=layers, base_s=base, added_s=added, samples=samples,
                     noise_s=noise,
                     source=f"step-time profile measured here (every layer given each choice, {runs} run(s) x "
                            f"{steps - WARMUP} timed steps, the fastest run's lower quartile of wall time; runs "
                            f"differ by {noise * 1e3:.1f} ms per layer)",
                     load="; ".join(loads))


def monotone(added: dict[str, float], choices: dict[str, Choice]) -> dict[str, float]:
    """A recompute of more cells costs at least what each of its cells costs (both cells at least each one alone):
    noise can measure the larger one as cheaper, and it then takes the larger of its cells' times. Full recompute
    is not held to this: it runs as one recomputed segment per layer, and it measured faster than recomputing both
    cells (by 6% on a 4-layer Llama without flash attention, each plan's faster of two runs compared)."""
    def contains(big: Choice, small: Choice) -> bool:
        return big == small or (not big.full and not small.full and set(small.select) <= set(big.select))

    return {name: max(added[other] for other in added if contains(choices[name], choices[other]))
            for name in added}


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")
