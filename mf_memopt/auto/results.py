"""What `auto` and `auto --balance` give back: a plan per stage (`AutoPlan`), a layout with its plan (`Balanced`), or
why none fits (`InfeasibleBudget`). The planner, the balance, the plan space and the reports all read these."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..estimate.core import Estimate
from .solver import Option

INFINITE = float("inf")


class InfeasibleBudget(Exception):
    """No plan fits: per stage the smallest peak a plan reaches (`peaks`) and the smallest budget that holds it with
    the margin (`minimum`); `smallest` is the budget to give (the binding stage's, or, for `auto --balance`, the
    smallest budget at which it plans), at which the planner then plans."""

    def __init__(self, budget: int, peaks: dict[int, int], margin: float = 0.0, smallest: int | None = None):
        self.budget, self.margin, self.peaks = budget, margin, dict(peaks)
        self.minimum = {stage: budget_for(value, margin) for stage, value in peaks.items()}
        self.binding = max(peaks, key=lambda stage: peaks[stage]) if peaks else None
        self.smallest = smallest if smallest is not None else (self.minimum[self.binding] if peaks else None)
        super().__init__(f"no plan fits {budget} bytes per stage")


def budget_for(peak: int, margin: float) -> int:
    """The smallest budget whose target (the budget less round(budget x margin), what the search holds peaks to)
    is at least `peak`."""
    budget = math.ceil(peak / (1 - margin)) if margin else peak
    while budget - round(budget * margin) < peak:
        budget += 1
    while budget > 0 and (budget - 1) - round((budget - 1) * margin) >= peak:
        budget -= 1
    return budget


@dataclass(frozen=True, slots=True, kw_only=True)
class StagePlan:
    stage: int
    layers: tuple[int, ...]
    options: tuple[Option, ...]
    budget: int                 # what the search was held to (the budget, or less after a repair)
    searched_s: float           # added time as the search counts it
    proven: bool = True         # False: the search stopped at its time limit (`solver.Solution.proven`)

    def got(self) -> dict[int, Option]:
        return dict(zip(self.layers, self.options))


@dataclass(frozen=True, slots=True, kw_only=True)
class AutoPlan:
    config: str
    runtime: str
    budget: int
    host_budget: float
    family: str                 # "counts" or "indices"
    stages: tuple[StagePlan, ...]
    text: str                   # the written YAML
    estimate: Estimate          # of `text`
    references: dict[str, Estimate]
    empty: bool                 # the budget holds the plan without any recompute or swap
    repairs: tuple[str, ...] = ()
    margin: float = 0.0         # share of the budget held back for the estimator's error
    target: int = 0             # what the search held each stage's predicted peak to: budget less the margin
    budget_source: str = "--device-memory"  # where the budget came from (`estimate.budget.device_budget`)
    time_source: str = "FLOP model"         # what priced the choices: a measured profile (`timing.py`) or FLOPs
    compress: tuple[str, ...] = ()          # the compression methods among the choices (`planner.compression_methods`)
    notes: tuple[str, ...] = ()             # what the choices left out, and why

    @property
    def priced_s(self) -> float:
        """The added step time of the plan as the search priced it (every stage)."""
        return sum(stage.searched_s for stage in self.stages)

    @property
    def fits(self) -> bool:
        return all(stage.peak.peak <= self.budget and stage.host_bytes <= self.host_budget
                   for stage in self.estimate.stages)


@dataclass(frozen=True, slots=True, kw_only=True)
class StageTime:
    """One stage of a plan: its decoder layers, predicted peak and time per step."""

    stage: int
    layers: tuple[int, ...]
    peak: int
    seconds: float          # forward, backward, recompute and swap stalls of every micro-batch, heads included


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelinePlan:
    """A layout and plan as the pipeline runs it: per stage, and the step time the slowest stage sets."""

    offsets: list
    stages: tuple[StageTime, ...]
    step_s: float

    @property
    def peak(self) -> int:
        return max(stage.peak for stage in self.stages)


@dataclass(frozen=True, slots=True, kw_only=True)
class Balanced:
    config: str
    budget: int
    budget_source: str          # where the budget came from (`estimate.budget.device_budget`)
    written: PipelinePlan       # the YAML as written (its offsets and its recompute)
    balanced: PipelinePlan      # the chosen offsets with the exact plan for them
    plan: AutoPlan              # the exact search's result for the chosen offsets
    layout: str                 # "balanced" or "as written": which offsets won
    why: str                    # why the layout as written won ("" when the balanced one did)
    wall_s: float               # planning time, reading the YAML included
    text: str                   # the written YAML: the plan's, with the layout's lines on top of its header
    notes: tuple[str, ...] = ()

    @property
    def ratio(self) -> float:
        """Balanced step time over the written plan's."""
        return self.balanced.step_s / self.written.step_s
