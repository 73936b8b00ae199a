"""`auto --measure` (CPU): train one step of the plan, read the memory-pool peak, tighten and plan again.

The launcher runs in a child process (`run_mindformer_memopt.py --run_mode train
--train_steps 1`) with MindSpore's pool report on (`GLOG_v=2`,
`MS_SUBMODULE_LOG_v={PRE_ACT:1}`), so the peak printed at exit belongs to that plan alone.
When the measured peak is over the budget, the next round plans for the previous plan's
predicted peak (at most its target) minus the measured excess; at most `ROUNDS` rounds.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..config.load import Document
from ..estimate.measure import measure_peak
from .planner import AutoPlan
from .timing import Trained, fastest, load_average, train_run

ROUNDS = 3


@dataclass(frozen=True, slots=True, kw_only=True)
class Round:
    number: int
    planned_for: int            # bytes the plan was made for
    predicted: int              # the estimator's peak of the written plan
    measured: int               # the pool peak, bytes (MindSpore prints whole MiB)
    plan: AutoPlan

    def line(self, budget: int) -> str:
        from ..estimate.report import human

        verdict = "within the budget" if self.measured <= budget else f"over by {human(self.measured - budget)}"
        return (f"round {self.number}: planned for {human(self.planned_for)}, "
                f"predicted peak {human(self.predicted)}, "
                f"measured pool peak {human(self.measured)}: {verdict}")


def train_peak(config: Path, work: Path) -> int:
    """Train one step of `config` with the launcher in a child process; the pool peak in bytes.

    A failed run raises MeasureError with the child's own error line."""
    return measure_peak(config, runtime="cpu", steps=1, workdir=work).peak_bytes


def measure_rounds(plan_for: Callable[[int], AutoPlan], budget: int, output: Path | None,
                   report: Callable[[str], None], train: Callable[[Path, Path], int] = train_peak) -> list[Round]:
    """Plan, train, compare; tighten by the measured excess; the rounds made (the last one's plan is written)."""
    rounds: list[Round] = []
    target = budget
    with tempfile.TemporaryDirectory(prefix="mf_memopt_auto_") as tmp:
        for number in range(1, ROUNDS + 1):
            plan = plan_for(target)
            written = output or Path(tmp) / f"round{number}.yaml"
            written.write_text(plan.text, encoding="utf-8")
            work = Path(tmp) / f"run{number}"
            work.mkdir()
            measured = train(written.resolve(), work)
            rounds.append(Round(number=number, planned_for=target,
                                predicted=max(stage.peak.peak for stage in plan.estimate.stages),
                                measured=measured, plan=plan))
            report(rounds[-1].line(budget))
            if measured <= budget:
                break
            # The plan landed at its predicted peak (at most the target): the excess is counted from there.
            target = min(target, rounds[-1].predicted) - (measured - budget)
    return rounds


@dataclass(frozen=True, slots=True, kw_only=True)
class Timed:
    """A plan trained for its step time: every run (`timing.Trained`)."""

    plan: AutoPlan
    name: str
    runs: tuple[Trained, ...]

    @property
    def peaks(self) -> tuple[int, ...]:
        return tuple(run.peak_bytes for run in self.runs)

    @property
    def times(self) -> tuple[float, ...]:
        return tuple(run.time_s for run in self.runs)

    @property
    def peak(self) -> int:
        return max(self.peaks)

    @property
    def time_s(self) -> float:
        """The fastest run's step time (`timing.fastest`)."""
        return fastest(self.runs)


def measure_time(plans: list[tuple[str, AutoPlan]], budget: int, work: Path, report: Callable[[str], None],
                 runs: int = 2, train=None, first: dict[int, Trained] | None = None) -> tuple[int, list[Timed]]:
    """Train each plan `runs` times, the plans interleaved (run 1 of every plan, then run 2, ...); a plan's time is
    its fastest run's (`timing.fastest`). Returns the index of the fastest plan whose measured pool peak holds the
    budget (else the one with the lowest peak) and every plan's measurement. `first[i]`, when given, is plan i's
    first run already made (the peak rounds trained it)."""
    train = train or train_run
    done: list[list[Trained]] = [[first[index]] if first and index in first else [] for index in range(len(plans))]
    for repeat in range(runs):
        for index, (name, plan) in enumerate(plans):
            if len(done[index]) > repeat:
                continue
            config = work / f"time{index}_{repeat}.yaml"
            config.write_text(plan.text, encoding="utf-8")
            done[index].append(train(config.resolve(), work / f"time{index}_{repeat}"))
            trained = done[index][-1]
            report(f"time: {name}: pool peak {trained.peak_bytes / 2**20:.0f} MiB, step "
                   f"{trained.time_s * 1e3:.0f} ms (run {repeat + 1}/{runs})")
    timed = [Timed(plan=plan, name=name, runs=tuple(done[index])) for index, (name, plan) in enumerate(plans)]
    holding = [index for index, item in enumerate(timed) if item.peak <= budget]
    if holding:
        return min(holding, key=lambda index: (timed[index].time_s, index)), timed
    return min(range(len(timed)), key=lambda index: timed[index].peak), timed


def measure_plan(config: str | Path | Document, plan_for: Callable[[int], AutoPlan], budget: int, times, *,
                 rivals: int = 3, runs: int = 2, train=None, report: Callable[[str], None] = lambda line: None
                 ) -> tuple[list[Round], AutoPlan, list[Timed]]:
    """`auto --measure`: the peak rounds (`measure_rounds`), then, when the plan holds the budget, the time loop:
    the plan and its `rivals` next-fastest plans whose estimate fits (`space.PlanSpace`, priced as the search
    prices them) trained `runs` times each, interleaved; the fastest that holds the budget is kept. `train(config,
    work)` returns a `timing.Trained` (default: the launcher, `timing.STEPS` steps)."""
    from .space import PlanSpace

    train = train or train_run
    trained: dict[str, object] = {}

    def peak_of(path: Path, work: Path) -> int:
        trained[path.read_text(encoding="utf-8")] = run = train(path, work)
        return run.peak_bytes

    rounds = measure_rounds(plan_for, budget, None, report=report, train=peak_of)
    plan = rounds[-1].plan
    if rounds[-1].measured > budget or rivals <= 0 or plan.empty:     # nothing recomputed: nothing is faster
        return rounds, plan, []
    space = PlanSpace(config, runtime="cpu", times=times)
    mine = tuple(option.choice for stage in plan.stages for option in stage.options)
    others = [item for item in space.ranked(plan.target) if item.choices != mine][:rivals]
    plans = [("auto's plan: " + _stages_text(plan), plan)] + [(item.name, space.auto_plan_of(plan, item))
                                                              for item in others]
    report(f"time: training the plan and {len(others)} rival(s), interleaved ({load_average()})")
    with tempfile.TemporaryDirectory(prefix="mf_memopt_auto_time_") as tmp:
        first = {0: trained[plan.text]} if plan.text in trained else {}
        winner, timed = measure_time(plans, budget, Path(tmp), report, runs=runs, train=train, first=first)
    report(f"time: kept {timed[winner].name} ({load_average()})")
    return rounds, timed[winner].plan, timed


def _stages_text(plan: AutoPlan) -> str:
    from .writer import describe

    return "; ".join(describe(stage.layers, [option.choice for option in stage.options],
                              [option.prefetch for option in stage.options]) for stage in plan.stages)
