"""Text and JSON forms of `auto --balance`: the plan as written and the balanced plan, side by side."""

from __future__ import annotations

from ..estimate.report import human, human_up
from .report import layer_span, text_table
from .results import Balanced, InfeasibleBudget, PipelinePlan
from .writer import describe


def balance_text(result: Balanced) -> str:
    written, balanced = result.written, result.balanced
    lines = [f"{result.config}: ascend runtime; budget {human(result.budget)} of device memory per stage "
             f"(from {result.budget_source}); "
             f"pipeline layout and plan chosen for the least predicted step time ({result.plan.time_source})",
             f"offsets as written: {written.offsets}",
             f"offsets balanced:   {balanced.offsets}"
             + (f"  (the layout as written: {result.why})" if result.layout == "as written" else ""), ""]
    rows = [["stage", "written: layers", "peak", "time / step", "balanced: layers", "peak", "time / step"]]
    for old, new in zip(written.stages, balanced.stages):
        rows.append([str(old.stage), _layers(old.layers), _peak(old.peak, result.budget), f"{old.seconds:.3f} s",
                     _layers(new.layers), _peak(new.peak, result.budget), f"{new.seconds:.3f} s"])
    lines += text_table(rows) + [""]
    lines.append(f"predicted step time: written {written.step_s:.3f} s, balanced {balanced.step_s:.3f} s "
                 f"(x{result.ratio:.3f}); slowest stage: written {_slowest(written)}, balanced {_slowest(balanced)}")
    over = [stage.stage for stage in written.stages if stage.peak > result.budget]
    if over:
        lines.append(f"the plan as written is over the budget in stage(s) {', '.join(map(str, over))}")
    lines.append("")
    for plan in result.plan.stages:
        lines.append(f"stage {plan.stage}: " + describe(plan.layers, [option.choice for option in plan.options],
                                                        [option.prefetch for option in plan.options]))
    lines += [f"repair: {note}" for note in (*result.notes, *result.plan.repairs)]
    lines += [f"note: {note}" for note in result.plan.notes]
    lines.append(f"planned in {result.wall_s:.2f} s")
    return "\n".join(lines)


def balance_json(result: Balanced) -> dict:
    return {"config": result.config, "runtime": "ascend", "budget_bytes": result.budget,
            "budget_source": result.budget_source, "feasible": True,
            "layout": result.layout, "layout_reason": result.why or None, "written": _plan_json(result.written),
            "balanced": _plan_json(result.balanced),
            "step_time_ratio": result.ratio, "planning_seconds": result.wall_s, "family": result.plan.family,
            "repairs": [*result.notes, *result.plan.repairs], "notes": list(result.plan.notes),
            "compress_methods": list(result.plan.compress), "yaml": result.text}


def balance_infeasible_text(error: InfeasibleBudget) -> str:
    peaks = ", ".join(f"stage {stage}: {human_up(value)}" for stage, value in sorted(error.peaks.items()))
    margin = f", with the {error.margin * 100:g}% margin" if error.margin else ""
    return (f"auto --balance: infeasible: no layout and plan fits {human(error.budget)} of device memory per stage. "
            f"The smallest budget that works{margin}: {human_up(error.smallest)} ({error.smallest} bytes, at which it "
            f"plans; the plan made for it predicts these peaks: {peaks}; stage {error.binding} binds).")


def _plan_json(plan: PipelinePlan) -> dict:
    return {"offsets": plan.offsets, "step_seconds": plan.step_s,
            "stages": [{"stage": stage.stage, "layers": list(stage.layers), "peak_bytes": stage.peak,
                        "seconds_per_step": stage.seconds} for stage in plan.stages]}


def _layers(layers: tuple[int, ...]) -> str:
    return f"{len(layers)} ({layer_span(layers)})" if layers else "0"


def _peak(peak: int, budget: int) -> str:
    return human(peak) + (" OVER" if peak > budget else "")


def _slowest(plan: PipelinePlan) -> str:
    stage = max(plan.stages, key=lambda item: item.seconds)
    return f"stage {stage.stage}"
