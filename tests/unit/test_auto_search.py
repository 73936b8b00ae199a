"""The per-stage search (`auto/solver.py`) against brute force on random stages, and its cost at every size.

Each stage here is random: options with random bytes and times, segments of positions offered different options
(layers of two kinds, a last layer that never swaps), interleave chunks, host budgets, and for the cpu runtime
random checkpoint terms that count a layer before, at and after each position. Brute force enumerates every
assignment, keeps those the YAML can say (the count forms' rule, written out as the old layer search applied it:
a setting may only continue what the previous layer of the chunk used) and those within the budget, and takes
the least time. The search must find that time, at budgets on and one byte under every plan's peak.
"""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass
from pathlib import Path

import pytest

from mf_memopt.auto import InfeasibleBudget, auto_plan
from mf_memopt.auto.choices import KEEP, Choice
from mf_memopt.auto.limits import CpuStage, CpuTerms, most_kept
from mf_memopt.auto.milp import Program, SolverError
from mf_memopt.auto.solver import Option, best_plans, least_peak, solve_stage

ROOT = Path(__file__).resolve().parents[2]
A, B, AB = Choice(select=("a",)), Choice(select=("b",)), Choice(select=("a", "b"))
FULLY = Choice(full=True)
SWAP_A, SWAP_B, A_SWAP_B = Choice(op_swap=("a",)), Choice(op_swap=("b",)), Choice(select=("a",), op_swap=("b",))
COUNTS = (KEEP, A, B, AB, FULLY)
INDICES = (*COUNTS, SWAP_A, SWAP_B, A_SWAP_B)


@dataclass(frozen=True)
class Problem:
    """What the search reads of a `problem.StageProblem`."""

    positions: tuple[tuple[Option, ...], ...]
    limits: object
    chunk_starts: frozenset[int]


@dataclass(frozen=True)
class AscendLike:
    """An ascend stage's peak: a constant, the kept bytes times the micro-batches in flight, and the larger of the
    largest rebuilt layer plus a working set and the loss (the shape of `estimate.memory.ascend_peak`)."""

    base: int
    factor: float
    working: int
    loss: int

    def peak_of(self, kept: int, rebuilt: int) -> int:
        return self.base + round(self.factor * kept) + max(rebuilt + self.working, self.loss)

    def peak(self, options) -> int:
        return self.peak_of(sum(option.kept for option in options), max(option.rebuilt for option in options))

    def host(self, options) -> int:
        return round(self.factor * sum(option.swapped for option in options))

    def kept_cap(self, rebuilt: int, budget: int) -> int:
        return most_kept(self.peak_of, rebuilt, budget)


def _option(rng: random.Random, choice: Choice, scale: int) -> Option:
    keeps = {KEEP: 1.0, A: 0.6, B: 0.7, AB: 0.3, FULLY: 0.05, SWAP_A: 0.55, SWAP_B: 0.5, A_SWAP_B: 0.2}
    seconds = {KEEP: 0, A: 2, B: 3, AB: 5, FULLY: 6, SWAP_A: 0, SWAP_B: 0, A_SWAP_B: 2}
    kept = int(scale * keeps[choice] * rng.uniform(0.8, 1.2))
    return Option(choice=choice, kept=kept, rebuilt=0 if choice == KEEP else int(scale * rng.uniform(0.1, 0.5)),
                  swapped=int(scale * rng.uniform(0.2, 0.5)) if choice.swaps else 0,
                  attention="a" in choice.select or choice.full,
                  seconds=0.0 if not seconds[choice] else seconds[choice] * 1e-3 * rng.uniform(0.7, 1.3))


def _ascend_problem(rng: random.Random, swaps: bool) -> Problem:
    n = rng.randint(2, 5 if swaps else 6)
    offered = INDICES if swaps else COUNTS
    kinds = [tuple(_option(rng, choice, 1 << 26) for choice in offered) for _ in range(2)]
    dense = rng.randint(0, n - 1)
    positions = [kinds[0] if index < dense else kinds[1] for index in range(n)]
    positions[-1] = tuple(option for option in positions[-1] if not option.choice.swaps)     # the last never swaps
    starts = frozenset({0, rng.randint(1, n - 1)}) if rng.random() < 0.4 else frozenset({0})
    limits = AscendLike(base=1 << 30, factor=rng.choice([1.0, 2.0, 2.5]), working=1 << 25, loss=1 << 27)
    return Problem(positions=tuple(positions), limits=limits, chunk_starts=starts)


