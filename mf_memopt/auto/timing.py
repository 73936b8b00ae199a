"""What a recompute or compression choice costs in time, measured: the step-time profile `auto --runtime cpu` prices
plans with.

FLOPs say little about recompute time on CPU: the softmax, the norms, the casts and the attention-score tensors
are memory-bound and take far more time than their FLOPs say. So the cost of each choice is measured on the
config itself: races (`race.py`) train the config with every layer given each choice (keep, each cell, every
cell, full recompute, each compression offered) in one process, one step of each choice in turn, `race.STEPS`
steps each, at most `GROUP` plans a race with keep in every one. A choice's added time per layer and step is (its
step time over keep's - 1) x keep's step time / layers: the recompute, or the codec, as the runtime runs it, every
operator included. `problem.py` prices a plan as the sum of its
layers' added times.

The clock: a step's wall time after the first `race.WARMUP` steps (the compile; on CPU the next four steps run
30-50% slower while the process settles). A choice's time over keep's is the median over the steps of its step
over keep's step of the same batch (`race.paired_ratio`), keep's step time the lower quartile of its steps. The
steps' CPU time is not used: MindSpore's CPU threads spin while they wait, so a step's CPU time is about twice its
wall time on two cores and varies by 30% between runs of one plan. Plans are raced in one process because runs in
separate processes differ by up to 37% (a run can land in a slow stretch longer than itself); in a race a slow
stretch slows both steps of a pair alike. With `runs` races, a choice's ratio is the median over the races.

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
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..document.reading import read_bytes
from ..document.source import Source
from . import race as racing
from .choices import Choice

RUNS = 1                    # races per profile (a plan measured within 2.2% of its mean over three races)
VERSION = 6                 # 6: compression choices, races of at most GROUP plans (5: steps paired with keep's)
GROUP = 6                   # plans per race, keep included: a race holds every plan's compiled step at once
_IGNORED = ("recompute_config", "swap_config", "callbacks", "output_dir", "load_checkpoint", "src_strategy_path_or_dir",
            "train_dataset", "train_dataset_task", "generated_dataset", "eval_dataset", "eval_dataset_task")


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
    codec: str = ""                         # the codec that ran the compression choices ("fused", "reference")

    def seconds(self, choice: Choice) -> float:
        if choice.name not in self.added_s:
            raise ValueError(f"the time profile ({self.source}) has no entry for '{choice.name}': measure it again "
                             f"(auto --profile after deleting the cached file)")
        return self.added_s[choice.name]

    def to_dict(self) -> dict:
        return {"version": VERSION, "key": self.key, "layers": self.layers, "base_s": self.base_s,
                "added_s": self.added_s, "samples": self.samples, "source": self.source, "load": self.load,
                "noise_s": self.noise_s, "codec": self.codec}

    @classmethod
    def from_dict(cls, data: dict) -> TimeTable:
        return cls(key=str(data["key"]), layers=int(data["layers"]), base_s=float(data["base_s"]),
                   added_s={str(k): float(v) for k, v in data["added_s"].items()},
                   samples={str(k): [float(x) for x in v] for k, v in data.get("samples", {}).items()},
                   source=str(data.get("source", "")), load=str(data.get("load", "")),
                   noise_s=float(data.get("noise_s", 0.0)), codec=str(data.get("codec", "")))


def priced(choices: tuple[Choice, ...], times: TimeTable | None) -> tuple[Choice, ...]:
    """The choices the profile prices: a compression the profile was measured without is left out (a profile is
    measured for the methods asked; `space.cached_or_profiled`)."""
    if times is None:
        return choices
    return tuple(choice for choice in choices if not choice.compress or choice.name in times.added_s)


def codec_now() -> str:
    """The codec a compression choice runs with in this process's environment (`compress.choice.choose_codec`: the
    fused kernels and the graph-operator reference differ by about a quarter of a step here), or "unavailable"."""
    from ..compress.choice import choose_codec

    try:
        return choose_codec("CPU").name
    except (ValueError, OSError):
        return "unavailable"


def without_other_codec(table: TimeTable, codec: str) -> TimeTable:
    """The table, its compression times dropped when another codec than `codec` measured them."""
    if table.codec in ("", codec):
        return table
    return replace(table, added_s={name: value for name, value in table.added_s.items() if "compress " not in name})


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


def profile(source: Source, layers: int, uniform: Callable[[Choice], str], choices: Sequence[Choice], *,
            runs: int = RUNS, steps: int = racing.STEPS, race: Callable[..., list[tuple[float, ...]]] = racing.race,
            report: Callable[[str], None] = lambda line: None) -> TimeTable:
    """Measure every choice's added time (see the module's docstring); `uniform(choice)` is the YAML text with
    every layer given `choice`; `race(configs, work, steps)` gives each config's timed step seconds."""
    names = sorted({choice.name for choice in choices} | {"keep"})
    by_name = {choice.name: choice for choice in choices} | {"keep": Choice()}
    samples: dict[str, list[float]] = {name: [] for name in names}      # each race's step time
    ratios: dict[str, list[float]] = {name: [] for name in names}       # each race's step time over keep's
    loads = [load_average()]
    others = [name for name in names if name != "keep"]
    groups = [["keep", *others[start:start + GROUP - 1]] for start in range(0, len(others), GROUP - 1)] or [["keep"]]
    with tempfile.TemporaryDirectory(prefix="mf_memopt_profile_") as tmp:
        configs = {}
        for name in names:
            configs[name] = Path(tmp) / f"{_slug(name)}.yaml"
            configs[name].write_text(uniform(by_name[name]), encoding="utf-8")
        for repeat in range(runs):
            waiting, number = list(groups), 0
            while waiting:
                group = waiting.pop(0)
                began, number = time.perf_counter(), number + 1
                try:
                    timed = race([configs[name] for name in group], Path(tmp) / f"race{repeat}_{number}", steps)
                except racing.RaceKilled:
                    if len(group) <= 2:
                        raise
                    size = (len(group) + 2) // 2            # keep and half the others
                    report(f"profile: a race of {len(group)} plans was killed (out of memory?): racing at most "
                           f"{size} plans a race from here, keep in each")
                    waiting = _chunks([group, *waiting], size)
                    groups = _chunks(groups, size)
                    continue
                for name, seconds in zip(group, timed):
                    samples[name].append(racing.lower_quartile(seconds))
                    ratios[name].append(racing.paired_ratio(seconds, timed[0]))
                report(f"profile: race {number}, run {repeat + 1}/{runs} ({time.perf_counter() - began:.0f} s), "
                       "every layer given: " + ", ".join(f"{name} {samples[name][-1] * 1e3:.0f} ms" for name in group))
                loads.append(load_average())
    base = statistics.median(samples["keep"])
    measured = {name: max(0.0, statistics.median(values) - 1.0) * base / layers for name, values in ratios.items()}
    added = monotone(measured, by_name)
    noise = statistics.median(max(values) - min(values) for values in ratios.values()) * base / layers
    return TimeTable(key=shape_key(source), layers=layers, base_s=base, added_s=added, samples=samples, noise_s=noise,
                     source=f"step-time profile measured here (every layer given each choice, raced in one process "
                            f"{runs} time(s) in {len(groups)} race(s) of at most {max(map(len, groups))} plans "
                            "with keep, "
                            f"{steps - racing.WARMUP} timed steps each, each step paired with keep's step of the same "
                            f"batch; races differ by {noise * 1e3:.1f} ms per layer)",
                     load="; ".join(loads))


def _chunks(groups: list[list[str]], size: int) -> list[list[str]]:
    """Races (keep first in each) of at most `size` plans, keep in each, the others in their order."""
    return [["keep", *group[1:][start:start + size - 1]] for group in groups
            for start in range(0, max(len(group) - 1, 1), size - 1)]


def monotone(added: dict[str, float], choices: dict[str, Choice]) -> dict[str, float]:
    """A recompute of more cells costs at least what each of its cells costs (both cells at least each one alone):
    noise can measure the larger one as cheaper, and it then takes the larger of its cells' times. Full recompute
    is not held to this: it runs as one recomputed segment per layer, and it measured faster than recomputing both
    cells (by 6% on a 4-layer Llama without flash attention, each plan's faster of two runs compared). A choice that
    also compresses contains the one without."""
    def contains(big: Choice, small: Choice) -> bool:
        return big == small or (not big.full and not small.full and set(small.select) <= set(big.select)
                                and set(small.compress) <= set(big.compress))

    return {name: max(added[other] for other in added if contains(choices[name], choices[other]))
            for name in added}


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")
