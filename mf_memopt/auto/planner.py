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

from dataclasses import replace
from pathlib import Path

from ..config.load import Document, load_document
from ..document.errors import ConfigIssue, raise_if_errors
from ..document.source import Source
from ..estimate.budget import device_budget
from ..estimate.core import Estimate
from ..estimate.transfer import Hardware
from .choices import KEEP, METHODS, Choice, choice_set
from .context import PlanContext, assignment_of, plan_header
from .limits import PlannerMismatch
from .problem import StageProblem
from .results import INFINITE, AutoPlan, InfeasibleBudget, StagePlan
from .solver import Solution, least_peak, solve_stage
from .space import PlanSpace
from .timing import TimeTable, priced

REPAIRS = 3
EXHAUSTIVE_LIMIT = 5000   # count-form plans estimated one by one when the layer search cannot be used
CPU_MARGIN = 0.05


def default_margin(runtime: str) -> float:
    return CPU_MARGIN if runtime == "cpu" else 0.0


DEFAULT_COMPRESS = ("int8", "lossless")


def compression_methods(compress: tuple[str, ...] | None, runtime: str, times: TimeTable | None,
                        hardware: Hardware | None = None) -> tuple[str, ...]:
    """The compression methods `auto` offers: `compress` as asked (a ValueError where one is not a method or nothing
    prices it: `compression_problem`), else those of `DEFAULT_COMPRESS` something prices."""
    if compress is None:
        return tuple(method for method in DEFAULT_COMPRESS if not _unpriced((method,), runtime, times, hardware))
    problem = compression_problem(compress, runtime, times, hardware)
    if problem:
        raise ValueError(problem)
    return tuple(compress)


def compression_problem(compress: tuple[str, ...] | None, runtime: str, times: TimeTable | None,
                        hardware: Hardware | None, *, profile_pending: bool = False) -> str | None:
    """Why `auto` cannot offer the methods `compress` names, in one line (None when it can): a name that is not a
    method, or a method nothing prices (the codec's time is measured, not modelled). A measured cpu profile prices
    every method; otherwise a method is priced by its codec throughput measured on the device
    (`Hardware.codec_gbps`). With `profile_pending` (cpu, before its profile is read) only the names are checked."""
    unknown = sorted(set(compress or ()) - set(METHODS))
    if unknown:
        return f"unknown method(s) {', '.join(unknown)} (use {', '.join(METHODS)}, or none)"
    unpriced = [] if profile_pending and runtime == "cpu" else _unpriced(compress or (), runtime, times, hardware)
    if not unpriced:
        return None
    given = f"give its throughput measured on the device (--codec-gbps {unpriced[0]}=GBPS)"
    if runtime == "cpu":
        return f"nothing prices the codec's time of {', '.join(unpriced)}: add --profile (or --measure), or {given}"
    return (f"nothing prices the codec's time of {', '.join(unpriced)} on the ascend runtime: {given}, or plan with "
            "--runtime cpu and a measured profile")


def _unpriced(methods: tuple[str, ...], runtime: str, times: TimeTable | None, hardware: Hardware | None) -> list[str]:
    """The methods neither a measured cpu profile nor a codec figure of `hardware` prices."""
    if runtime == "cpu" and times is not None:
        return []
    rated = dict(hardware.codec_gbps) if hardware is not None else {}
    return [method for method in methods if method not in rated]


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
    context = PlanContext.read(document, runtime, hardware, source.text, output_name or str(path))
    context.times = times
    full, references = _references(context)
    methods = compression_methods(compress, runtime, times, hardware)
    offered = choices or priced(choice_set(context.cells, swap=runtime == "ascend", full=full, compress=methods),
                                times)
    context.compress = any(choice.compress for choice in offered)
    notes = (f"compression is not offered: {context.cells.no_compress}",) if methods and context.cells.no_compress \
        else ()
    families = _families(offered, swap=runtime == "ascend")
    # the plan's terms, without the plan: what the search is held to and what it is compared with
    blank = AutoPlan(config=str(path), runtime=runtime, budget=budget, host_budget=host_budget, family="counts",
                     stages=(), text="", estimate=references["nothing"], references=references,
                     empty=all(stage.peak.peak <= target for stage in references["nothing"].stages), margin=margin,
                     target=target, budget_source=resolved.source,
                     time_source=times.source if times is not None else
                     f"FLOP model at {hardware.tflops:g} TFLOPS{hardware.codec_text()}", notes=notes)
    try:
        best = _keep_everything(context, families["counts"], target) if blank.empty else \
            _best_family(context, families, target, host_budget)
    except PlannerMismatch as error:
        if runtime != "cpu":
            raise
        return _exhaustive(document, blank, hardware, times, str(error))
    if best is None:
        raise InfeasibleBudget(budget, _minimum_budgets(context, families, host_budget) if minimum else {}, margin)
    return _written(context, families, blank, *best, methods=methods)


