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

from ..estimate.measure import measure_peak
from .planner import AutoPlan

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
