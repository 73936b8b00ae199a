"""Choose one option per layer of a pipeline stage: the least added step time with the stage's peak within its budget.

The stages are independent (each has its own device and its own peak), so each is solved alone; least added
time per stage is then also least for the sum and for the slowest stage. Each stage is one small integer
programme (`milp.py`, HiGHS), stated in the terms the estimator's own peak function is read into (`limits.py`),
and its answer is checked again in integers against those terms; a plan over the budget by the solver's
tolerance is searched again with the budget lowered by the excess (`_TIGHTENINGS` times at most).

* **ascend.** The peak depends on a stage's layers only through the sum of the bytes they keep, the largest
  layer rebuilt in the backward and the swapped bytes (`limits.AscendStage`), so the positions offered the same
  options form a *segment* (the layers of one kind; the last layer, which never swaps and on the last stage
  carries the MTP layers) and only the count of each segment's layers taking each option matters. Variables: one
  count per segment and option, and one binary per value the largest rebuilt layer can take (its kept-bytes cap
  is `AscendStage.kept_cap`, exact in integers). The programme's size grows with segments x options (about 30
  variables), not with the layers: 10,000 layers cost what 10 do.
* **cpu.** The pool peak is the largest of per-layer checkpoints that count the layers before, at and after each
  position differently (`limits.CpuTerms`), so position matters: one binary per position and option, prefix and
  suffix sums as continuous variables, a row per position and kind of checkpoint, one per whole-stage checkpoint,
  and one binary for the causal mask kept when some attention is rebuilt. Its size grows linearly with the
  layers (five options: 5n binaries, about 6n rows).
* **Per-stage counts** (`recompute: [n, ...]`, `select_recompute: {cell: [n, ...]}`, used when nothing is
  swapped) apply to the *first* layers of each stage or chunk, so along a chunk the settings form a chain: full
  recompute, then every cell, then one cell, then nothing (a select count includes the fully recomputed layers
  before it: full recompute wins there). Each option gets a level (full 0, every cell 1, a cell set missing k
  cells 1 + k, keep last) that may not fall along a chunk's positions, and a chunk uses at most one of several
  cell sets of which none contains another. With layer indices (swap on) every assignment is allowed.

Among the plans of least time, the one that swaps the fewest bytes, then the one that keeps the fewest, is
taken (three solves). `least_peak` gives the smallest peak any plan reaches (what `auto` names when nothing
fits) and `best_plans` the k fastest distinct plans within the budget (`auto --measure`'s rivals), by
partitioning the plans by their option counts (Lawler). `tests/unit/test_auto_solver.py` checks the search
against every assignment written as YAML and estimated, on small stages.
"""

from __future__ import annotations

import contextlib
import contextvars
import heapq
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

from .choices import Choice
from .limits import AscendStage, CpuStage
from .milp import KIB, Program, Solved, SolverError

NS = 1e9                # the objective in nanoseconds: HiGHS's absolute gap (1e-6) is then far below a plan's time
TIE_NS = 1e-3           # plans whose times differ by less are equally fast: fewer bytes swapped, then kept, decide
_TIGHTENINGS = 5


@dataclass(frozen=True, slots=True, kw_only=True)
class Option:
    """A choice at one position of a stage, with what it costs there."""

    choice: Choice
    kept: int               # bytes of the layer the stage's peak counts (per micro-batch)
    rebuilt: int
    swapped: int
    attention: bool         # some attention tensor is rebuilt
    seconds: float          # added step time: recompute plus swap transfer not hidden
    prefetch: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Solution:
    options: tuple[Option, ...]
    seconds: float
    proven: bool = True     # False: HiGHS stopped at its time limit with this plan, not proven the fastest


@dataclass(frozen=True, slots=True)
class _Segment:
    """Consecutive positions of one chunk offered the same options."""

    chunk: int
    start: int
    size: int
    options: tuple[Option, ...]


@dataclass(slots=True)
class _Built:
    """A stage's programme: the variables a plan is known by (`counts`, the same indices at every budget), the
    objectives in order, and how to read a plan off a solution."""

    program: Program
    counts: list[int]
    objectives: list[dict[int, float]]
    decode: Callable[[Solved], list[Option]]


def solve_stage(problem, budget: float, host_budget: float, *, prefixes: bool,
                need_swap: bool = False) -> Solution | None:
    """The least-time plan (with `need_swap`, among those that swap some layer), or None when no plan meets the
    budget. `problem` is a `problem.StageProblem`."""
    found = _solve_counts(problem, budget, host_budget, prefixes, need_swap, [])
    return None if found is None else found[0]


