"""`auto --measure` (CPU): train one step of the plan, read the memory-pool peak, tighten and plan again; then
race the plan against its nearest rivals and keep the fastest that holds the budget (a rival must be faster by
more than the race's resolution, `RESOLUTION`).

The launcher runs in a child process (`run_mindformer_memopt.py --run_mode train
--train_steps 1`) with MindSpore's pool report on (`GLOG_v=2`,
`MS_SUBMODULE_LOG_v={PRE_ACT:1}`), so the peak printed at exit belongs to that plan alone.
When the measured peak is over the budget, the next round plans for the previous plan's
predicted peak (at most its target) minus the measured excess; at most `ROUNDS` rounds.
The time loop measures each rival's peak the same way, and races the plans that hold the budget in one process
(`race.py`): their steps are compared with the first raced plan's steps of the same batches, where a slow stretch
of the machine slows both alike.
"""

from __future__ import annotations

import statistics
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..config.load import Document
from ..runs.measure import CPU_READING_STEP, measure_peak
from . import race as racing
from .results import AutoPlan, InfeasibleBudget
from .timing import load_average

ROUNDS = 3
# A rival replaces the first plan (auto's, priced fastest by the profile) only when the race times it faster by more
# than this. Six copies of one plan raced in one process (a 3-layer Llama, hidden 160) measured 0.970-1.037 of the
# first copy: one race does not tell plans apart closer than that. On the brute-force benchmark's seeds 20261127
# and 20261128, each of the four rivals kept for leading auto's plan in its race (by 0-5.8%) was slower than auto's
# plan by the referee (by 0.6-3.7%).
RESOLUTION = 0.05


@dataclass(frozen=True, slots=True, kw_only=True)
class Round:
    number: int
    planned_for: int            # bytes the plan was made for
    predicted: int              # the estimator's peak of the written plan
    measured: int               # the pool peak, bytes (MindSpore prints whole MiB, cut down)
    plan: AutoPlan

    def line(self, budget: int) -> str:
        from ..estimate.report import human

        verdict = "within the budget" if holds(self.measured, budget) else \
            f"over by up to {human(highest(self.measured) - budget)}"
        return (f"round {self.number}: planned for {human(self.planned_for)}, "
                f"predicted peak {human(self.predicted)}, "
                f"measured pool peak {human(self.measured)} (under {human(highest(self.measured) + 1)}): {verdict}")


def highest(measured: int) -> int:
    """The largest peak in bytes a reading stands for: MindSpore prints the CPU pool peak in whole MiB, cut down, so
    a reading of m MiB is a peak below m + 1 MiB."""
    return measured + CPU_READING_STEP - 1


def holds(measured: int, budget: int) -> bool:
    """The measured plan holds the budget in bytes: every peak its reading stands for is within it."""
    return highest(measured) <= budget


class TightenedInfeasible(Exception):
    """A later `--measure` round found no plan for the target the measured excess tightened it to."""

    def __init__(self, rounds: list[Round], target: int, error: InfeasibleBudget, budget: int):
        from ..estimate.report import human

        self.rounds, self.target, self.error, self.budget = rounds, target, error, budget
        last = rounds[-1]
        super().__init__(
            f"round {last.number}'s plan, made for {human(last.planned_for)}, measured {human(last.measured)} in the "
            f"memory pool, over the {human(budget)} budget by up to {human(highest(last.measured) - budget)}; round "
            f"{last.number + 1} planned for that much less, {human(target)}, and no plan is predicted to fit it (the "
            f"smallest predicted peak is {human(max(error.peaks.values()))}): the estimate is too low for this config "
            "by more than the room left; give a larger --device-memory")


def train_peak(config: Path, work: Path) -> int:
    """Train one step of `config` with the launcher in a child process; the pool peak in bytes.

    A failed run raises MeasureError with the child's own error line."""
    work.mkdir(parents=True, exist_ok=True)
    return measure_peak(config, runtime="cpu", steps=1, workdir=work).peak_bytes


def measure_rounds(plan_for: Callable[[int], AutoPlan], budget: int, output: Path | None,
                   report: Callable[[str], None], train: Callable[[Path, Path], int] = train_peak) -> list[Round]:
    """Plan, train, compare; tighten by the measured excess; the rounds made (the last one's plan is written)."""
    rounds: list[Round] = []
    target = budget
    with tempfile.TemporaryDirectory(prefix="mf_memopt_auto_") as tmp:
        for number in range(1, ROUNDS + 1):
            try:
                plan = plan_for(target)
            except InfeasibleBudget as error:
                if not rounds:
                    raise
                raise TightenedInfeasible(rounds, target, error, budget) from error
            written = output or Path(tmp) / f"round{number}.yaml"
            written.write_text(plan.text, encoding="utf-8")
            work = Path(tmp) / f"run{number}"
            work.mkdir()
            measured = train(written.resolve(), work)
            rounds.append(Round(number=number, planned_for=target,
                                predicted=max(stage.peak.peak for stage in plan.estimate.stages),
                                measured=measured, plan=plan))
            report(rounds[-1].line(budget))
            if holds(measured, budget):
                break
            # The plan landed at its predicted peak (at most the target): the excess is counted from there.
            target = min(target, rounds[-1].predicted) - (highest(measured) - budget)
    return rounds


@dataclass(frozen=True, slots=True, kw_only=True)
class Timed:
    """A plan of the time loop: its pool peak (a run of it alone) and its step time in each race."""

    plan: AutoPlan
    name: str
    peak: int
    times: tuple[float, ...]            # each race's step time (seconds): the first raced plan's lower quartile
                                        # times this plan's steps over its steps of the same batches (median)

    @property
    def time_s(self) -> float:
        """The plan's step time: the median over the races."""
        return statistics.median(self.times)


