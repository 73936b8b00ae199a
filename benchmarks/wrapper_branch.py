"""(f) Why the launcher trains with CPUTrainOneStepCell: recompute under MindFormers' training step.

MindFormers' MFTrainOneStepCell runs the optimizer under `if not overflow:`, a branch on a
tensor. On the CPU backend that branch makes recompute save nothing, or worse: the pool peak
rises. This benchmark trains the same YAML with no recompute and with full recompute of every
layer under two train-step cells that differ only in that branch:

- "MindFormers (branch)": MFTrainOneStepCell with its overflow check moved to IsFinite (the
  minimum it needs to compile on CPU), `benchmarks/branching`;
- "mf_memopt (no branch)": CPUTrainOneStepCell, which the launcher uses on CPU: the same
  step with the gradients zeroed on overflow instead of a branch.

Each run is the real launcher in its own process; the number is MindSpore's memory-pool peak.
Baseline: no recompute under the same cell.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import yaml

from benchmarks.common import load_note, print_table, ratio
from benchmarks.memory import REPO, VARIANTS, _launch, _slug, parse_log

CELLS = {"MindFormers (branch)": "BranchingCPUTrainOneStepCell", "mf_memopt (no branch)": "MFTrainOneStepCell"}
RECOMPUTE = ("no recompute", "full recompute (every layer)", "select feed_forward cell")
STEPS = 2


def run(config: Path) -> None:
    load = load_note()
    rows = []
    with tempfile.TemporaryDirectory(prefix="mf_memopt_wrapper_") as tmp:
        for cell, wrapper in CELLS.items():
            peaks = {}
            for name in RECOMPUTE:
                work = Path(tmp) / _slug(cell) / _slug(name)
                work.mkdir(parents=True)
                variant = _variant(config, VARIANTS[name], wrapper, work / "config.yaml")
                print(f"training '{name}' under {cell} ({STEPS} steps) ...", file=sys.stderr, flush=True)
                log = _launch(variant, STEPS, work, "--register_path", str(REPO / "benchmarks" / "branching"))
                peaks[name] = parse_log(name, log).peak_mb
            base = peaks[RECOMPUTE[0]]
            rows.append([cell, *(f"{peaks[name]} ({ratio(peaks[name], base)})" for name in RECOMPUTE)])
    print_table(f"(f) memory-pool peak (MB) by train-step cell, {config.name}, {STEPS} steps; {load}",
                ("train-step cell", *RECOMPUTE), rows)


def _variant(config: Path, section: dict, wrapper: str, target: Path) -> Path:
    document = yaml.safe_load(config.read_text())
    document["recompute_config"] = {**(document.get("recompute_config") or {}), **section}
    document["runner_wrapper"]["type"] = wrapper
    target.write_text(yaml.safe_dump(document, sort_keys=False))
    return target
