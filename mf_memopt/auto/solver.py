"""Choose one option per layer of a pipeline stage: least added step time under the stage's budget.

The stages are independent (each has its own device and its own peak), so each is solved
alone; least added time per stage is then also least for the sum and for the slowest stage.

Inside a stage the search is a dynamic programme over the layers in forward order. A state
is (bytes kept so far, bytes swapped so far, which recompute settings may still be used)
with its least added time; a state is dropped when another with the same settings keeps
and swaps no more bytes for no more time (every constraint ahead grows with those two
sums, so nothing reachable from it can be better); states that swap some layer are kept
apart from those that do not, so that "the best plan that swaps something" is exact too.
Each `Run` (see `limits.py`) fixes the one term of the peak that is not a sum. The result
is the exact optimum over the options offered; `tests/test_auto_solver.py` checks it
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


@dataclass(frozen=True, slots=True, kw_only=True)
class Solution:
    options: tuple[Option, ...]
    seconds: float


# A state: (kept, swapped, seconds, swaps, available, parent state, option); tuples keep the inner loop cheap.
_KEPT, _SWAPPED, _SECONDS, _SWAPS, _AVAILABLE, _PARENT, _OPTION = range(7)


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
    states: list[tuple] = [(0, 0, 0.0, False, everything if prefixes else None, None, None)]
    for index, options in enumerate(positions):
        cap = run.prefix_caps[index]
        states = [state for state in states if state[_KEPT] <= cap]
        admitted = [(option, option.choice.features, option.choice.full, option.choice.swaps,
                     option.swapped if track_swapped else 0)
                    for option in _undominated([option for option in options if run.admits(option)],
                                               prefixes, track_swapped)]
        grown = []
        for state in states:
            kept0, swapped0, seconds0, swaps0, available, _, _ = state
            if prefixes and index in chunk_starts:
                available = everything
            for option, features, full, swaps, swapped in admitted:
                if available is not None and not features <= available:
                    continue
                kept = kept0 + option.kept
                if kept > run.total_cap or swapped0 + swapped > run.host_cap:
                    continue
                narrowed = available if available is None or full else features & available
                grown.append((kept, swapped0 + swapped, seconds0 + option.seconds, swaps0 or swaps, narrowed, state,
                              option))
        states = _frontier(grown)
    states = [state for state in states if state[_SWAPS] or not need_swap]
    if not states:
        return None
    end = min(states, key=lambda state: (state[_SECONDS], state[_KEPT], state[_SWAPPED]))
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
        group.sort(key=lambda state: (state[_KEPT], state[_SWAPPED], state[_SECONDS]))
        if not any(state[_SWAPPED] for state in group):
            kept += _frontier_1d(group)
            continue
        frontier: list[tuple] = []
        for state in group:
            if not any(other[_SWAPPED] <= state[_SWAPPED] and other[_SECONDS] <= state[_SECONDS]
                       for other in frontier):
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


def _undominated(options: list[Option], prefixes: bool, track_swapped: bool) -> list[Option]:
    """Drop an option when another keeps, swaps and costs no more (with the same settings in the count
    family, where the settings decide what later layers may use; a swap only for another swap, so that
    the best plan that swaps something stays reachable)."""
    kept = []
    for option in sorted(options, key=lambda item: (item.kept, item.swapped, item.seconds)):
        if not any((other.swapped <= option.swapped or not track_swapped) and other.seconds <= option.seconds
                   and (other.choice.swaps or not option.choice.swaps)
                   and (not prefixes or other.choice.features == option.choice.features) for other in kept):
            kept.append(option)
    return kept