def _references(context: PlanContext) -> tuple[bool, dict[str, Estimate]]:
    """Whether full recompute is offered, and the estimates of the plans the result is compared with: nothing
    recomputed, and the strongest plan. MindFormers refuses full recompute under seq pipe (`config.layout`): every
    cell recomputed is the strongest plan there."""
    full = context.spec[1].seq_split == 1 or context.plan.layout.stages == 1
    strongest = ("full recompute", Choice(full=True)) if full else \
        ("every cell recomputed", Choice(select=context.cells.select))
    return full, {"nothing": context.estimate_of(context.uniform(KEEP)),
                  strongest[0]: context.estimate_of(context.uniform(strongest[1]))}


def _families(offered: tuple[Choice, ...], *, swap: bool) -> dict[str, list[Choice]]:
    """The choices of each form the plan may be written in: per-stage counts (nothing swapped) and, where swap is
    possible and offered, layer indices (any choice)."""
    families = {"counts": [choice for choice in offered if not choice.swaps]}
    if swap and any(choice.swaps for choice in offered):
        families["indices"] = list(offered)
    return families


def _written(context: PlanContext, families: dict[str, list[Choice]], blank: AutoPlan, name: str,
             stages: list[StagePlan], *, methods: tuple[str, ...]) -> AutoPlan:
    """The search's plan in family `name`, repaired where the estimator puts a stage over the target, written."""
    stages, repairs, estimate = (stages, [], blank.estimate) if blank.empty else \
        _repair(context, families[name], name, stages, blank.target, blank.host_budget)
    repairs += [f"stage {stage.stage}: the search stopped at its time limit; the plan is the best it found, not "
                "proven the fastest" for stage in stages if not stage.proven]
    header = plan_header(name, blank.budget, blank.host_budget, blank.runtime, stages, estimate, blank.references,
                         context.cells, blank.margin, profiled=context.times is not None)
    return replace(blank, family=name, stages=tuple(stages), text=context.text_of(assignment_of(stages), header),
                   estimate=estimate, repairs=tuple(repairs), compress=methods if context.compress else ())


def _exhaustive(document: Document, blank: AutoPlan, hardware: Hardware, times: TimeTable | None,
                why: str) -> AutoPlan:
    """The fastest count-form plan whose whole-plan estimate fits, every plan estimated (`space.py`): for the
    configs whose peak terms the layer-by-layer search cannot express (`PlannerMismatch`). `blank`: the plan's
    terms (`auto_plan`)."""
    space = PlanSpace(document, runtime="cpu", times=times, hardware=hardware)
    if len(space.assignments()) > EXHAUSTIVE_LIMIT:
        raise PlannerMismatch(f"{why}; and the count-form space is too large to estimate plan by plan")
    ranked = space.ranked(blank.target)
    if not ranked:
        lowest = min(space.candidates(), key=lambda item: item.peak)
        raise InfeasibleBudget(blank.budget, {stage.stage: stage.peak.peak for stage in lowest.estimate.stages},
                               blank.margin)
    plan = space.auto_plan_of(blank, ranked[0])
    note = (f"the layer-by-layer search cannot express this model's peak ({why}): all "
            f"{len(space.assignments())} count-form plans were estimated whole instead")
    return replace(plan, repairs=(note,))


def solve(problem: StageProblem, budget: float, host_budget: float, *, prefixes: bool,
          need_swap: bool = False) -> Solution | None:
    return solve_stage(problem, budget, host_budget, prefixes=prefixes, need_swap=need_swap)


def _keep_everything(context: PlanContext, choices: list[Choice], budget: int) -> tuple[str, list[StagePlan]]:
    """The empty plan, when every stage's peak without recompute or swap is within the budget: answered at once,
    without a search (no plan adds less time)."""
    stages = []
    for problem in context.stage_problems(choices):
        keep = [next(option for option in options if option.choice == KEEP) for options in problem.positions]
        stages.append(StagePlan(stage=problem.stage, layers=problem.layers, options=tuple(keep), budget=budget,
                                searched_s=0.0))
    return "counts", stages


def _best_family(context: PlanContext, families: dict[str, list[Choice]], budget: int,
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


def _solve_family(context: PlanContext, name: str, choices: list[Choice], budget: int,
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


def _repair(context: PlanContext, choices: list[Choice], name: str, stages: list[StagePlan], budget: int,
            host_budget: float) -> tuple[list[StagePlan], list[str], Estimate]:
    """Re-solve stages the estimator puts over the budget, held to budget minus the excess."""
    notes = []
    for attempt in range(REPAIRS + 1):
        estimate = context.estimate_of(assignment_of(stages))
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


def _minimum_budgets(context: PlanContext, families: dict[str, list[Choice]], host_budget: float) -> dict[int, int]:
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
