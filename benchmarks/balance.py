"""`auto --balance` on the pipeline YAMLs the mindformers wheel ships: the plan as written against the balanced plan.

For Qwen3 32B, TeleChat3 36B, DeepSeek-V3 671B and DeepSeek-V3 12B, with the YAML's own
`context.max_device_memory` as the budget (ascend runtime, the estimator's defaults: 150 TFLOPS, 25 GB/s): each
stage's layers, predicted peak and time per step as written and balanced, the predicted step time of each and their
ratio, and the planning wall time (target: under 5 s each). When no layout fits the YAML's budget, the smallest
budget that works is printed and the balance is made for it (marked `*`). The written plan is priced by the same
model (the estimator's stage times, the output heads added to the last stage), so the ratio compares like with like.

    python benchmarks/balance.py
"""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.common import load_note, print_table  # noqa: E402
from mf_memopt.auto import InfeasibleBudget  # noqa: E402
from mf_memopt.auto.balance import balance_plan  # noqa: E402
from mf_memopt.estimate.report import human  # noqa: E402

WHEEL = Path(importlib.util.find_spec("mindformers").origin).parents[1] / "configs"
SHIPPED = ("qwen3/pretrain_qwen3_32b_4k.yaml", "telechat3/pretrain_telechat3_36b.yaml",
           "deepseek3/pretrain_deepseek3_671b.yaml", "deepseek3/pretrain_deepseek3_12b_16p_pp16.yaml")
LIMIT_S = 5.0


def main() -> int:
    print(load_note())
    summary = []
    for name in SHIPPED:
        path = WHEEL / name
        mark, started = "", time.perf_counter()
        try:
            result = balance_plan(path)         # the YAML's max_device_memory, as MindSpore sizes its pool
            budget = result.budget
        except InfeasibleBudget as error:
            budget = error.budget
            smallest = error.smallest
            print(f"\n{name}: infeasible at {human(budget)}; the smallest budget that works: {human(smallest)} "
                  f"(answered in {time.perf_counter() - started:.2f} s)")
            budget, mark = smallest, "*"
            result = balance_plan(path, budget=budget)
        rows = [[old.stage, len(old.layers), human(old.peak), f"{old.seconds:.3f}", len(new.layers), human(new.peak),
                 f"{new.seconds:.3f}"] for old, new in zip(result.written.stages, result.balanced.stages)]
        print_table(f"{name}, budget {human(budget)}{mark}: offsets written {result.written.offsets}, balanced "
                    f"{result.balanced.offsets} ({result.plan.family})",
                    ["stage", "written layers", "peak", "time / step (s)", "balanced layers", "peak",
                     "time / step (s)"], rows)
        summary.append([name, human(budget) + mark, f"{result.written.step_s:.3f}", f"{result.balanced.step_s:.3f}",
                        f"{result.ratio:.3f}", f"{result.wall_s:.2f}", "yes" if result.wall_s < LIMIT_S else "NO"])
    print_table("predicted step time, written against balanced, and the planning wall time",
                ["config", "budget", "written step (s)", "balanced step (s)", "ratio", "planning (s)",
                 f"< {LIMIT_S:g} s"], summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
