#!/usr/bin/env python
"""Run mf_memopt's benchmarks and print their tables (see benchmarks/README.md).

    python benchmarks/run.py                          # (a) apply time and (b) memory
    python benchmarks/run.py --only apply --repeat 9
    python benchmarks/run.py --only memory --steps 10 --config benchmarks/llama_medium.yaml
    python benchmarks/run.py --only apply --profile   # cProfile of mf_memopt's apply_plan
    python benchmarks/run.py --only calibrate         # (c) estimated against measured memory-pool peak
    python benchmarks/run.py --only auto              # auto: planning time, 7B table, measured CPU plans
    python benchmarks/run.py --only sweep [--remeasure]  # (e) the estimator on the generated sweep
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    _prepare_environment()
    from benchmarks import apply_time, auto_plan, calibrate, memory, sweep, wrapper_branch

    if args.profile:
        apply_time.profile_ours()
        return 0
    if args.only in (None, "apply"):
        apply_time.run(args.repeat)
    if args.only in (None, "memory"):
        memory.run(args.config or memory.DEFAULT_CONFIG, args.steps)
    if args.only in (None, "calibrate"):
        calibrate.run()
    if args.only in (None, "wrapper"):
        wrapper_branch.run(args.config or memory.DEFAULT_CONFIG)
    if args.only in (None, "auto"):
        auto_plan.run()
    if args.only == "sweep":
        sweep.compare(remeasure=args.remeasure)
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="mf_memopt benchmarks: (a) apply time against MindFormers' "
                                     "LayerSetting, (b) memory-pool peak and step time per recompute variant, "
                                     "(c) the memory estimator against the measured peaks, (e) the estimator on "
                                     "a generated sweep, (f) recompute under MindFormers' train-step cell with and "
                                     "without its optimizer branch, auto: the planner")
    parser.add_argument("--only", choices=("apply", "memory", "calibrate", "wrapper", "auto", "sweep"),
                        help="run one of the benchmarks (sweep runs only when named)")
    parser.add_argument("--remeasure", action="store_true",
                        help="(e) train every sweep config again (about 15 minutes) before comparing")
    parser.add_argument("--repeat", type=_positive, default=7, help="(a) timed runs per config (default 7)")
    parser.add_argument("--steps", type=_positive, default=10,
                        help="(b) training steps per variant (default 10)")
    parser.add_argument("--config", type=Path, help="(b), (e) training YAML (default configs/llama_tiny.yaml)")
    parser.add_argument("--profile", action="store_true",
                        help="(a) print a cProfile of mf_memopt's apply_plan per config, no timings")
    return parser


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text}")
    return value


def _prepare_environment() -> None:
    """Import from this checkout, keep MindSpore quiet, keep MindFormers' log files out of the cwd."""
    here = REPO / "benchmarks"
    sys.path[:] = [str(REPO)] + [entry for entry in sys.path if Path(entry or ".").resolve() != here]
    os.environ.setdefault("GLOG_v", "3")
    if "LOG_MF_PATH" not in os.environ:
        log_dir = tempfile.mkdtemp(prefix="mf_memopt_bench_mflog_")
        atexit.register(shutil.rmtree, log_dir, ignore_errors=True)
        os.environ["LOG_MF_PATH"] = log_dir


if __name__ == "__main__":
    sys.exit(main())
