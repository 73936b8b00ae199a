"""Choose one option per layer of a pipeline stage: least added step time under the stage's budget.

The stages are independent (each has its own device and its own peak), so each is solved
alone; least added time per stage is then also least for the sum and for the slowest stage.

Inside a stage the search is a dynamic programme over the layers in forward order. A state
is (bytes kept so far, bytes swapped so far, which recompute settings may still be used)
with its least added time; a state is dropped when another with the same settings keeps
and swaps no more bytes for no more time (every constraint ahead grows with those two
sums, so nothing reachable from it can be better); states that swap some layer are kept
apart from those that do not, so that "the best plan that swaps something" is exact too.
On cpu a state also carries a second whole-stage sum (`Option.extra`, the weight copies made
when the step starts when they depend on the choices) and is dropped only when another is no
worse on every sum. A layer's option may also lower the cap on the bytes kept before it
(`Run.prefix_cap`: what the option adds to its own layer's checkpoints), so one option
replaces another only if it is allowed wherever the other is.
Each `Run` (see `limits.py`) fixes the one term of the peak that is not a sum. The result
is the exact optimum over the options offered; `tests/unit/test_auto_solver.py` checks it
against brute force through the estimator.

Per-stage count forms (`recompute: [n, ...]`, `select_recompute: {cell: [n, ...]}`, used
when nothing is swapped) apply to the *first* n layers of each stage or chunk, so in that
family each setting must cover a prefix of the chunk: the state's `available` set is the
settings still allowed, and a layer may only use settings its predecessor used (full
recompute leaves the select settings available, because the counts of later select layers
may include it: full recompute wins in those layers). With layer indices (swap on) every
assignment is allowed.
"""

from __future__ import annotations

from dataclasses import dataclass

from .choices import Choice
from .limits import Run


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
    extra: int = 0          # bytes of a second whole-stage sum (cpu: see `limits.CpuStage`)


@dataclass(frozen=True, slots=True, kw_only=True)
class Solution:
    options: tuple[Option, ...]
    seconds: float


# A state: (kept, swapped, seconds, swaps, available, parent state, option, extra); tuples keep the inner loop
# cheap. `swapped` and `extra` are two further sums with whole-stage caps.
_KEPT, _SWAPPED, _SECONDS, _SWAPS, _AVAILABLE, _PARENT, _OPTION, _EXTRA = range(8)


def solve_stage(positions: list[list[Option]], runs: list[Run], *, prefixes: bool,
                chunk_starts: frozenset[int], need_swap: bool = False) -> Solution | None:
    """The least-time assignment over all runs (with `need_swap`, among those that swap some layer),
    or None when no assignment meets the limits."""
    best: Solution | None = None
    for run in runs:
        found = _solve_run(positions, run, prefixes=prefixes, chunk_starts=chunk_starts, need_swap=need_swap)
        if found is not None and (best is None or found.seconds < best.seconds - 1e-15):
            best = found
    return best


def _solve_run(positions: list[list[Option]], run: Run, *, prefixes: bool, chunk_starts: frozenset[int],
               need_swap: bool) -> Solution | None:
    everything = frozenset().union(*(option.choice.features for options in positions for option in options))
    track_swapped = run.host_cap != float("inf")
    track_extra = run.extra_cap != float("inf")
    states: list[tuple] = [(0, 0, 0.0, False, everything if prefixes else None, None, None, 0)]
    for index, options in enumerate(positions):
        caps = {id(option): run.prefix_cap(index, option) for option in options if run.admits(option)}
        admitted = [(option, option.choice.features, option.choice.full, option.choice.swaps,
                     option.swapped if track_swapped else 0, option.extra if track_extra else 0, caps[id(option)])
                    for option in _undominated([option for option in options if id(option) in caps],
                                               prefixes, track_swapped, track_extra, caps)]
        grown = []
        for state in states:
            kept0, swapped0, seconds0, swaps0, available, _, _, extra0 = state
            if prefixes and index in chunk_starts:
                available = everything
            for option, features, full, swaps, swapped, extra, cap in admitted:
                if kept0 > cap or (available is not None and not features <= available):
                    continue
                kept = kept0 + option.kept
                if kept > run.total_cap or swapped0 + swapped > run.host_cap or extra0 + extra > run.extra_cap:
                    continue
                narrowed = available if available is None or full else features & available
                grown.append((kept, swapped0 + swapped, seconds0 + option.seconds, swaps0 or swaps, narrowed, state,
                              option, extra0 + extra))
        states = _frontier(grown)
    states = [state for state in states if state[_SWAPS] or not need_swap]
    if not states:
        return None
    end = min(states, key=lambda state: (state[_SECONDS], state[_KEPT], state[_SWAPPED], state[_EXTRA]))
    picked = []
    node = end
    while node[_OPTION] is not None:
        picked.append(node[_OPTION])
        node = node[_PARENT]
    return Solution(options=tuple(reversed(picked)), seconds=end[_SECONDS])


def _frontier(states: list[tuple]) -> list[tuple]:
    """The states no other state with the same settings beats on kept bytes, swapped bytes and time."""
    groups: dict[tuple, list[tuple]] = {}
    for state in states:
        groups.setdefault((state[_AVAILABLE], state[_SWAPS]), []).append(state)
    kept = []
    for group in groups.values():
        group.sort(key=lambda state: (state[_KEPT], state[_SWAPPED], state[_EXTRA], state[_SECONDS]))
        if not any(state[_SWAPPED] or state[_EXTRA] for state in group):
            kept += _frontier_1d(group)
            continue
        frontier: list[tuple] = []
        for state in group:
            if not any(other[_SWAPPED] <= state[_SWAPPED] and other[_EXTRA] <= state[_EXTRA]
                       and other[_SECONDS] <= state[_SECONDS] for other in frontier):
                frontier.append(state)
        kept += frontier
    return kept


def _frontier_1d(group: list[tuple]) -> list[tuple]:
    """Sorted by kept bytes: a state stays only if it is faster than every state keeping no more."""
    frontier, fastest = [], float("inf")
    for state in group:
        if state[_SECONDS] < fastest:
            frontier.append(state)
            fastest = state[_SECONDS]
    return frontier


def _undominated(options: list[Option], prefixes: bool, track_swapped: bool, track_extra: bool,
                 caps: dict[int, float]) -> list[Option]:
    """Drop an option when another keeps, swaps and costs no more (with the same settings in the count
    family, where the settings decide what later layers may use; a swap only for another swap, so that
    the best plan that swaps something stays reachable). The other must also be allowed after at
    least as many kept bytes (`Run.prefix_cap`, the cap on the bytes kept before this position)."""
    kept = []
    for option in sorted(options, key=lambda item: (item.kept, item.swapped, item.extra, item.seconds)):
        if not any((other.swapped <= option.swapped or not track_swapped) and other.seconds <= option.seconds
                   and (other.extra <= option.extra or not track_extra) and caps[id(other)] >= caps[id(option)]
                   and (other.choice.swaps or not option.choice.swaps)
                   and (not prefixes or other.choice.features == option.choice.features) for other in kept):
            kept.append(option)
    return kept
