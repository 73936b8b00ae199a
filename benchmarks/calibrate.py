"""(c) The estimator against the memory-pool peak it can be checked with here.

For the shipped tiny config and the medium config, each recompute variant of `memory.py`
(and full recompute of only the first two layers) is trained for two steps by the real launcher, and its MindSpore memory-pool peak is
compared with `mf_memopt estimate --runtime cpu` of the same YAML. Target: within 10% on
every case. The pool prints whole MiB (cut down); errors are against the middle of that MiB.

It also times `estimate` (the ascend runtime, with its chart) on every shipped config:
the target is under a second each.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from benchmarks.common import load_note, print_table
from benchmarks.memory import REPO, VARIANTS, _launch, _slug, parse_log, write_variant

CONFIGS = (REPO / "configs" / "llama_tiny.yaml", REPO / "benchmarks" / "llama_medium.yaml")
CASES = {**VARIANTS, "full recompute, first 2 layers": {"recompute": [2], "select_recompute": False,
                                                        "select_comm_recompute": False}}
STEPS = 2
TARGET = 0.10


def run() -> None:
    load = load_note()
    rows, worst = [], 0.0
    with tempfile.TemporaryDirectory(prefix="mf_memopt_calibrate_") as tmp:
        for config in CONFIGS:
            for name, section in CASES.items():
                work = Path(tmp) / config.stem / _slug(name)
                work.mkdir(parents=True)
                row, error = _case(config, name, section, work)
                rows.append(row)
                worst = max(worst, abs(error))
    print_table(f"(c) estimated against measured memory-pool peak (MiB), {STEPS} training steps; {load}",
                ("config", "variant", "measured", "estimated", "error", "estimated peak at"), rows)
    verdict = "within" if worst <= TARGET else "NOT within"
    print(f"worst error {worst:.1%}: {verdict} the {TARGET:.0%} target")
    _time_estimates()


def _case(config: Path, name: str, section: dict, work: Path) -> tuple[list[str], float]:
    from benchmarks.sweep import relative_error
    from mf_memopt.estimate import estimate_config

    variant = write_variant(config, section, work / "config.yaml")
    measured = parse_log(name, _launch(variant, STEPS, work)).peak_mb
    stage = estimate_config(variant, runtime="cpu").stages[0]
    estimated = stage.peak.peak / 2**20
    error = relative_error(estimated, measured)
    return [config.name, name, str(measured), f"{estimated:.1f}", f"{error:+.1%}", stage.peak.checkpoint], error


def _time_estimates() -> None:
    from mf_memopt.estimate import estimate_config
    from mf_memopt.estimate.report import estimate_text, write_chart

    rows = []
    with tempfile.TemporaryDirectory(prefix="mf_memopt_estimate_") as tmp:
        for config in sorted((REPO / "configs").rglob("*.yaml")):
            began = time.perf_counter()
            result = estimate_config(config)
            estimate_text(result)
            write_chart(result, Path(tmp) / f"{config.stem}.png")
            rows.append([str(config.relative_to(REPO)), f"{(time.perf_counter() - began) * 1e3:.0f}"])
    print_table("estimate (ascend runtime, text and chart) per shipped config, ms in-process",
                ("config", "ms"), rows)