def best_plans(problem, budget: float, host_budget: float, *, prefixes: bool, count: int) -> list[Solution]:
    """The `count` fastest distinct plans within the budget, fastest first (Lawler's partition: after each plan,
    the rest of its part of the space is split by its option counts into parts that exclude it)."""
    built = _build(problem, budget, host_budget, prefixes, False)
    if built is None:
        return []
    counts = built.counts
    order = itertools.count()
    heap: list = []

    def push(bounds: list[tuple[int, float, float]]) -> None:
        found = _solve_counts(problem, budget, host_budget, prefixes, False, bounds)
        if found is not None:
            heapq.heappush(heap, (found[0].seconds, next(order), bounds, found))

    push([])
    plans: list[Solution] = []
    while heap and len(plans) < count:
        _, _, bounds, (found, values) = heapq.heappop(heap)
        plans.append(found)
        fixed = list(bounds)
        for var, value in zip(counts, values):
            push([*fixed, (var, -math.inf, value - 1)])
            push([*fixed, (var, value + 1, math.inf)])
            fixed.append((var, value, value))
    return plans


def least_peak(problem, host_budget: float, *, prefixes: bool, need_swap: bool = False) -> int | None:
    """The smallest peak in bytes any plan of the stage reaches (None: no plan meets the host budget)."""
    limits = problem.limits
    if isinstance(limits, CpuStage):
        built = _cpu(problem, math.inf, prefixes, least=True)
        solved = _lexicographic(built)
        return None if solved is None else limits.peak(built.decode(solved))
    best = None
    for rebuilt in sorted({option.rebuilt for options in problem.positions for option in options}):
        held = [tuple(option for option in options if option.rebuilt <= rebuilt) for options in problem.positions]
        built = _ascend(problem, held, {rebuilt: math.inf}, host_budget, prefixes, need_swap, least=True)
        solved = None if built is None else _lexicographic(built)
        if solved is not None:
            peak = limits.peak(built.decode(solved))
            best = peak if best is None else min(best, peak)
    return best


def _solve_counts(problem, budget: float, host_budget: float, prefixes: bool, need_swap: bool,
                  bounds: list[tuple[int, float, float]]) -> tuple[Solution, list[int]] | None:
    """The least-time plan under extra bounds on the count variables, and its counts; searched again with the
    budget lowered by the excess when the integer check finds the solver's plan over it (its tolerance), at most
    `_TIGHTENINGS` times."""
    held, host_held = budget, host_budget
    for attempt in range(_TIGHTENINGS):
        built = _build(problem, held, host_held, prefixes, need_swap)
        if built is None:
            return None
        for var, low, high in bounds:
            built.program.lower[var] = max(built.program.lower[var], low)
            built.program.upper[var] = min(built.program.upper[var], high)
        solved = _lexicographic(built)
        if solved is None:
            return None
        options = built.decode(solved)
        excess = problem.limits.peak(options) - budget
        host = problem.limits.host(options) - host_budget
        if excess <= 0 and host <= 0:
            return (Solution(options=tuple(options), seconds=sum(option.seconds for option in options),
                             proven=solved.optimal),
                    [round(solved[var]) for var in built.counts])
        if host > 0:
            host_held -= host * 2**attempt
        if excess > 0:
            held -= excess * 2**attempt
    raise SolverError("the per-stage search's plans stayed over the budget after it was lowered by their excess "
                      f"{_TIGHTENINGS} times: a numerical failure")


_FEASIBILITY: contextvars.ContextVar[bool] = contextvars.ContextVar("feasibility_only", default=False)


@contextlib.contextmanager
def feasibility_only():
    """Within it, plans are found by time alone, without the tie-breaking solves: for callers that ask only whether
    some plan fits (`balance`'s search of the smallest budget), whose answer the ties do not change."""
    token = _FEASIBILITY.set(True)
    try:
        yield
    finally:
        _FEASIBILITY.reset(token)


def _lexicographic(built: _Built) -> Solved | None:
    """Least time, then among plans of that time least swapped, then least kept bytes. Each objective already
    reached is held (within `TIE_NS`, or a billionth of its value) as a row of its own scale while the next is
    minimised."""
    program = built.program
    solved = None
    objectives = built.objectives[:1] if _FEASIBILITY.get() else built.objectives
    for rank, objective in enumerate(objectives):
        program.objective = objective
        found = program.solve()
        if found is None:
            return solved
        solved = found
        if rank + 1 < len(objectives):
            reached = solved.value(objective)
            scale = 2.0 ** -math.floor(math.log2(max(abs(value) for value in objective.values())))
            slack = TIE_NS if rank == 0 else 1e-9 * abs(reached) + 1e-9
            program.row({var: value * scale for var, value in objective.items()}, -math.inf,
                        (reached + slack) * scale, "objective reached")
    return solved


