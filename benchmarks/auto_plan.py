"""`auto`: (a) planning time, (b) the 7B planning table, (c) written plans trained and measured on CPU.

(a) Planning time of a synthetic 128-layer Llama (pp 8, interleave 2, every choice on:
    keep / recompute feed_forward, attention, both / full recompute / layer swap / op swap of
    attention or feed_forward / recompute one cell and swap the other), at three budgets;
    target under a second each, median of `REPEAT` runs.
(b) On configs/planning/llama2_7b_swap_pp2.yaml: budget -> plan summary -> predicted
    overhead, against "nothing" and "full recompute everywhere".
(c) On float32 CPU configs, three budgets between the estimated full-recompute and
    no-recompute peaks: `auto --runtime cpu` writes the plan, the real launcher trains it
    (`STEPS` steps, its own process), and its MindSpore memory-pool peak is compared with the
    budget, and its step time (median of the steps after the first) with full recompute's (trained the same way). Baseline: full
    recompute of every layer, the plan a user without `auto` writes to be safe.
"""

from __future__ import annotations

import re
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.common import load_note, print_table, ratio
from benchmarks.memory import PEAK, REPO, _launch

REPEAT = 5
STEPS = 4
PER_STEP = re.compile(r"per_step_time: (\d+)ms")
CPU_CONFIGS = (REPO / "configs" / "llama_tiny.yaml", REPO / "benchmarks" / "llama_medium.yaml")
PLANNING_7B = REPO / "configs" / "planning" / "llama2_7b_swap_pp2.yaml"
MiB, GiB = 2**20, 2**30


def run() -> None:
    planning_time()
    table_7b()
    measured()


def _large_config(work: Path) -> Path:
    """Llama2-7B shapes with 128 layers over 8 stages x 2 interleave chunks, nothing recomputed."""
    text = PLANNING_7B.read_text()
    text = text.replace("num_layers: 32", "num_layers: 128").replace("pipeline_stage: 2", "pipeline_stage: 8")
    text = text.replace("micro_batch_num: 8", "micro_batch_num: 16")
    text = text.replace("    offset: 0\n", "    offset: 0\n    pp_interleave_num: 2\n")
    text = text.replace("parallel:\n", "parallel:\n  pipeline_config:\n    pipeline_interleave: true\n", 1)
    plain = "recompute_config:\n  recompute: False\n\nswap_config:\n  swap: False\n"
    text = text[:text.index("recompute_config:")] + plain
    path = work / "llama_128l_pp8_vpp2.yaml"
    path.write_text(text)
    return path


def planning_time() -> None:
    from mf_memopt.auto import auto_plan, choice_set
    from mf_memopt.models.llama import LLAMA

    load = load_note()
    rows = []
    with tempfile.TemporaryDirectory(prefix="mf_memopt_auto_") as tmp:
        config = _large_config(Path(tmp))
        choices = choice_set(LLAMA.auto_cells, swap=True)
        references = auto_plan(config, budget=1 << 50, choices=choices).references
        low = max(stage.peak.peak for stage in references["full recompute"].stages)
        high = max(stage.peak.peak for stage in references["nothing"].stages)
        for share in (0.25, 0.5, 0.75):
            budget = int(low + share * (high - low))
            cpu, wall, result = [], [], None
            for _ in range(REPEAT):
                began, began_cpu = time.perf_counter(), time.process_time()
                result = auto_plan(config, budget=budget, choices=choices)
                cpu.append(time.process_time() - began_cpu)
                wall.append(time.perf_counter() - began)
            assert result is not None
            overhead = max(stage.overhead for stage in result.estimate.stages)
            rows.append([f"{budget / GiB:.1f} GiB", f"{len(choices)}", result.family, f"{overhead:.1%}",
                         f"{statistics.median(cpu) * 1e3:.0f} ms", f"{statistics.median(wall) * 1e3:.0f} ms",
                         "yes" if max(cpu) < 1 else "NO"])
    print_table(f"(a) auto planning time: 128 layers, pp 8, interleave 2 (16 layers per stage), every choice on; "
                f"median of {REPEAT}, including the estimates of the plan and of both reference plans. The planner "
                f"is one single-threaded process: its CPU time is its time on a free core; the wall time depends "
                f"on the machine's load ({load})",
                ("budget", "choices", "written as", "worst stage overhead", "CPU time", "wall time", "< 1 s"), rows)


def table_7b() -> None:
    from mf_memopt.auto import InfeasibleBudget, auto_plan
    from mf_memopt.auto.writer import describe

    rows = []
    for budget_gib in (64, 44, 40, 36, 32, 30, 28, 27.5, 27):
        budget = int(budget_gib * GiB)
        try:
            result = auto_plan(PLANNING_7B, budget=budget)
        except InfeasibleBudget as error:
            rows.append([f"{budget_gib:g} GiB", "infeasible: at least "
                         f"{max(error.minimum.values()) / GiB:.2f} GiB (stage {error.binding})", "-", "-", "-", "-"])
            continue
        full = result.references["full recompute"]
        for plan, stage, every in zip(result.stages, result.estimate.stages, full.stages):
            summary = describe(plan.layers, [option.choice for option in plan.options],
                               [option.prefetch for option in plan.options])
            rows.append([f"{budget_gib:g} GiB" if stage.stage == 0 else "", str(stage.stage),
                         f"{stage.peak.peak / GiB:.1f} GiB", summary, f"{stage.overhead:.1%}",
                         f"{every.overhead:.1%} ({every.peak.peak / GiB:.1f} GiB)"])
    print_table(f"(b) auto on {PLANNING_7B.relative_to(REPO)} (ascend runtime, 150 TFLOPS, 25 GB/s host link): "
                "predicted overhead = (recompute + swap stalls) / compute",
                ("budget", "stage", "predicted peak", "plan", "overhead", "full recompute: overhead (peak)"), rows)


