"""(b) Memory-pool peak and step time of one model under four recompute settings.

Each variant is a copy of the training YAML in which only `recompute_config` differs
(its keys recompute, select_recompute and select_comm_recompute are replaced). Each one
is trained by the real launcher, `run_mindformer_memopt.py`, in its own process, so the
pool peak that MindSpore prints at exit belongs to that variant alone. Baseline: the
variant without recompute. On CPU the pool peak, not the process RSS, shows the savings
(see SPEC.md, "Peak memory on CPU").
"""

from __future__ import annotations

import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from benchmarks.common import load_note, print_table, ratio
from mf_memopt.runs.measure import CPU_PEAK
from mf_memopt.runs.runner import ChildFailed, train

REPO = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = REPO / "configs" / "llama_tiny.yaml"
BASELINE = "no recompute"
VARIANTS: dict[str, dict[str, Any]] = {
    BASELINE: {"recompute": False, "select_recompute": False, "select_comm_recompute": False},
    "full recompute (every layer)": {"recompute": True, "select_recompute": False,
                                     "select_comm_recompute": False},
    "select feed_forward cell": {"recompute": False, "select_recompute": {"feed_forward": True},
                                 "select_comm_recompute": False},
    "select default patterns": {"recompute": False, "select_recompute": True, "select_comm_recompute": False},
}
PEAK = CPU_PEAK  # MindSpore's memory-pool report, as `estimate --measure` reads it
# MindFormers' MFLossMonitor: "{ Epoch:[  1/  1], step:[    2/   16], loss:[5.561511/5.558865], per_step_time: 215ms"
STEP = re.compile(r"step:\[\s*\d+/\s*\d+\], loss:\[([\d.]+)/[\d.]+\], per_step_time: (\d+)ms")


@dataclass(frozen=True)
class Result:
    variant: str
    peak_mb: int
    step_ms: float
    losses: tuple[str, ...]        # as logged by MFLossMonitor (6 decimals), one per step


def run(config: Path, steps: int) -> None:
    """Train every variant of `config` for `steps` steps and print the table."""
    load = load_note()
    with tempfile.TemporaryDirectory(prefix="mf_memopt_bench_") as tmp:
        work = Path(tmp)
        results = [train_variant(config, name, section, steps, work / _slug(name))
                   for name, section in VARIANTS.items()]
    print_table(f"(b) memory-pool peak and step time, {config.name}, {steps} steps "
                f"(step time: mean after the first step); {load}",
                ("variant", "peak MB", "vs none", "mean step ms", "vs none", "final loss"), _rows(results))
    same = len({result.losses for result in results}) == 1
    print(f"losses identical across variants (every step, 6 decimals): {'yes' if same else 'NO'}")
    if not same:
        for result in results:
            print(f"  {result.variant}: {', '.join(result.losses)}")


def _rows(results: list[Result]) -> list[list[str]]:
    base = next(result for result in results if result.variant == BASELINE)
    return [[result.variant, str(result.peak_mb), ratio(result.peak_mb, base.peak_mb),
             f"{result.step_ms:.1f}", ratio(result.step_ms, base.step_ms), result.losses[-1]]
            for result in results]


def train_variant(config: Path, name: str, section: dict[str, Any], steps: int, work: Path) -> Result:
    """Write the variant's YAML, train it in a subprocess, parse its log."""
    work.mkdir(parents=True)
    variant = write_variant(config, section, work / "config.yaml")
    print(f"training variant '{name}' ({steps} steps) ...", file=sys.stderr, flush=True)
    log = _launch(variant, steps, work)
    return parse_log(name, log)


def write_variant(config: Path, section: dict[str, Any], target: Path) -> Path:
    document = yaml.safe_load(config.read_text())
    document["recompute_config"] = {**(document.get("recompute_config") or {}), **section}
    target.write_text(yaml.safe_dump(document, sort_keys=False))
    return target


def _launch(config: Path, steps: int, work: Path, *extra: str) -> str:
    """Run the launcher with MindSpore's memory-pool report on (the package's one child runner); its whole output,
    or an error."""
    try:
        return train(config, steps=steps, work=work, dataset=work / "tokens.mindrecord",
                     extra=("--force", *extra), timeout=None).log
    except ChildFailed as error:
        raise RuntimeError(f"{config}: {error}") from error


def parse_log(name: str, log: str) -> Result:
    peaks, steps = PEAK.findall(log), STEP.findall(log)
    if not peaks or not steps:
        raise RuntimeError(f"variant '{name}': no pool peak or no MFLossMonitor step line in:\n{_tail(log)}")
    later = [float(milliseconds) for _, milliseconds in steps[1:]] or [float(steps[0][1])]
    return Result(variant=name, peak_mb=int(peaks[-1]), step_ms=sum(later) / len(later),
                  losses=tuple(loss for loss, _ in steps))


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.splitlines()[-lines:])


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")