def _build(problem, budget: float, host_budget: float, prefixes: bool, need_swap: bool) -> _Built | None:
    limits = problem.limits
    if isinstance(limits, CpuStage):
        if need_swap:
            return None             # nothing is swapped on CPU
        return _cpu(problem, budget, prefixes)
    caps = _caps(problem, limits, budget)
    if not caps:
        return None
    return _ascend(problem, problem.positions, caps, host_budget, prefixes, need_swap)


def _caps(problem, limits: AscendStage, budget: float) -> dict[int, float]:
    """Each value the largest rebuilt layer can take, with the most kept bytes the budget then holds; a value is
    dropped when a larger one has the same cap (it admits more)."""
    values = sorted({option.rebuilt for options in problem.positions for option in options})
    # a cap above what the stage can keep at most holds every plan: it is written as that most (plus one), so that
    # a budget of petabytes does not put coefficients far apart in the programme
    most = sum(max(option.kept for option in options) for options in problem.positions) + 1
    caps = {value: min(limits.kept_cap(value, int(budget)), most) for value in values}
    return {value: cap for value, cap in caps.items()
            if cap >= 0 and not any(other > value and caps[other] == cap for other in caps)}


def _segments(positions, chunk_starts: frozenset[int]) -> list[_Segment]:
    segments: list[_Segment] = []
    chunk = -1
    for index, options in enumerate(positions):
        if index in chunk_starts or index == 0:
            chunk += 1
        last = segments[-1] if segments else None
        if last is not None and last.chunk == chunk and last.options == tuple(options):
            segments[-1] = _Segment(chunk=chunk, start=last.start, size=last.size + 1, options=last.options)
        else:
            segments.append(_Segment(chunk=chunk, start=index, size=1, options=tuple(options)))
    return segments


def _level(choice: Choice, cells: frozenset[str]) -> int:
    """Where a choice sits in a chunk's chain of count-form settings (see the module)."""
    if choice.full:
        return 0
    chosen = frozenset(choice.select)
    return len(cells) + 1 if not chosen else 1 + len(cells - chosen)


def _cells(options) -> frozenset[str]:
    return frozenset(cell for option in options for cell in option.choice.select)


def _ascend(problem, positions, caps: dict[int, float], host_budget: float, prefixes: bool, need_swap: bool,
            least: bool = False) -> _Built | None:
    """Counts per segment and option (see the module); with `least`, the kept bytes are minimised instead."""
    limits: AscendStage = problem.limits
    segments = _segments(positions, problem.chunk_starts)
    program = Program(name="per-stage search")
    # the counts first, one per segment and option whatever the budget: `best_plans` bounds them by index
    counts = {(index, number): program.var(0, segment.size, integer=True)
              for index, segment in enumerate(segments) for number in range(len(segment.options))}
    picks = {value: program.var(0, 1, integer=True) for value in caps}
    program.row(dict.fromkeys(picks.values(), 1.0), 1, 1, "one largest rebuilt layer")
    for index, segment in enumerate(segments):
        for number, option in enumerate(segment.options):
            allowed = [var for value, var in picks.items() if value >= option.rebuilt]
            var = counts[(index, number)]
            if not allowed:
                program.upper[var] = 0.0
                continue
            program.row({var: 1.0, **dict.fromkeys(allowed, -float(segment.size))}, -math.inf, 0,
                        "rebuilt within the largest")
        members = [counts[(index, number)] for number in range(len(segment.options))]
        program.row(dict.fromkeys(members, 1.0), segment.size, segment.size, f"layers of segment {index}")
    option_of = {var: segments[index].options[number] for (index, number), var in counts.items()}
    if not least:   # the cap of the picked value, as the smallest cap plus each pick's difference from it
        lowest = min(caps.values())
        program.row({**{var: option.kept / KIB for var, option in option_of.items()},
                     **{picks[value]: -(cap - lowest) / KIB for value, cap in caps.items()}}, -math.inf,
                    lowest / KIB, "kept bytes")
    if host_budget != math.inf and limits.factor:
        program.row({var: limits.factor * option.swapped / KIB for var, option in option_of.items()},
                    -math.inf, host_budget / KIB, "host bytes")
    if need_swap:
        program.row({var: 1.0 for var, option in option_of.items() if option.choice.swaps}, 1, math.inf,
                    "some layer swaps")
    if prefixes:
        _chains(program, segments, {(index, number): var for (index, number), var in counts.items()})
    kept = {var: option.kept / KIB for var, option in option_of.items()}
    objectives = [kept] if least else [
        {var: option.seconds * NS for var, option in option_of.items()},
        {var: option.swapped / KIB for var, option in option_of.items() if option.swapped}, kept]

    cells = _cells(option for segment in segments for option in segment.options)

    def order(option: Option) -> tuple:
        return (_level(option.choice, cells),) if prefixes else _strength(option.choice)

    def decode(solved: Solved) -> list[Option]:
        picked: list[Option] = []
        for index, segment in enumerate(segments):
            chosen = [(option, round(solved[counts[(index, number)]])) for number, option in enumerate(segment.options)]
            for option, times in sorted(chosen, key=lambda item: order(item[0])):
                picked += [option] * times
        return picked

    return _Built(program=program, counts=list(counts.values()), objectives=[item for item in objectives if item],
                  decode=decode)