def measured(configs: tuple[Path, ...] = CPU_CONFIGS) -> None:
    """Budgets between the measured full-recompute and no-recompute pool peaks; plans made with --measure."""
    from mf_memopt.auto import auto_plan
    from mf_memopt.auto.choices import KEEP, Choice
    from mf_memopt.auto.measure import measure_rounds

    load = load_note()
    rows, verdicts = [], []
    with tempfile.TemporaryDirectory(prefix="mf_memopt_auto_measure_") as tmp:
        for config in configs:
            work = Path(tmp) / config.stem
            probe = auto_plan(config, budget=1 << 40, runtime="cpu")
            full_peak, full_ms = _train(_uniform(config, probe, Choice(full=True)), work / "full")
            none_peak, none_ms = _train(_uniform(config, probe, KEEP), work / "none")
            for name, peak, step_ms, reference in (("full recompute (baseline)", full_peak, full_ms, "full recompute"),
                                                   ("nothing", none_peak, none_ms, "nothing")):
                predicted = probe.references[reference].stages[0].peak.peak / MiB
                _row(rows, [config.name, name, "-", "-", f"{predicted:.1f}", str(peak), "-",
                            "100%" if reference == "full recompute" else "0%", _ms(step_ms), _vs(step_ms, full_ms)])
            for share in (0.25, 0.5, 0.75):
                budget = int((full_peak + share * (none_peak - full_peak)) * MiB)
                runs: list[tuple[int, float | None]] = []

                def train(path: Path, run: Path) -> int:
                    runs.append(_train(path.read_text(), run))
                    return runs[-1][0] * MiB

                rounds = measure_rounds(lambda target: auto_plan(config, budget=target, runtime="cpu", margin=0.0), budget, None,
                                        report=lambda line: print(f"  {config.name}: {line}", flush=True),
                                        train=train)
                plan = rounds[-1].plan
                peak, step_ms = runs[-1]
                stage = plan.estimate.stages[0]
                full_s = plan.references["full recompute"].stages[0].recompute_s
                within = peak * MiB <= budget
                verdicts.append(within and stage.recompute_s < full_s)
                _row(rows, [config.name, _summary(plan), f"{budget / MiB:.0f}", str(len(rounds)),
                            f"{stage.peak.peak / MiB:.1f}", str(peak), "yes" if within else "NO",
                            f"{stage.recompute_s / full_s:.0%}", _ms(step_ms), _vs(step_ms, full_ms)])
    print_table(f"(c) auto --runtime cpu --measure: budgets a quarter, half and three quarters of the way from the "
                f"measured full-recompute to the no-recompute pool peak; the written plan trained by the launcher "
                f"({STEPS} steps; step time: MindFormers' per_step_time, median of steps 2-{STEPS}); pool peaks in MiB; "
                f"{load}",
                ("config", "plan", "budget", "rounds", "predicted", "measured", "within",
                 "recompute FLOPs vs full", "step ms", "vs full"), rows)
    print(f"every plan within its budget and recomputing less than full recompute: "
          f"{'yes' if all(verdicts) else 'NO'}")


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f}"


def _vs(value: float | None, baseline: float | None) -> str:
    return "n/a" if value is None or baseline is None else ratio(value, baseline)


def _row(rows: list, row: list) -> None:
    rows.append(row)
    print("  row: " + " | ".join(row), flush=True)


def _uniform(config: Path, plan, choice) -> str:
    from mf_memopt.auto.context import PlanContext
    from mf_memopt.document.source import parse_yaml

    text = config.read_text()
    context = PlanContext.read(parse_yaml(text, str(config)), "cpu", plan.estimate.hardware, text, str(config))
    return context.text_of(context.uniform(choice))


def _summary(plan) -> str:
    from mf_memopt.auto.writer import describe

    stage = plan.stages[0]
    return describe(stage.layers, [option.choice for option in stage.options], [None] * len(stage.options))


def _train(text: str, work: Path) -> tuple[int, float | None]:
    """Train the YAML text with the launcher in its own process: (pool peak MiB, median step ms after the first).

    The step time is MindFormers' own (`per_step_time` of its loss monitor, in its log files under
    `work`); None if the config has no loss monitor.
    """
    work.mkdir(parents=True, exist_ok=True)
    config = work / "config.yaml"
    config.write_text(text)
    log = _launch(config, STEPS, work)
    peaks = PEAK.findall(log)
    if not peaks:
        raise RuntimeError(f"{config}: no memory-pool peak in the launcher's output")
    times = [float(value) for path in sorted(work.rglob("*.log"))
             for value in PER_STEP.findall(path.read_text(errors="replace"))]
    return int(peaks[-1]), statistics.median(times[1:]) if len(times) > 1 else None
