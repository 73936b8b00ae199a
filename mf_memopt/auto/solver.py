"""Choose one option per layer of a pipeline stage: least added step time under the stage's budget.

The stages are independent (each has its own device and its own peak), so each is solved
alone; least added time per stage is then also least for the sum and for the slowest stage.

Inside a stage the search is a dynamic programme over the layers in forward order. A state
is (bytes kept so far, bytes swapped so far, which recompute settings may still be used)
with its least added time; a state is dropped when another with the same settings keeps
and swaps no more bytes for no more time (every constraint ahead grows with those two
sums, so nothing reachable from it can be better); states that swap some layer are kept
apart from those that do not, so that "the best plan that swaps something" is exact too. Each `Run` (see `limits.py`) fixes the
one term that is not a sum. The result is the exact optimum of the stage model over the
options offered; `tests/test_auto_solver.py` checks it against brute force through the
estimator.

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


@dataclass(slots=True)
class _State:
    kept: int
    swapped: int
    seconds: float
    swaps: bool                     # some layer so far swaps
    available: frozenset[str] | None
    parent: _State | None
    option: Option | None


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
    states = [_State(0, 0, 0.0, False, everything if prefixes else None, None, None)]
    for index, options in enumerate(positions):
        states = [state for state in states if state.kept <= run.prefix_caps[index]]
        admitted = [option for option in options if run.admits(option)]
        grown = []
        for state in states:
            available = everything if prefixes and index in chunk_starts else state.available
            for option in admitted:
                if available is not None and not option.choice.features <= available:
                    continue
                kept, swapped = state.kept + option.kept, state.swapped + (option.swapped if track_swapped else 0)
                if kept > run.total_cap or swapped > run.host_cap:
                    continue
                grown.append(_State(kept, swapped, state.seconds + option.seconds,
                                    state.swaps or option.choice.swaps, _narrow(available, option.choice), state,
                                    option))
        states = _frontier(grown)
    states = [state for state in states if state.swaps or not need_swap]
    if not states:
        return None
    end = min(states, key=lambda state: (state.seconds, state.kept, state.swapped))
    picked = []
    node: _State | None = end
    while node is not None and node.option is not None:
        picked.append(node.option)
        node = node.parent
    return Solution(options=tuple(reversed(picked)), seconds=end.seconds)


def _narrow(available: frozenset[str] | None, choice: Choice) -> frozenset[str] | None:
    if available is None:
        return None
    return available if choice.full else choice.features & available


def _frontier(states: list[_State]) -> list[_State]:
    """The states no other state with the same settings beats on kept bytes, swapped bytes and time."""
    groups: dict[tuple, list[_State]] = {}
    for state in states:
        groups.setdefault((state.available, state.swaps), []).append(state)
    kept = []
    for group in groups.values():
        group.sort(key=lambda state: (state.kept, state.swapped, state.seconds))
        if not any(state.swapped for state in group):
            kept += _frontier_1d(group)
            continue
        frontier: list[_State] = []
        for state in group:
            if not any(other.swapped <= state.swapped and other.seconds <= state.seconds for other in frontier):
                frontier = [other for other in frontier
                            if not (state.kept <= other.kept and state.swapped <= other.swapped
                                    and state.seconds <= other.seconds)]
                frontier.append(state)
        kept += frontier
    return kept


def _frontier_1d(group: list[_State]) -> list[_State]:
    """Sorted by kept bytes: a state stays only if it is faster than every state keeping no more."""
    frontier, fastest = [], float("inf")
    for state in group:
        if state.seconds < fastest:
            frontier.append(state)
            fastest = state.seconds
    return frontier