def _chains(program: Program, segments: list[_Segment], counts: dict[tuple[int, int], int]) -> None:
    """The count forms' chain per chunk (see the module), on counts per segment and option."""
    for chunk in sorted({segment.chunk for segment in segments}):
        members = [(index, segment) for index, segment in enumerate(segments) if segment.chunk == chunk]
        cells = _cells(option for _, segment in members for option in segment.options)
        subsets: dict[frozenset[str], int] = {}
        for index, segment in members:
            for number, option in enumerate(segment.options):
                if option.choice.swaps:
                    raise ValueError("the count forms cannot say a swap")
                chosen = frozenset(option.choice.select)
                if option.choice.full or not chosen or chosen == cells:
                    continue
                if chosen not in subsets:
                    subsets[chosen] = program.var(0, 1, integer=True)
                program.row({counts[(index, number)]: 1.0, subsets[chosen]: -float(segment.size)}, -math.inf, 0,
                            "one cell set per chunk")
        for (one, a), (other, b) in itertools.combinations(subsets.items(), 2):
            if not (one <= other or other <= one):
                program.row({a: 1.0, b: 1.0}, -math.inf, 1, "cell sets that do not contain each other")
        for (index, earlier), (later_index, later) in zip(members, members[1:]):
            levels = len(cells) + 2
            turn = [program.var(0, 1, integer=True) for _ in range(levels)]
            program.row(dict.fromkeys(turn, 1.0), 1, 1, "where the chain turns between segments")
            for position, segment in ((index, earlier), (later_index, later)):
                for number, option in enumerate(segment.options):
                    level = _level(option.choice, cells)
                    allowed = turn[level:] if position == index else turn[:level + 1]
                    program.row({counts[(position, number)]: 1.0, **dict.fromkeys(allowed, -float(segment.size))},
                                -math.inf, 0, "levels rise along the chunk")


def _strength(choice: Choice) -> tuple:
    """Strongest first: so that a stage's layer indices come out as runs of one choice."""
    return (not choice.full, -len(choice.select), choice.select, not choice.swaps, not choice.layer_swap,
            choice.op_swap)


