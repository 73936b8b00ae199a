"""`auto --balance` on the pipeline YAMLs the mindformers wheel ships, and the planner's properties at every budget.

1. **Written against balanced.** For Qwen3 32B, TeleChat3 36B, DeepSeek-V3 671B and DeepSeek-V3 12B, with the
   YAML's own `context.max_device_memory` as the budget (ascend runtime, the estimator's defaults: 150 TFLOPS,
   25 GB/s): each stage's layers, predicted peak and time per step as written and balanced, the predicted step time
   of each and their ratio, and the planning wall time (target: under 5 s each). When no layout fits the YAML's
   budget, the smallest budget that works is printed and the balance is made for it (marked `*`). The written plan
   is priced by the same model (the estimator's stage times, the output heads added to the last stage).
2. **Properties** (`planner_properties.py`): each shipped YAML swept every `--step` GiB from the smaller named
   minimum to 5% past its no-recompute peak, and `--layouts` random Llama pipeline layouts (seed `--seed`) swept at
   `--points` budgets each: `auto` and `--balance` plan exactly at and above their named minimum, every plan within
   its budget, never slower for a larger budget, and `--balance` plans the layout as written as `auto` does.
3. **Host memory.** Qwen3 32B at 44 GiB with `--host-memory 4GiB`: `auto` (target under 5 s) and `auto --balance`
   (under 10 s).
4. **Compression** (`--codec-gbps`). The shipped YAMLs run mcore models under model_parallel > 1, where compression
   is refused, so: `configs/planning/llama2_7b_swap_pp2.yaml` (tp 1), 2 GiB of host memory, budgets 22-36 GiB: the
   balanced step with each codec figure (one GB/s for int8 and lossless) over the step without compression, and the
   layers compressed per stage; then the properties of 2. on the random layouts' first `--codec-layouts` with a
   100 GB/s codec. The figures are assumed (no device here measures a codec), so the table reads as: at what codec
   throughput would compression pay on this config.

    python benchmarks/balance.py [--step 0.1] [--layouts 50] [--points 12] [--seed 20261128] [--codec-layouts 10]
        [--quick]
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.common import load_note, print_table  # noqa: E402
from benchmarks.planner_properties import random_layout, sweep  # noqa: E402
from mf_memopt.auto import InfeasibleBudget, auto_plan  # noqa: E402
from mf_memopt.auto.balance import balance_plan  # noqa: E402
from mf_memopt.estimate import Hardware  # noqa: E402
from mf_memopt.estimate.report import human  # noqa: E402

WHEEL = Path(importlib.util.find_spec("mindformers").origin).parents[1] / "configs"
SHIPPED = ("qwen3/pretrain_qwen3_32b_4k.yaml", "telechat3/pretrain_telechat3_36b.yaml",
           "deepseek3/pretrain_deepseek3_671b.yaml", "deepseek3/pretrain_deepseek3_12b_16p_pp16.yaml")
LIMIT_S = 5.0
GiB = 1 << 30


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--step", type=float, default=0.1, help="GiB between the shipped YAMLs' swept budgets")
    parser.add_argument("--layouts", type=int, default=50, help="random layouts to sweep")
    parser.add_argument("--points", type=int, default=12, help="budgets per random layout")
    parser.add_argument("--seed", type=int, default=20261128)
    parser.add_argument("--codec-layouts", type=int, default=10, help="random layouts swept with a codec")
    parser.add_argument("--quick", action="store_true", help="1 GiB steps, 5 layouts of 4 budgets (2 with a codec)")
    args = parser.parse_args()
    if args.quick:
        args.step, args.layouts, args.points, args.codec_layouts = 1.0, 5, 4, 2
    print(load_note())
    written_against_balanced()
    failures = shipped_properties(args.step) + random_properties(args.layouts, args.points, args.seed)
    host_memory()
    failures += compression(args.codec_layouts, args.points, args.seed)
    print(f"\nproperties: {'all held' if not failures else f'{len(failures)} FAILED'}")
    for line in failures:
        print(f"  {line}")
    return 1 if failures else 0


def written_against_balanced() -> None:
    summary = []
    for name in SHIPPED:
        path = WHEEL / name
        mark, started = "", time.perf_counter()
        try:
            result = balance_plan(path)         # the YAML's max_device_memory, as MindSpore sizes its pool
            budget = result.budget
        except InfeasibleBudget as error:
            print(f"\n{name}: infeasible at {human(error.budget)}; the smallest budget that works: "
                  f"{human(error.smallest)} (answered in {time.perf_counter() - started:.2f} s)")
            budget, mark = error.smallest, "*"
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


def shipped_properties(step: float) -> list[str]:
    rows, failures = [], []
    for name in SHIPPED:
        path, started = WHEEL / name, time.perf_counter()
        first = sweep(path, budgets=[])           # the named minima
        low = min(first.auto_minimum, first.balance_minimum)
        top = max(stage.peak.peak for stage in auto_plan(path, budget=1 << 60).references["nothing"].stages)
        budgets = [low + round(index * step * GiB) for index in range(int((1.05 * top - low) / (step * GiB)) + 1)]
        report = sweep(path, budgets=[budget for budget in budgets if budget >= low])
        failures += [f"{name}: {line}" for line in first.failures + report.failures]
        rows.append([name, human(first.auto_minimum), human(first.balance_minimum), human(top), report.budgets,
                     len(first.failures) + len(report.failures), f"{time.perf_counter() - started:.0f}"])
    print_table(f"the shipped pipeline YAMLs swept every {step:g} GiB from the smaller named minimum to 5% past the "
                "no-recompute peak of the layout as written",
                ["config", "auto's minimum", "--balance's minimum", "no-recompute peak", "budgets",
                 "properties failed", "seconds"], rows)
    return failures


def random_properties(layouts: int, points: int, seed: int, hardware: Hardware | None = None) -> list[str]:
    rng, rows, failures = random.Random(seed), [], []
    with tempfile.TemporaryDirectory(prefix="mf_memopt_layouts_") as tmp:
        for index in range(layouts):
            path, started = random_layout(rng, Path(tmp), f"layout{index}"), time.perf_counter()
            report = sweep(path, steps=points - 1, hardware=hardware)
            failures += [f"random layout {index}: {line}" for line in report.failures]
            rows.append([index, _describe(path), human(report.auto_minimum), human(report.balance_minimum),
                         report.budgets, len(report.failures), f"{time.perf_counter() - started:.1f}"])
    codec = f", {hardware.codec_figures()}" if hardware and hardware.codec_gbps else ""
    print_table(f"{layouts} random Llama pipeline layouts (seed {seed}{codec}), {points} budgets each from the smaller "
                "named minimum to 5% past the no-recompute peak",
                ["layout", "layers / stages x chunks / micro-batches / tp / hidden / seq", "auto's minimum",
                 "--balance's minimum", "budgets", "properties failed", "seconds"], rows)
    return failures


def _describe(path: Path) -> str:
    from mf_memopt.config.load import load_document

    document = load_document(path)
    layout, data = document.planned().layout, document.source.data
    parallel, model = data["parallel_config"], data["model"]["model_config"]
    return (f"{layout.num_layers} / {layout.stages} x {layout.chunks} / {parallel['micro_batch_num']} / "
            f"{parallel['model_parallel']} / {model['hidden_size']} / {model['seq_length']}")


def host_memory() -> None:
    path, rows = WHEEL / SHIPPED[0], []
    for host in (2, 4):
        for name, plan in (("auto", lambda: auto_plan(path, budget=44 * GiB, host_budget=host * GiB)),
                           ("auto --balance", lambda: balance_plan(path, budget=44 * GiB, host_budget=host * GiB))):
            started = time.perf_counter()
            result = plan()
            seconds = time.perf_counter() - started
            limit = 5.0 if name == "auto" else 10.0
            cost = f"{result.priced_s * 1e3:.1f} ms added" if name == "auto" else f"step {result.balanced.step_s:.3f} s"
            rows.append([name, f"{host} GiB", cost, f"{seconds:.2f}", "yes" if seconds < limit else "NO"])
    print_table("Qwen3 32B at 44 GiB with a host-memory cap (the layer-by-layer search took 70 s at 2 GiB, 172 s at "
                "4 GiB, and over 300 s with --balance)", ["command", "--host-memory", "plan", "seconds", "in time"],
                rows)


def compression(layouts: int, points: int, seed: int) -> list[str]:
    path, rates, rows = REPO / "configs/planning/llama2_7b_swap_pp2.yaml", (10.0, 30.0, 100.0, 300.0), []
    for budget in range(22, 37, 2):
        plain = balance_plan(path, budget=budget * GiB, host_budget=2 * GiB)
        row: list = [f"{budget} GiB", f"{plain.balanced.step_s:.3f}"]
        for rate in rates:
            result = balance_plan(path, budget=budget * GiB, host_budget=2 * GiB,
                                  hardware=Hardware(codec_gbps=(("int8", rate), ("lossless", rate))))
            layers = [sum(1 for option in stage.options if option.choice.compress) for stage in result.plan.stages]
            row.append(f"{result.balanced.step_s / plain.balanced.step_s:.3f} ({'+'.join(map(str, layers))})")
        rows.append(row)
    print_table("llama2_7b_swap_pp2 (2 stages, 8 micro-batches, tp 1), 2 GiB host memory: --balance's step with a "
                "codec over its step without compression (layers compressed in stage 0 + stage 1)",
                ["budget", "step without (s)", *(f"{rate:g} GB/s" for rate in rates)], rows)
    return random_properties(layouts, points, seed, Hardware(codec_gbps=(("int8", 100.0), ("lossless", 100.0))))


if __name__ == "__main__":
    sys.exit(main())
