"""The launcher with a clock on each training step: `python -m mf_memopt.auto.stepclock LAUNCHER-ARGS...`.

It runs the project's launcher unchanged (`mf_memopt.runtime.launch.main`), and wraps its step callback so that
each step also prints `mf_memopt stepclock: step N wall_ms W cpu_ms C`: the wall time, and the CPU time the whole
process (every thread) spent in the step. `auto`'s time profile and `--measure` compare plans by the wall time
(`timing.Trained.time_s`); the CPU time is kept for the record only, as MindSpore's spinning threads make it about
twice the wall time and unsteady between runs.
"""

from __future__ import annotations

import sys
import time

PREFIX = "mf_memopt stepclock:"


def _clocked(make):
    def progress_callback(*args, **kwargs):
        inner = make(*args, **kwargs)
        begin, end = inner.on_train_step_begin, inner.on_train_step_end
        marks: dict[str, float] = {}

        def on_train_step_begin(run_context):
            marks["wall"], marks["cpu"] = time.perf_counter(), time.process_time()
            return begin(run_context)

        def on_train_step_end(run_context):
            wall, cpu = time.perf_counter() - marks["wall"], time.process_time() - marks["cpu"]
            step = int(run_context.original_args().cur_step_num)
            print(f"{PREFIX} step {step} wall_ms {wall * 1e3:.2f} cpu_ms {cpu * 1e3:.2f}", flush=True)
            return end(run_context)

        inner.on_train_step_begin, inner.on_train_step_end = on_train_step_begin, on_train_step_end
        return inner
    return progress_callback


def main() -> int:
    from ..runtime import launch, train

    train.progress_callback = _clocked(train.progress_callback)
    return launch.main()


if __name__ == "__main__":
    sys.exit(main())
