"""`auto_plan`: the least-overhead recompute/swap plan under a device-memory budget, as YAML.

1. Read the YAML and its current plan (for the layout) and model (the estimator's spec).
2. Per stage, solve the exact search of `solver.py` twice where swap is possible (ascend):
   once in the count family (no swap; each setting on the first layers of a stage or chunk)
   and once in the index family (any assignment, with swaps). The family with the lower
   total added time wins; ties go to the simpler count family.
3. Write the plan into the YAML text and estimate that text with the estimator. The search
   and the estimator agree on peaks (the same functions); if a stage still comes out over
   its budget (the link queueing of consecutive swaps is the one effect the search sees
   only in its cost), its budget is tightened by the excess and it is solved again (at
   most `REPAIRS` times).

Added time is the estimator's: recompute FLOPs at the configured throughput, plus swap
transfer not hidden. The search counts each swapped layer's transfer alone, a lower bound
on the estimator's stalls (which add queueing on the host link), so the plan's estimated
overhead is at most the optimum plus (estimated - searched) time; both are reported.

A margin for the estimator's own error: on the cpu runtime the search is held to the budget less
`CPU_MARGIN`, the estimator's worst under-estimate of a measured pool peak on the held-out sweep configs
(4.6% over 176 configs and every step form, `benchmarks/README.md` (e)), rounded up. The ascend runtime's
terms cannot be measured on this machine, so no margin is derived for it (0 unless one is given).
`auto --measure` plans without a margin: the measurement is the check.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..config.family_rules import auto_cells_for
from ..config.load import Document, load_document
from ..config.plan import Plan
from ..document.errors import ConfigIssue, raise_if_errors
from ..document.inherit import BASE_CONFIG
from ..document.source import Source, parse_yaml
from ..estimate.budget import device_budget
from ..estimate.core import Estimate, estimate_source
from ..estimate.family import read_spec
from ..estimate.spec import ModelSpec
from ..estimate.transfer import Hardware
from ..family import AutoCells
from .choices import KEEP, METHODS, Choice, choice_set
from .limits import PlannerMismatch
from .problem import StageProblem, stage_problems
from .solver import Option, Solution, least_peak, solve_stage
from .timing import TimeTable
from .writer import Assignment, describe, replace_sections, sections

REPAIRS = 3
EXHAUSTIVE_LIMIT = 5000   # count-form plans estimated one by one when the layer search cannot be used
INFINITE = float("inf")
CPU_MARGIN = 0.05


def default_margin(runtime: str) -> float:
    return CPU_MARGIN if runtime == "cpu" else 0.0


DEFAULT_COMPRESS = ("int8", "lossless")


def compression_methods(compress: tuple[str, ...] | None, runtime: str, times: TimeTable | None) -> tuple[str, ...]:
    """The compression methods `auto` offers: `compress` as asked (a ValueError where nothing prices them: the codec's
    time is measured, not modelled), else `DEFAULT_COMPRESS` where a measured cpu profile prices them."""
    if compress is None:
        return DEFAULT_COMPRESS if runtime == "cpu" and times is not None else ()
    unknown = sorted(set(compress) - set(METHODS))
    if unknown:
        raise ValueError(f"unknown compression method(s) {', '.join(unknown)}: use {', '.join(METHODS)} or none")
    if compress and (runtime != "cpu" or times is None):
        raise ValueError("compression choices are priced by a measured step-time profile: plan with --runtime cpu "
                         "and --profile (or --measure), or leave --compress out")
    return tuple(compress)


def priced(choices: tuple[Choice, ...], times: TimeTable | None) -> tuple[Choice, ...]:
    """The choices the profile prices: a compression the profile was measured without is left out (a profile is
    measured for the methods asked; `space.cached_or_profiled`)."""
    if times is None:
        return choices
    return tuple(choice for choice in choices if not choice.compress or choice.name in times.added_s)


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
    compress: tuple[str, ...] = ()          # the compression methods among the choices (`compression_methods`)

    @property
    def priced_s(self) -> float:
        """The added step time of the plan as the search priced it (every stage)."""
        return sum(stage.searched_s for stage in self.stages)

    @property
    def fits(self) -> bool:
        return all(stage.peak.peak <= self.budget and stage.host_bytes <= self.host_budget
                   for stage in self.estimate.stages)


def auto_plan(config: str | Path | Document, *, budget: int | None = None, runtime: str = "ascend",
              host_budget: float = INFINITE, hardware: Hardware | None = None,
              choices: tuple[Choice, ...] | None = None, output_name: str | None = None, margin: float | None = None,
              source: Source | None = None, minimum: bool = True, times: TimeTable | None = None,
              compress: tuple[str, ...] | None = None) -> AutoPlan:
    """Plan `config` for `budget` bytes of device memory per stage, predicted peaks held to the budget less
    `margin` (the runtime's default when None); without `budget`, the YAML's (`estimate.budget.device_budget`).
    Raises `InfeasibleBudget` or `ConfigError`. `config` is a path (read here) or a document already read;
    `source`, when given, is `config` already read (and perhaps rewritten in memory, as `auto --balance` rewrites
    its offsets); with `minimum` False an `InfeasibleBudget`
    does not name the smallest budgets (their search is the slow part). `times`, a measured profile of this model
    shape (`timing.py`), prices each choice by its measured time instead of its FLOPs. `compress`: the methods a
    layer's cells may be kept compressed with (`choices.METHODS`); only a measured profile prices them, so by
    default `DEFAULT_COMPRESS` on the cpu runtime with a profile, else none (`compression_methods`)."""
    margin = default_margin(runtime) if margin is None else margin
    if not 0 <= margin < 1:
        raise ValueError(f"the margin is a share of the budget in [0, 1), got {margin}")
    document = load_document(source if source is not None else config)
    source, path = document.source, Path(document.source.file)
    issues: list[ConfigIssue] = []
    resolved = device_budget(source, runtime, budget, issues)
    raise_if_errors(issues)
    budget = resolved.nbytes
    target = budget - round(budget * margin)
    hardware = replace(hardware or Hardware(), device_memory=budget)
    context = _Context.read(document, runtime, hardware, source.text, output_name or str(path))
    context.times = times
    # MindFormers refuses full recompute under seq pipe (`config.layout`): every cell recomputed is the strongest plan
    full = context.spec[1].seq_split == 1 or context.plan.layout.stages == 1
    strongest = ("full recompute", Choice(full=True)) if full else \
        ("every cell recomputed", Choice(select=context.cells.select))
    references = {"nothing": context.estimate_of(context.uniform(KEEP)),
                  strongest[0]: context.estimate_of(context.uniform(strongest[1]))}
    swap = runtime == "ascend"
    methods = compression_methods(compress, runtime, times)
    offered = choices or priced(choice_set(context.cells, swap=swap, full=full, compress=methods), times)
    context.compress = any(choice.compress for choice in offered)
    families = {"counts": [choice for choice in offered if not choice.swaps]}
    if swap and any(choice.swaps for choice in offered):
        families["indices"] = list(offered)
    empty = all(stage.peak.peak <= target for stage in references["nothing"].stages)
    time_source = times.source if times is not None else f"FLOP model at {hardware.tflops:g} TFLOPS"
    try:
        best = _keep_everything(context, families["counts"], target) if empty else \
            _best_family(context, families, target, host_budget)
    except PlannerMismatch as error:
        if runtime != "cpu":
            raise
        return _exhaustive(document, budget, target, host_budget, hardware, times, margin, references, empty,
                           resolved.source, time_source, str(error))
    if best is None:
        raise InfeasibleBudget(budget, _minimum_budgets(context, families, host_budget) if minimum else {}, margin)
    name, stages = best
    stages, repairs, estimate = (stages, [], references["nothing"]) if empty else \
        _repair(context, families[name], name, stages, target, host_budget)
    repairs += [f"stage {stage.stage}: the search stopped at its time limit; the plan is the best it found, not "
                "proven the fastest" for stage in stages if not stage.proven]
    final = context.text_of(_assignment(stages), _header(name, budget, host_budget, runtime, stages, estimate,
                                                         references, context.cells, margin))
    return AutoPlan(config=str(path), runtime=runtime, budget=budget, host_budget=host_budget, family=name,
                    stages=tuple(stages), text=final, estimate=estimate, references=references,
                    empty=empty, repairs=tuple(repairs), margin=margin, target=target,
                    budget_source=resolved.source, time_source=time_source,
                    compress=methods if context.compress else ())


def _exhaustive(document: Document, budget: int, target: int, host_budget: float, hardware: Hardware,
                times: TimeTable | None, margin: float, references: dict[str, Estimate], empty: bool,
                budget_source: str, time_source: str, why: str) -> AutoPlan:
    """The fastest count-form plan whose whole-plan estimate fits, every plan estimated (`space.py`): for the
    configs whose peak terms the layer-by-layer search cannot express (`PlannerMismatch`)."""
    from .space import PlanSpace

    space = PlanSpace(document, runtime="cpu", times=times, hardware=hardware)
    if len(space.assignments()) > EXHAUSTIVE_LIMIT:
        raise PlannerMismatch(f"{why}; and the count-form space is too large to estimate plan by plan")
    ranked = space.ranked(target)
    if not ranked:
        lowest = min(space.candidates(), key=lambda item: item.peak)
        raise InfeasibleBudget(budget, {stage.stage: stage.peak.peak for stage in lowest.estimate.stages}, margin)
    base = AutoPlan(config=str(space.config), runtime="cpu", budget=budget, host_budget=host_budget, family="counts",
                    stages=(), text="", estimate=references["nothing"], references=references, empty=empty,
                    margin=margin, target=target, budget_source=budget_source, time_source=time_source)
    plan = space.auto_plan_of(base, ranked[0])
    note = (f"the layer-by-layer search cannot express this model's peak ({why}): all "
            f"{len(space.assignments())} count-form plans were estimated whole instead")
    return replace(plan, repairs=(note,))


@dataclass(slots=True)
class _Context:
    source: Source
    plan: Plan
    spec: Any
    runtime: str
    hardware: Hardware
    text: str
    output_name: str
    cells: AutoCells
    problems: dict[tuple[Choice, ...], list[StageProblem]] = field(default_factory=dict)
    times: TimeTable | None = None
    compress: bool = False              # compression is among the choices: the written YAML says it either way

    @classmethod
    def read(cls, config: Source | Document, runtime: str, hardware: Hardware, text: str,
             output_name: str) -> _Context:
        """The context of a YAML read (a document) or written in memory (a source)."""
        document = load_document(config)
        source, plan = document.source, document.planned()
        issues: list[ConfigIssue] = []
        spec = read_spec(source, plan.family, issues, runtime=runtime)
        if runtime == "cpu" and spec is not None:
            issues += _cpu_layer_kind_issues(source, plan, spec[0])
        raise_if_errors(issues)
        return cls(source=source, plan=plan, spec=spec, runtime=runtime, hardware=hardware, text=text,
                   output_name=output_name, cells=auto_cells_for(plan.family, source))

    def stage_problems(self, choices: list[Choice]) -> list[StageProblem]:
        key = tuple(choices)
        if key not in self.problems:
            self.problems[key] = stage_problems(self.plan, self.spec, key, runtime=self.runtime,
                                                hardware=self.hardware, times=self.times)
        return self.problems[key]

    def uniform(self, choice: Choice) -> Assignment:
        return Assignment(choices={layer.layer: choice for layer in self.plan.layers}, prefetch={})

    def text_of(self, assignment: Assignment, header: list[str] | None = None) -> str:
        original = self.source.get(("recompute_config",)) or {}
        new = sections(assignment, self.plan.layout, original, self.cells, self.compress)
        return replace_sections(self.text, {**new, **self._bases()}, header or [])

    def _bases(self) -> dict:
        """`base_config` written relative to where the planned YAML goes, when it goes to another folder."""
        bases = parse_yaml(self.text, self.source.file).data.get(BASE_CONFIG)
        here, there = Path(self.source.file).parent, Path(self.output_name).parent
        if bases is None or here.resolve() == there.resolve():
            return {}
        moved = [os.path.relpath(here / name, there) for name in (bases if isinstance(bases, list) else [bases])]
        return {BASE_CONFIG: moved if isinstance(bases, list) else moved[0]}

    def estimate_of(self, assignment: Assignment) -> Estimate:
        """The estimate of the YAML with these sections (built as a mapping: no text round trip)."""
        original = self.source.get(("recompute_config",)) or {}
        data = {**self.source.data, **sections(assignment, self.plan.layout, original, self.cells, self.compress)}
        return estimate_source(Source(file=self.output_name, data=data, lines=self.source.lines),
                               runtime=self.runtime, hardware=self.hardware)


def solve(problem: StageProblem, budget: float, host_budget: float, *, prefixes: bool,
          need_swap: bool = False) -> Solution | None:
    return solve_stage(problem, budget, host_budget, prefixes=prefixes, need_swap=need_swap)


def _keep_everything(context: _Context, choices: list[Choice], budget: int) -> tuple[str, list[StagePlan]]:
    """The empty plan, when every stage's peak without recompute or swap is within the budget: answered at once,
    without a search (no plan adds less time)."""
    stages = []
    for problem in context.stage_problems(choices):
        keep = [next(option for option in options if option.choice == KEEP) for options in problem.positions]
        stages.append(StagePlan(stage=problem.stage, layers=problem.layers, options=tuple(keep), budget=budget,
                                searched_s=0.0))
    return "counts", stages


def _best_family(context: _Context, families: dict[str, list[Choice]], budget: int,
                 host_budget: float) -> tuple[str, list[StagePlan]] | None:
    """The family whose plan adds the least time; ties go to the count family (listed first)."""
    best = None
    for name, choices in families.items():
        stages = _solve_family(context, name, choices, budget, host_budget)
        if stages is None:
            continue
        total = sum(stage.searched_s for stage in stages)
        if best is None or total < best[0] - 1e-12:
            best = (total, name, stages)
    return None if best is None else (best[1], best[2])


def _solve_family(context: _Context, name: str, choices: list[Choice], budget: int,
                  host_budget: float) -> list[StagePlan] | None:
    """Every stage's best plan; in the index family at least one layer must swap (or the written
    `swap: True` without swap lists would switch on the default strategy), so the stage where
    swapping something costs least is held to its best plan that swaps."""
    problems = context.stage_problems(choices)
    found = [solve(problem, budget, host_budget, prefixes=name == "counts") for problem in problems]
    if any(item is None for item in found):
        return None
    if name == "indices" and not any(option.choice.swaps for item in found for option in item.options):
        swapping = [solve(problem, budget, host_budget, prefixes=False, need_swap=True) for problem in problems]
        extra = [(item.seconds - base.seconds, index) for index, (item, base) in enumerate(zip(swapping, found))
                 if item is not None]
        if not extra:
            return None
        found[min(extra)[1]] = swapping[min(extra)[1]]
    return [StagePlan(stage=problem.stage, layers=problem.layers, options=item.options, budget=budget,
                      searched_s=item.seconds, proven=item.proven) for problem, item in zip(problems, found)]


def _repair(context: _Context, choices: list[Choice], name: str, stages: list[StagePlan], budget: int,
            host_budget: float) -> tuple[list[StagePlan], list[str], Estimate]:
    """Re-solve stages the estimator puts over the budget, held to budget minus the excess."""
    notes = []
    for attempt in range(REPAIRS + 1):
        estimate = context.estimate_of(_assignment(stages))
        over = [stage for stage in estimate.stages if stage.peak.peak > budget]
        if not over or attempt == REPAIRS:
            break
        problems = context.stage_problems(choices)
        for stage in over:
            held = stages[stage.stage].budget - (stage.peak.peak - budget)
            found = solve(problems[stage.stage], held, host_budget, prefixes=name == "counts")
            notes.append(f"stage {stage.stage}: estimated {stage.peak.peak} > {budget} bytes; searched again "
                         f"with {held} bytes")
            if found is not None:
                stages[stage.stage] = StagePlan(stage=stage.stage, layers=stages[stage.stage].layers,
                                                options=found.options, budget=held, searched_s=found.seconds,
                                                proven=found.proven)
    return stages, notes, estimate


def _assignment(stages: list[StagePlan]) -> Assignment:
    choices, prefetch = {}, {}
    for stage in stages:
        for layer, option in stage.got().items():
            choices[layer] = option.choice
            if option.prefetch is not None:
                prefetch[layer] = option.prefetch
    return Assignment(choices=choices, prefetch=prefetch)


def _minimum_budgets(context: _Context, families: dict[str, list[Choice]], host_budget: float) -> dict[int, int]:
    """Per stage, the smallest peak its plan can reach, under the family that needs the smallest budget: the
    budget the search then plans with is the largest of them (`solver.least_peak`, exact in integers). In the
    index family some stage must swap (`_solve_family`): the one where swapping raises its minimum least."""
    best: list[int] | None = None
    for name, choices in families.items():
        problems = context.stage_problems(choices)
        prefixes = name == "counts"
        peaks = [least_peak(problem, host_budget, prefixes=prefixes) for problem in problems]
        if any(peak is None for peak in peaks):
            continue
        if name == "indices":
            swapping = [least_peak(problem, host_budget, prefixes=False, need_swap=True) for problem in problems]
            held = [(value, index) for index, value in enumerate(swapping) if value is not None]
            if not held:
                continue
            value, index = min(held)
            peaks[index] = max(peaks[index], value)
        if best is None or max(peaks) < max(best):
            best = peaks
    return {} if best is None else {problem.stage: peak for problem, peak in
                                    zip(context.stage_problems(next(iter(families.values()))), best)}


def _header(family: str, budget: int, host_budget: float, runtime: str, stages: list[StagePlan],
            estimate: Estimate, references: dict[str, Estimate], cells: AutoCells, margin: float) -> list[str]:
    from ..estimate.report import human

    host = "unlimited" if host_budget == INFINITE else human(host_budget)
    moves = " / layer or op swap with a backward_prefetch that hides the transfer" if family == "indices" else ""
    form = ("layer indices, swap on" if family == "indices"
            else "per-stage counts of the first layers (select counts include the fully recomputed layers before "
                 "them: full recompute wins there)")
    lines = [f"plan for {human(budget)} of device memory per stage ({runtime} runtime), host memory {host}.",
             f"Made per pipeline stage by an exact search over keep / recompute {', '.join(cells.select)} or both /",
             f"full recompute{moves}: the least predicted added step time with the estimated peak within the budget.",
             f"Written as {form}."]
    if any(option.choice.compress for stage in stages for option in stage.options):
        lines.append("Compression (its codec's time measured in the profile) was among the choices: compress_config "
                     "is written too.")
    if margin:
        held = human(budget - round(budget * margin))
        lines.append(f"Predicted peaks held to {held}: a {margin * 100:g}% margin for the estimator's error on the "
                     f"{runtime} runtime.")
    for plan, stage in zip(stages, estimate.stages):
        lines.append(f"stage {stage.stage}: predicted peak {human(stage.peak.peak)}, overhead {stage.overhead:.1%}: "
                     + describe(plan.layers, [option.choice for option in plan.options],
                                [option.prefetch for option in plan.options]))
    for name, reference in references.items():
        lines.append(f"for comparison, {name}: " + ", ".join(
            f"stage {stage.stage} peak {human(stage.peak.peak)}, overhead {stage.overhead:.1%}"
            for stage in reference.stages))
    size = human(budget).replace(" ", "")
    lines.append(f"Check: python -m mf_memopt estimate THIS.yaml --runtime {runtime} --device-memory {size}")
    return lines


def _cpu_layer_kind_issues(source: Source, plan: Plan, model: ModelSpec) -> list[ConfigIssue]:
    """The cpu planner's terms assume layers of one kind, each on its own: layers of two kinds (dense first layers)
    and MTP layers (which follow the last layer's choice) are planned with the ascend runtime only."""
    keys = plan.family.keys
    found = []
    if model.dense_layers:
        found.append(("first_k_dense_replace", "dense first layers and MoE layers"))
    if model.mtp_layers:
        found.append(("num_nextn_predict_layers", "MTP layers, which take the last layer's choice"))
    return [source.issue((*keys.num_layers[:-1], key), f"auto --runtime cpu plans layers of one kind, each on its "
                         f"own; this model has {what}", "plan it with the ascend runtime, or estimate a plan of "
                         "your own with `estimate --runtime cpu` and `--measure`") for key, what in found]