def _cpu(problem, budget: float, prefixes: bool, least: bool = False) -> _Built:
    """A binary per position and option, prefix and suffix sums per kind of checkpoint (see the module); with
    `least`, the largest checkpoint is minimised instead of held to the budget."""
    limits: CpuStage = problem.limits
    terms = limits.terms
    options = problem.positions[0]
    if any(tuple(other) != tuple(options) for other in problem.positions):
        raise ValueError("the cpu search needs the same options at every position")
    n, program = len(problem.positions), Program(name="per-stage search (cpu)")
    picks = [[program.var(0, 1, integer=True) for _ in options] for _ in range(n)]
    for index, row in enumerate(picks):
        program.row(dict.fromkeys(row, 1.0), 1, 1, f"one option at position {index}")
    totals = [program.var(0, n, integer=True) for _ in options]
    for number, total in enumerate(totals):
        program.row({total: 1.0, **{picks[index][number]: -1.0 for index in range(n)}}, 0, 0, "layers per option")
    attention = [total for total, option in zip(totals, options) if option.attention]
    masked = program.var(0, 1 if attention else 0, integer=True)
    if attention:
        program.row({**dict.fromkeys(attention, 1.0), masked: -float(n)}, -math.inf, 0, "the mask when attention "
                    "is rebuilt")
    top = program.var(-math.inf, math.inf) if least else None

    def held(expression: dict[int, float], constant: int, label: str) -> None:
        if top is not None:
            program.row({**expression, top: -1.0}, -math.inf, -constant / KIB, label)
        else:
            program.row(expression, -math.inf, (budget - constant) / KIB, label)
    sums: dict[tuple, list[dict[int, float]]] = {}
    for kind in terms.at:
        prefix = _running(program, picks, options, terms.before[kind], sums, forward=True)
        suffix = _running(program, picks, options, terms.after[kind], sums, forward=False)
        for index in range(n):
            key = (kind, index)
            expression = _add(prefix[index], suffix[index],
                              {picks[index][number]: terms.at[kind][option.choice] / KIB
                               for number, option in enumerate(options)}, {masked: terms.mask[key] / KIB})
            held(expression, terms.constants[key], f"{kind} of layer {index}")
    for kind, by_choice in terms.whole.items():
        key = (kind, None)
        expression = _add({total: by_choice[option.choice] / KIB for total, option in zip(totals, options)},
                          {masked: terms.mask[key] / KIB})
        held(expression, terms.constants[key], kind)
    if prefixes:
        levels = [_level(option.choice, _cells(options)) for option in options]
        starts = problem.chunk_starts | {0}
        for index in range(1, n):
            if index not in starts:
                program.row({**{picks[index][number]: float(level) for number, level in enumerate(levels)},
                             **{picks[index - 1][number]: -float(level) for number, level in enumerate(levels)}},
                            0, math.inf, "levels rise along the chunk")
        _cpu_subsets(program, picks, options, problem.chunk_starts | {0})
    seconds = {total: option.seconds * NS for total, option in zip(totals, options)}
    kept = {total: option.kept / KIB for total, option in zip(totals, options)}

    def decode(solved: Solved) -> list[Option]:
        return [next(option for var, option in zip(row, options) if round(solved[var])) for row in picks]

    objectives = [{top: 1.0}] if top is not None else [seconds, kept]
    return _Built(program=program, counts=totals, objectives=objectives, decode=decode)


def _cpu_subsets(program: Program, picks: list[list[int]], options, starts: frozenset[int]) -> None:
    """At most one of the cell sets that do not contain each other per chunk."""
    cells = _cells(options)
    proper = [(number, frozenset(option.choice.select)) for number, option in enumerate(options)
              if not option.choice.full and option.choice.select and frozenset(option.choice.select) != cells]
    bounds = sorted(starts) + [len(picks)]
    for begin, end in zip(bounds, bounds[1:]):
        used = {number: program.var(0, 1, integer=True) for number, _ in proper}
        for number, _ in proper:
            program.row({**{picks[index][number]: 1.0 for index in range(begin, end)},
                         used[number]: -float(end - begin)}, -math.inf, 0, "one cell set per chunk")
        for (a, one), (b, other) in itertools.combinations(proper, 2):
            if not (one <= other or other <= one):
                program.row({used[a]: 1.0, used[b]: 1.0}, -math.inf, 1, "cell sets that do not contain each other")


def _running(program: Program, picks: list[list[int]], options, by_choice: dict, sums: dict,
             forward: bool) -> list[dict[int, float]]:
    """Per position, the sum of `by_choice` over the positions before it (`forward`) or after it, as an expression
    over one continuous variable per position (shared between kinds of checkpoint with the same terms)."""
    coefficients = tuple(by_choice[option.choice] / KIB for option in options)
    key = (forward, coefficients)
    if key in sums:
        return sums[key]
    n = len(picks)
    if not any(coefficients):
        sums[key] = [{} for _ in range(n)]
        return sums[key]
    order = range(n) if forward else range(n - 1, -1, -1)
    running: list[dict[int, float]] = [{} for _ in range(n)]
    previous: int | None = None
    last: int | None = None
    for index in order:
        if last is not None:
            var = program.var(-math.inf, math.inf)
            row = {var: 1.0, **{picks[last][number]: -value for number, value in enumerate(coefficients)}}
            if previous is not None:
                row[previous] = -1.0
            program.row(row, 0, 0, "running sum")
            previous = var
            running[index] = {var: 1.0}
        last = index
    sums[key] = running
    return running


def _add(*expressions: dict[int, float]) -> dict[int, float]:
    total: dict[int, float] = {}
    for expression in expressions:
        for var, value in expression.items():
            total[var] = total.get(var, 0.0) + value
    return total
