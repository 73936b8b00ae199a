"""Every plan the YAML's count forms can express for a config, each priced and estimated whole.

Without swap (the cpu runtime: nothing moves there) a plan is written in per-stage counts: `recompute: [k]` fully
recomputes the first k layers of each stage, and `select_recompute: {cell: [c]}` recomputes `cell` in the first c
(the count includes the fully recomputed layers, where full recompute wins). So a stage's distinct plans are one
k in 0..n and, per select cell, one c in k..n: sum over k of (n - k + 1) ** cells plans (14 for 2 layers and
2 cells, 55 for 4). Counts below k write the same layers as k: that is the only reduction, and it is exact.
`select_comm_recompute` acts on communication operators only, which a one-device CPU run does not have.

`PlanSpace` estimates each plan with the estimator (its own peak moment: the peak of the whole plan, not a sum of
per-layer savings) and prices it as the search does (the measured profile, else FLOPs). `auto --measure` takes its
nearest rivals from here, and the brute-force benchmark enumerates it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from pathlib import Path

from ..config.load import Document, load_document
from ..estimate.core import Estimate
from ..estimate.transfer import Hardware
from .choices import KEEP, Choice, choice_set
from .context import PlanContext, assignment_of, plan_header
from .results import INFINITE, AutoPlan, StagePlan
from .solver import Option, best_plans
from .timing import TimeTable, priced
from .writer import Assignment, describe


@dataclass(frozen=True, slots=True, kw_only=True)
class Candidate:
    """One plan of the space: each layer's choice, its estimate's peak, its priced added time."""

    choices: tuple[Choice, ...]         # per layer, in layer order
    peak: int                           # the estimator's largest stage peak
    priced_s: float                     # added step time as the search prices it
    estimate: Estimate

    @property
    def name(self) -> str:
        return describe(tuple(range(len(self.choices))), list(self.choices), [None] * len(self.choices))


def stage_assignments(n: int, cells: tuple[str, ...]) -> list[tuple[Choice, ...]]:
    """The distinct count-form plans of an n-layer stage (see the module's docstring)."""
    plans = []
    for full in range(n + 1):
        for counts in itertools.product(range(full, n + 1), repeat=len(cells)):
            plans.append(tuple(Choice(full=True) if layer < full else
                               _select(tuple(cell for cell, count in zip(cells, counts) if layer < count), cells)
                               for layer in range(n)))
    return plans


def _select(chosen: tuple[str, ...], cells: tuple[str, ...]) -> Choice:
    if not chosen:
        return KEEP
    return Choice(select=cells if len(chosen) == len(cells) else chosen)


class PlanSpace:
    """A config's count-form plans, estimated and priced; built like `auto_plan` (same budget, margin, time)."""

    def __init__(self, config: str | Path | Document, *, runtime: str = "cpu", times: TimeTable | None = None,
                 hardware: Hardware | None = None):
        document = load_document(config)            # a path is read here; a document is used as it is
        self.config, self.runtime, self.times = Path(document.source.file), runtime, times
        self.context = PlanContext.read(document, runtime, hardware or Hardware(), document.source.text,
                                        str(self.config))
        self.context.times = times
        self.offered = list(choice_set(self.context.cells, swap=False))
        plan = self.context.plan
        self.stages = [tuple(layer.layer for layer in plan.layers if layer.stage == stage)
                       for stage in range(plan.layout.stages)]
        self.layers = [layer.layer for layer in plan.layers]
        self._candidates: list[Candidate] | None = None

    def assignments(self) -> list[tuple[Choice, ...]]:
        per_stage = [stage_assignments(len(layers), self.context.cells.select) for layers in self.stages]
        return [tuple(itertools.chain.from_iterable(parts)) for parts in itertools.product(*per_stage)]

    def candidate(self, choices: tuple[Choice, ...]) -> Candidate:
        assignment = Assignment(choices=dict(zip(self.layers, choices)), prefetch={})
        estimate = self.context.estimate_of(assignment)
        if self.times is not None:
            priced = sum(self.times.seconds(choice) for choice in choices)
        else:       # the FLOP model, as the estimator prices recompute
            priced = sum(stage.recompute_s + stage.codec_s for stage in estimate.stages)
        return Candidate(choices=choices, peak=max(stage.peak.peak for stage in estimate.stages), priced_s=priced,
                         estimate=estimate)

    def candidates(self) -> list[Candidate]:
        if self._candidates is None:
            self._candidates = [self.candidate(choices) for choices in self.assignments()]
        return self._candidates

    def ranked(self, target: int) -> list[Candidate]:
        """Every plan whose estimated peak is within `target` (the budget less the margin), fastest first (then
        the lower peak)."""
        return sorted((item for item in self.candidates() if item.peak <= target),
                      key=lambda item: (item.priced_s, item.peak))

    def auto_plan_of(self, best: AutoPlan, candidate: Candidate) -> AutoPlan:
        """The candidate as `auto` writes a plan (the same YAML sections and header as `best`, auto's own plan for
        this config and budget)."""
        return written_as(self.context, best, candidate.choices, candidate.estimate)


def written_as(context: PlanContext, best: AutoPlan, choices: tuple[Choice, ...], estimate: Estimate | None = None
               ) -> AutoPlan:
    """The plan giving each layer `choices` (in layer order) as `auto` writes one: the same YAML sections and header
    as `best`, auto's own plan for this config and budget; priced as the search prices it."""
    plan = context.plan
    layers = [layer.layer for layer in plan.layers]
    at = dict(zip(layers, choices))
    times = context.times
    if estimate is None:
        estimate = context.estimate_of(Assignment(choices=at, prefetch={}))
    stages = []
    for stage in range(plan.layout.stages):
        members = tuple(layer.layer for layer in plan.layers if layer.stage == stage)
        mine = tuple(Option(choice=at[layer], kept=0, rebuilt=0, swapped=0, attention=False,
                            seconds=times.seconds(at[layer]) if times is not None else 0.0) for layer in members)
        searched = (sum(option.seconds for option in mine) if times is not None
                    else estimate.stages[stage].recompute_s + estimate.stages[stage].codec_s)
        stages.append(StagePlan(stage=stage, layers=members, options=mine, budget=best.target, searched_s=searched))
    header = plan_header("counts", best.budget, best.host_budget, context.runtime, stages, estimate, best.references,
                         context.cells, best.margin, profiled=context.times is not None)
    text = context.text_of(assignment_of(stages), header)
    return replace(best, family="counts", stages=tuple(stages), text=text, estimate=estimate, repairs=(),
                   empty=best.empty and all(choice == KEEP for choice in choices))


def rivals(document: Document, plan: AutoPlan, *, count: int, times: TimeTable | None = None,
           hardware: Hardware | None = None) -> list[tuple[str, AutoPlan]]:
    """The `count` fastest count-form plans after `plan` whose peak is within its target, among the choices its
    search had (the compression `plan.compress` names included), as the search prices them (`solver.best_plans`:
    the k best of the stage's programme, not every plan estimated), each written as `auto` writes one and named.
    When `plan` compresses, the fastest plan without compression is always one of them, named so: the race then
    says what compression bought. `--measure` races them against the plan (cpu: one stage)."""
    context = PlanContext.read(document, "cpu", hardware or Hardware(), document.source.text,
                               str(document.source.file))
    context.times = times
    offered = priced(choice_set(context.cells, swap=False, compress=plan.compress if times is not None else ()),
                     times)
    context.compress = any(choice.compress for choice in offered)
    problems = context.stage_problems(list(offered))
    if len(problems) != 1 or count <= 0:
        return []
    mine = tuple(option.choice for stage in plan.stages for option in stage.options)
    found = [choices for choices in _fastest(problems[0], plan.target, count + 1) if choices != mine][:count]
    plain: tuple[Choice, ...] | None = None
    if any(choice.compress for choice in mine):
        plain = next(iter(_fastest(context.stage_problems([choice for choice in offered if not choice.compress])[0],
                                   plan.target, 1)), None)
        if plain is not None:
            found = [plain, *(choices for choices in found if choices != plain)][:count]
    layers = problems[0].layers
    return [(("without compression: " if choices == plain else "") + describe(layers, list(choices),
                                                                             [None] * len(choices)),
             written_as(context, plan, choices)) for choices in found]


def _fastest(problem, target: int, count: int) -> list[tuple[Choice, ...]]:
    return [tuple(option.choice for option in solution.options)
            for solution in best_plans(problem, target, INFINITE, prefixes=True, count=count)]


def profile_config(config: str | Path | Document, *, runs: int | None = None, report=lambda line: None,
                   compress: tuple[str, ...] = ()) -> TimeTable:
    """Measure the config's step-time profile (`timing.profile`: every layer given each choice, raced), the
    compression `compress` names among the choices."""
    from . import timing

    space = PlanSpace(config, runtime="cpu")
    context = space.context
    offered = choice_set(context.cells, swap=False, compress=compress)
    context.compress = any(choice.compress for choice in offered)
    table = timing.profile(context.source, len(space.layers), lambda choice: context.text_of(context.uniform(choice)),
                           offered, runs=runs or timing.RUNS, report=report)
    return replace(table, codec=timing.codec_now()) if context.compress else table


def cached_or_profiled(config: str | Path | Document, *, measure: bool, runs: int | None = None,
                       report=lambda line: None, directory: Path | None = None,
                       compress: tuple[str, ...] = ()) -> TimeTable | None:
    """The cached profile of this model shape; else, with `measure`, a new one of `runs` races (cached); else None.
    With `measure`, a cached profile without a time for some compression of `compress` is measured again."""
    from . import timing

    document = load_document(config)
    source = document.source
    table = timing.load_table(source, directory)
    if table is not None and compress:
        table = timing.without_other_codec(table, timing.codec_now())
    context = PlanContext.read(document, "cpu", Hardware(), source.text, source.file) if compress else None
    wanted = {choice.name for choice in choice_set(context.cells, swap=False, compress=compress)} if context else set()
    missing = sorted(wanted - set(table.added_s)) if table is not None else []
    if table is not None and not (missing and measure):
        report(f"time profile: cached in {timing.cache_path(source, directory)} ({table.source}; {table.load})"
               + (f"; it has no time for {', '.join(missing)}, which are not offered" if missing else ""))
        return table
    if not measure:
        return None
    why = f"the cached one has no time for {', '.join(missing)}" if table is not None else \
        "none cached for this model shape"
    report(f"time profile: {why}; measuring it ({timing.load_average()})")
    table = profile_config(document, runs=runs, report=report, compress=compress)
    report(f"time profile: written to {timing.save_table(table, source, directory)}")
    return table
