"""What must hold of `auto` and `auto --balance` at every budget, checked on a config by sweeping its budget; and random
pipeline layouts to check it on. Used by `benchmarks/balance.py` (every shipped pipeline YAML, 50 random layouts, fine
sweeps) and by the tests (a few budgets of a few configs).

The properties, for the per-stage plan of the layout as written (`auto`) and for the balanced layout (`--balance`):

* **named minimum**: below 1 GiB nothing fits, and the error names the smallest budget; the planner plans at it, the
  plan's predicted peaks hold it, and one byte less is infeasible;
* **monotone**: a larger budget never gives a plan predicted slower (`auto`: the added time the search priced;
  `--balance`: the pipeline's predicted step time);
* **fits**: every plan's predicted peaks hold its budget;
* **agree**: where `--balance` keeps the layout as written, its plan is `auto`'s plan (the same peaks and times).

With `hardware` giving codec throughputs (`Hardware.codec_gbps`), compression is among the choices of both.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from pathlib import Path

from mf_memopt.auto import InfeasibleBudget, auto_plan
from mf_memopt.auto.balance import balance_plan
from mf_memopt.estimate import Hardware

GiB = 1 << 30
REPO = Path(__file__).resolve().parent.parent
BASE = REPO / "configs/planning/llama2_7b_swap_pp2.yaml"


@dataclass
class Report:
    """What a sweep found: the named minima, the budgets tried, and every property that failed (empty: all held)."""

    config: str
    auto_minimum: int = 0
    balance_minimum: int = 0
    budgets: int = 0
    failures: list[str] = field(default_factory=list)


def sweep(path: Path, budgets: list[int] | None = None, steps: int = 6, balance: bool = True,
          hardware: Hardware | None = None, host_budget: float = float("inf")) -> Report:
    """Check the properties on `path` at `budgets` (default: `steps` + 1 budgets from the smaller named minimum to
    5% above the written plan's no-recompute peak), with `hardware`'s figures and `host_budget` bytes of host
    memory per stage."""
    report = Report(config=path.name)
    planners = {"auto": lambda budget: auto_plan(path, budget=budget, hardware=hardware, host_budget=host_budget),
                "--balance": lambda budget: balance_plan(path, budget=budget, hardware=hardware,
                                                         host_budget=host_budget)}
    report.auto_minimum = _named(report, "auto", planners["auto"])
    if balance:
        report.balance_minimum = _named(report, "--balance", planners["--balance"])
    if budgets is None:
        top = max(stage.peak.peak for stage in auto_plan(path, budget=1 << 60).references["nothing"].stages)
        low = min(report.auto_minimum, report.balance_minimum or report.auto_minimum)
        high = round(top * 1.05)
        budgets = [low + (high - low) * index // steps for index in range(steps + 1)]
    previous: dict[str, float] = {}
    for budget in sorted(budgets):
        report.budgets += 1
        _at(report, planners, budget, balance, previous)
    return report


def _named(report: Report, name: str, plan) -> int:
    try:
        plan(GiB)
    except InfeasibleBudget as error:
        smallest = error.smallest
    else:
        report.failures.append(f"{name}: 1 GiB is not infeasible")
        return GiB
    try:
        result = plan(smallest)
    except InfeasibleBudget:
        report.failures.append(f"{name}: infeasible at its named minimum {smallest}")
    else:
        if _peak(result) > smallest:
            report.failures.append(f"{name}: the plan at the named minimum {smallest} peaks at {_peak(result)}")
    try:
        plan(smallest - 1)
        report.failures.append(f"{name}: plans one byte under its named minimum {smallest}")
    except InfeasibleBudget:
        pass
    return smallest


def _peak(result) -> int:
    if hasattr(result, "balanced"):
        return result.balanced.peak
    return max(stage.peak.peak for stage in result.estimate.stages)


def _at(report: Report, planners: dict, budget: int, balance: bool, previous: dict[str, float]) -> None:
    plans = {}
    for name, minimum in (("auto", report.auto_minimum), ("--balance", report.balance_minimum)):
        if name == "--balance" and not balance:
            continue
        try:
            result = planners[name](budget)
        except InfeasibleBudget:
            if budget >= minimum:
                report.failures.append(f"{name}: infeasible at {budget}, at or above its named minimum {minimum}")
            continue
        if budget < minimum:
            report.failures.append(f"{name}: plans at {budget}, below its named minimum {minimum}")
        if _peak(result) > budget:
            report.failures.append(f"{name}: the plan at {budget} peaks at {_peak(result)}")
        cost = result.priced_s if name == "auto" else result.balanced.step_s
        if name in previous and cost > previous[name] * (1 + 1e-9) + 1e-12:
            report.failures.append(f"{name}: slower at {budget} ({cost:.6f}) than at a smaller budget "
                                   f"({previous[name]:.6f})")
        previous[name] = cost
        plans[name] = result
    if "auto" in plans and "--balance" in plans and plans["--balance"].balanced.offsets == \
            plans["--balance"].written.offsets:
        mine, theirs = plans["--balance"].plan.estimate.stages, plans["auto"].estimate.stages
        if [(stage.peak.peak, stage.recompute_s, stage.codec_s) for stage in mine] != \
                [(stage.peak.peak, stage.recompute_s, stage.codec_s) for stage in theirs]:
            report.failures.append(f"--balance kept the layout as written at {budget} but planned it otherwise "
                                   "than auto")


def random_layout(rng: random.Random, directory: Path, name: str) -> Path:
    """A Llama pipeline config with a random layout (layers, stages, interleave chunks, micro-batches, offsets) and
    random sizes (hidden, sequence, tensor parallelism), written to `directory`."""
    text = BASE.read_text()
    plain = "recompute_config:\n  recompute: False\n\nswap_config:\n  swap: False\n"
    text = text[:text.index("recompute_config:")] + plain
    chunks = rng.choice([1, 1, 2])
    stages = rng.choice([2, 3, 4, 6, 8])
    layers = rng.randint(stages * chunks + 1, max(stages * chunks + 1, 48))
    hidden, tensor = rng.choice([(2048, 1), (4096, 1), (4096, 2), (5120, 4), (8192, 8)])
    micro = rng.randint(stages, 3 * stages)
    values = {"num_layers": layers, "hidden_size": hidden, "num_heads": hidden // 128, "seq_length":
              rng.choice([2048, 4096, 8192]), "pipeline_stage": stages, "micro_batch_num": micro,
              "model_parallel": tensor, "data_parallel": 1}
    for key, value in values.items():
        text = re.sub(rf"(\n\s+{key}:) [^\n#]*", rf"\g<1> {value}", text, count=1)
    offsets = _offsets(rng, layers, stages, chunks)
    text = re.sub(r"\n(\s+)offset: 0", lambda match: f"\n{match.group(1)}offset: {offsets}"
                  + (f"\n{match.group(1)}pp_interleave_num: {chunks}" if chunks > 1 else ""), text, count=1)
    if chunks > 1:
        text = text.replace("  enable_parallel_optimizer: True\n", "  enable_parallel_optimizer: True\n"
                            "  pipeline_config:\n    pipeline_interleave: True\n    pipeline_scheduler: '1f1b'\n", 1)
    path = directory / f"{name}.yaml"
    path.write_text(text)
    return path


def _offsets(rng: random.Random, layers: int, stages: int, chunks: int) -> list:
    """Offsets that add up to layers % (stages x chunks) (MindFormers' rule), every slot keeping a layer."""
    slots = stages * chunks
    base = layers // slots
    grid = [0] * slots
    for _ in range(layers % slots):
        grid[rng.randrange(slots)] += 1
    for _ in range(rng.randint(0, 3)):              # move a layer from one slot to another
        source, target = rng.randrange(slots), rng.randrange(slots)
        if base + grid[source] > 1:
            grid[source] -= 1
            grid[target] += 1
    return grid if chunks == 1 else [grid[chunk * stages:(chunk + 1) * stages] for chunk in range(chunks)]