def _writable(choices: tuple[Choice, ...], starts: frozenset[int]) -> bool:
    """The count forms' rule as the old layer search applied it: along a chunk, a layer may use only the settings
    the previous layer used (full recompute leaves every select setting available)."""
    everything = frozenset().union(*(choice.features for choice in COUNTS))
    available = everything
    for index, choice in enumerate(choices):
        if index in starts:
            available = everything
        if choice.swaps or not choice.features <= available:
            return False
        available = available if choice.full else choice.features & available
    return True


def _plans(problem: Problem) -> list[tuple[float, int, int, bool, bool, tuple[Choice, ...]]]:
    """Every assignment once: (seconds, peak, host bytes, writable in the count forms, swaps, choices)."""
    if id(problem) not in _PLANS:
        found = []
        for picked in itertools.product(*problem.positions):
            choices = tuple(option.choice for option in picked)
            found.append((sum(option.seconds for option in picked), problem.limits.peak(list(picked)),
                          problem.limits.host(list(picked)), _writable(choices, problem.chunk_starts),
                          any(choice.swaps for choice in choices), choices))
        _PLANS[id(problem)] = (problem, sorted(found, key=lambda item: item[0]))     # the problem held: its id stays
    return _PLANS[id(problem)][1]


_PLANS: dict = {}


def _brute(problem: Problem, budget: int, host: float, prefixes: bool, need_swap: bool = False
           ) -> list[tuple[float, int, tuple[Choice, ...]]]:
    """Every plan within the budget: (seconds, peak, choices), fastest first."""
    return [(seconds, peak, choices) for seconds, peak, swapped, writable, swaps, choices in _plans(problem)
            if (writable or not prefixes) and (swaps or not need_swap) and peak <= budget and swapped <= host]