def measure_time(plans: list[tuple[str, AutoPlan]], budget: int, work: Path, report: Callable[[str], None],
                 runs: int = 1, peak=None, race=None, known: dict[int, int] | None = None) -> tuple[int, list[Timed]]:
    """Measure each plan's pool peak (`peak(config, work)`, bytes; `known[i]` is plan i's when already measured),
    then race the plans that hold the budget `runs` times (`race(configs, work)`: each one's timed step seconds).
    Returns the index of the fastest plan that holds the budget, where plan 0, when it holds the budget, gives way
    only to a plan faster by more than `RESOLUTION` (plan 0 when none holds it), and the raced plans'
    measurements."""
    peak, race = peak or train_peak, race or racing.race
    peaks = dict(known or {})
    configs = []
    for index, (name, plan) in enumerate(plans):
        configs.append((work / f"plan{index}.yaml").resolve())
        configs[-1].write_text(plan.text, encoding="utf-8")
        if index not in peaks:
            peaks[index] = peak(configs[-1], work / f"peak{index}")
            report(f"time: {name}: pool peak {peaks[index] / 2**20:.0f} MiB"
                   + ("" if holds(peaks[index], budget) else ": over the budget, not raced"))
    holding = [index for index in range(len(plans)) if holds(peaks[index], budget)]
    times: dict[int, list[float]] = {index: [] for index in holding}
    for repeat in range(runs):
        races = _anchored_races(race, configs, holding, work / f"race{repeat}", report)
        anchor = racing.lower_quartile(races[0][1][0])  # the first plan holding the budget (auto's own), first race
        for number, (group, timed) in enumerate(races):     # each plan priced against the anchor of its own race
            for index, seconds in zip(group, timed):
                if index != group[0] or number == 0:
                    times[index].append(anchor * racing.paired_ratio(seconds, timed[0]))
        report(f"time: race {repeat + 1}/{runs}: " + ", ".join(f"{plans[index][0]} {times[index][-1] * 1e3:.0f} ms"
                                                               for index in holding))
    raced = {index: Timed(plan=plans[index][1], name=plans[index][0], peak=peaks[index], times=tuple(times[index]))
             for index in holding}
    winner = min(holding, key=lambda index: (raced[index].time_s, index)) if holding else 0
    if winner != 0 and 0 in raced and raced[winner].time_s > (1 - RESOLUTION) * raced[0].time_s:
        report(f"time: {plans[winner][0]} ran {1 - raced[winner].time_s / raced[0].time_s:.1%} faster than "
               f"{plans[0][0]}: within the race's resolution ({RESOLUTION:.0%}), the first plan is kept")
        winner = 0
    return winner, list(raced.values())


def _anchored_races(race, configs: list[Path], holding: list[int], work: Path, report: Callable[[str], None]
                    ) -> list[tuple[list[int], list[tuple[float, ...]]]]:
    """The plans `holding` (indices, the first the anchor) raced at once, or, where a race is killed for memory (it
    holds every plan), in halves that each race the anchor too, down to the anchor and one plan."""
    waiting, done, tried = [holding], [], 0
    while waiting:
        group, tried = waiting.pop(0), tried + 1
        try:
            done.append((group, race([configs[index] for index in group], work / str(tried))))
        except racing.RaceKilled:
            if len(group) <= 2:
                raise
            middle = len(group) // 2 + 1
            waiting[:0] = [group[:middle], [group[0], *group[middle:]]]
            report(f"time: a race of {len(group)} plans was killed (out of memory?): racing them in two races, "
                   "the first plan in each")
    return done


def measure_plan(document: Document, plan_for: Callable[[int], AutoPlan], budget: int, times, *,
                 rivals: int = 3, runs: int = 1, peak=None, race=None,
                 report: Callable[[str], None] = lambda line: None,
                 hardware=None) -> tuple[list[Round], AutoPlan, list[Timed]]:
    """`auto --measure`: the peak rounds (`measure_rounds`), then, when the plan holds the budget, the time loop
    (`measure_time`): the plan and its `rivals` next-fastest plans whose predicted peak fits (`space.rivals`, priced
    as the search prices them, at `hardware`'s throughput where no profile prices them), each one's peak measured
    and those holding the budget raced `runs` times; the fastest is kept, a rival only when faster than the plan by
    more than `RESOLUTION`. `peak(config, work)` gives a plan's pool peak (default: the launcher, one step),
    `race(configs, work)` each plan's timed step seconds (default: `race.race`)."""
    from .space import rivals as nearest

    peak = peak or train_peak
    rounds = measure_rounds(plan_for, budget, None, report=report, train=peak)
    plan = rounds[-1].plan
    if not holds(rounds[-1].measured, budget) or rivals <= 0 or plan.empty:     # nothing recomputed: nothing is faster
        return rounds, plan, []
    others = nearest(document, plan, count=rivals, times=times, hardware=hardware)
    plans = [("auto's plan: " + _stages_text(plan), plan), *others]
    report(f"time: the plan and {len(others)} rival(s): each one's peak, then a race of those holding the budget "
           f"({load_average()})")
    with tempfile.TemporaryDirectory(prefix="mf_memopt_auto_time_") as tmp:
        winner, timed = measure_time(plans, budget, Path(tmp), report, runs=runs, peak=peak, race=race,
                                     known={0: rounds[-1].measured})
    report(f"time: kept {plans[winner][0]} ({load_average()})")
    return rounds, plans[winner][1], timed


def _stages_text(plan: AutoPlan) -> str:
    from .writer import describe

    return "; ".join(describe(stage.layers, [option.choice for option in stage.options],
                              [option.prefetch for option in stage.options]) for stage in plan.stages)