def _budgets(problem: Problem, prefixes: bool) -> list[int]:
    peaks = sorted({peak for _, peak, _ in _brute(problem, 1 << 62, math.inf, prefixes)})
    picked = peaks[::max(1, len(peaks) // 6)] + [peaks[-1]]
    return sorted({budget for peak in picked for budget in (peak, peak - 1)})


def _same_time(found, expected) -> bool:
    if found is None or not expected:
        return found is None and not expected
    return found.seconds == pytest.approx(expected[0][0], abs=1e-12)


@pytest.mark.parametrize("seed", range(24))
def test_ascend_search_equals_brute_force(seed):
    rng = random.Random(seed)
    swaps = seed % 2 == 1
    problem = _ascend_problem(rng, swaps)
    prefixes = not swaps
    host = rng.choice([math.inf, 1 << 27, 1 << 28])
    for budget in _budgets(problem, prefixes):
        expected = _brute(problem, budget, host, prefixes)
        found = solve_stage(problem, budget, host, prefixes=prefixes)
        assert _same_time(found, expected), (seed, budget)
        if found is not None:
            assert problem.limits.peak(list(found.options)) <= budget
            assert problem.limits.host(list(found.options)) <= host
            assert not prefixes or _writable(tuple(option.choice for option in found.options), problem.chunk_starts)
        if swaps:
            assert _same_time(solve_stage(problem, budget, host, prefixes=False, need_swap=True),
                              _brute(problem, budget, host, False, need_swap=True)), (seed, budget)


@pytest.mark.parametrize("seed", range(12))
def test_least_peak_is_the_smallest_peak_of_any_plan(seed):
    rng = random.Random(100 + seed)
    swaps = seed % 2 == 1
    problem = _ascend_problem(rng, swaps)
    host = rng.choice([math.inf, 1 << 27])
    plans = _brute(problem, 1 << 62, host, not swaps)
    assert least_peak(problem, host, prefixes=not swaps) == min(peak for _, peak, _ in plans)


def _cpu_problem(rng: random.Random, n: int) -> Problem:
    """A cpu stage with random terms: per-layer checkpoints of two kinds whose constants grow with the position
    (not always linearly), before/at/after terms per choice, two whole-stage checkpoints and a mask."""
    choices = COUNTS
    kinds = ("backward", "attention backward")

    def vector(low: int, high: int) -> dict:
        return {choice: 0 if choice == KEEP else rng.randint(low, high) for choice in choices}

    before = {kind: vector(-(6 << 20), 1 << 18) for kind in kinds}
    at = {kind: vector(-(2 << 20), 4 << 20) for kind in kinds}
    after = {kind: vector(0, 8 << 10) for kind in kinds}
    whole = {"end of the forward": vector(-(6 << 20), 0), "optimizer": vector(0, 8 << 10)}
    constants = {(kind, index): (40 << 20) + index * (7 << 20) + rng.randint(0, 1 << 20)
                 for kind in kinds for index in range(n)}
    constants.update({("end of the forward", None): (40 << 20) + n * (7 << 20), ("optimizer", None): 30 << 20})
    mask = {key: rng.choice([0, 1 << 20]) if key[1] is None else 1 << 20 for key in constants}
    terms = CpuTerms(before=before, at=at, after=after, whole=whole, constants=constants, mask=mask,
                     attention={choice: "a" in choice.select or choice.full for choice in choices})
    options = tuple(Option(choice=choice, kept=max(0, (8 << 20) + before[kinds[0]][choice]), rebuilt=0, swapped=0,
                           attention=terms.attention[choice], seconds=0.0 if choice == KEEP else rng.uniform(1, 5))
                    for choice in choices)
    return Problem(positions=(options,) * n, limits=CpuStage(family=None, model=None, terms=terms, positions=n),
                   chunk_starts=frozenset({0}))


def test_cpu_terms_count_a_layer_before_at_and_after_each_position():
    terms = _cpu_problem(random.Random(0), 3).limits.terms
    plan = [FULLY, A, KEEP]
    values = terms.checkpoints(plan)
    masked = terms.mask[("backward", 1)]       # some attention is rebuilt
    assert values[("backward", 1)] == (terms.constants[("backward", 1)] + masked + terms.before["backward"][FULLY]
                                       + terms.at["backward"][A] + terms.after["backward"][KEEP])
    assert values[("backward", 0)] == (terms.constants[("backward", 0)] + masked + terms.at["backward"][FULLY]
                                       + terms.after["backward"][A])
    assert values[("optimizer", None)] == (terms.constants[("optimizer", None)] + terms.mask[("optimizer", None)]
                                           + terms.whole["optimizer"][FULLY] + terms.whole["optimizer"][A])


@pytest.mark.parametrize("seed", range(16))
def test_cpu_search_equals_brute_force(seed):
    rng = random.Random(1000 + seed)
    problem = _cpu_problem(rng, rng.randint(2, 6))
    for budget in _budgets(problem, True):
        assert _same_time(solve_stage(problem, budget, math.inf, prefixes=True),
                          _brute(problem, budget, math.inf, True)), (seed, budget)
    plans = _brute(problem, 1 << 62, math.inf, True)
    assert least_peak(problem, math.inf, prefixes=True) == min(peak for _, peak, _ in plans)


@pytest.mark.parametrize("seed", range(8))
def test_best_plans_are_the_fastest_distinct_plans_in_order(seed):
    """`auto --measure`'s rivals: the k fastest plans within the budget, each once, as brute force ranks them."""
    rng = random.Random(2000 + seed)
    problem = _cpu_problem(rng, rng.randint(3, 5)) if seed % 2 else _ascend_problem(rng, False)
    budgets = _budgets(problem, True)
    budget = budgets[len(budgets) // 2]
    expected = _brute(problem, budget, math.inf, True)
    found = best_plans(problem, budget, math.inf, prefixes=True, count=4)
    assert len(found) == min(4, len(expected))
    assert len({tuple(option.choice for option in plan.options) for plan in found}) == len(found)
    assert [plan.seconds for plan in found] == pytest.approx([seconds for seconds, _, _ in expected[:4]], abs=1e-12)
    assert all(problem.limits.peak(list(plan.options)) <= budget for plan in found)


def test_the_count_forms_chain_holds_in_each_chunk():
    """Two chunks of three layers: each chunk may start again from full recompute, and in each the settings
    narrow along the layers; one cell per chunk."""
    rng = random.Random(5)
    options = tuple(_option(rng, choice, 1 << 20) for choice in COUNTS)
    problem = Problem(positions=(options,) * 6, limits=AscendLike(base=0, factor=1.0, working=0, loss=0),
                      chunk_starts=frozenset({0, 3}))
    for budget in _budgets(problem, True):
        found = solve_stage(problem, budget, math.inf, prefixes=True)
        assert _same_time(found, _brute(problem, budget, math.inf, True))
        assert found is None or _writable(tuple(option.choice for option in found.options), problem.chunk_starts)


def test_a_badly_scaled_programme_is_refused_and_a_row_breaking_answer_is_caught():
    """The defect class behind `auto --balance`'s wrong answers: a programme with rows in bytes beside rows in MiB.
    It is refused before HiGHS sees it, and an answer that breaks a row is never read as a plan."""
    program = Program(name="test programme")
    x = program.var(0, 10, integer=True)
    y = program.var(0, 1e12)
    program.row({x: 3.4e8, y: 1e-3}, -math.inf, 1.2e9, "bytes beside MiB")
    program.objective = {x: -1.0}
    with pytest.raises(SolverError, match="badly scaled"):
        program.solve()
    program = Program(name="test programme")
    x = program.var(0, 10, integer=True)
    program.row({x: 1.0}, 2.5, 2.6, "no integer fits")
    assert program.solve() is None      # infeasible, and said so


def _layers(tmp_path: Path, n: int) -> Path:
    text = (ROOT / "configs/planning/llama2_7b_swap_pp2.yaml").read_text().replace("num_layers: 32",
                                                                                  f"num_layers: {n}")
    path = tmp_path / f"llama_{n}.yaml"
    path.write_text(text)
    return path


def test_thousands_of_layers_plan_between_full_recompute_and_nothing(tmp_path):
    """The search's size does not grow with the layers on the ascend runtime (counts per segment): 1024 layers give
    the empty plan at once above their no-recompute peak (the layer-by-layer search did not finish from 512 layers
    there), plan at a budget where some layers must recompute, and name the smallest budget below it. The times,
    and 10,000 layers, are in `benchmarks/auto_scale.py`."""
    config = _layers(tmp_path, 1024)
    probe = auto_plan(config, budget=1 << 60)
    assert probe.empty and probe.priced_s == 0.0
    low = max(stage.peak.peak for stage in probe.references["full recompute"].stages)
    high = max(stage.peak.peak for stage in probe.references["nothing"].stages)
    plan = auto_plan(config, budget=(low + high) // 2)
    assert 0 < plan.priced_s and plan.fits
    with pytest.raises(InfeasibleBudget) as error:
        auto_plan(config, budget=low // 2)
    smallest = max(error.value.minimum.values())
    assert smallest <= low and auto_plan(config, budget=smallest).fits


def test_a_status_other_than_optimal_is_reported_not_read_as_nothing_fits(monkeypatch, tmp_path):
    """HiGHS stopping at its time limit with a plan: the plan is used and the report says it is not proven the
    fastest; stopping without one, or failing, is an error that says what HiGHS said, never "no plan fits"."""
    from types import SimpleNamespace

    import mf_memopt.auto.milp as milp_module

    real = milp_module.milp

    def stopped(*args, **kwargs):
        result = real(*args, **kwargs)
        return SimpleNamespace(status=1, x=result.x, message="Time limit reached")

    monkeypatch.setattr(milp_module, "milp", stopped)
    config = _layers(tmp_path, 64)
    probe = auto_plan(config, budget=1 << 60)
    low = max(stage.peak.peak for stage in probe.references["full recompute"].stages)
    high = max(stage.peak.peak for stage in probe.references["nothing"].stages)
    plan = auto_plan(config, budget=(low + high) // 2)
    assert plan.fits and any("stopped at its time limit" in note for note in plan.repairs)
    monkeypatch.setattr(milp_module, "milp", lambda *args, **kwargs: SimpleNamespace(
        status=4, x=None, message="Numerical difficulties"))
    with pytest.raises(SolverError, match="HiGHS found no answer to the per-stage search: Numerical difficulties"):
        auto_plan(config, budget=(low + high) // 2)
