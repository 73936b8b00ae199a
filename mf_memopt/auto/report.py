"""Text and JSON forms of an `auto` plan, with the reference plans beside it."""

from __future__ import annotations

from pathlib import Path

from ..estimate.core import Estimate
from ..estimate.report import human, human_up
from .results import INFINITE, AutoPlan, InfeasibleBudget
from .writer import describe


def auto_text(result: AutoPlan) -> str:
    host = "unlimited" if result.host_budget == INFINITE else human(result.host_budget)
    family = ("layer indices with swap" if result.family == "indices"
              else "per-stage counts (no swap)")
    lines = [f"{result.config}: {result.runtime} runtime; budget {human(result.budget)} of device memory per stage "
             f"(from {result.budget_source}), host memory {host}; plan written as {family}", _margin_line(result),
             f"added time priced by the {result.time_source}: {result.priced_s * 1e3:.1f} ms per step for this "
             "plan", ""]
    (_, nothing), (strongest, full) = result.references.items()
    rows = [["stage", "layers", "budget", "predicted peak", "host (swap)", "overhead", "nothing: peak", "overhead",
             f"{strongest}: peak", "overhead"]]
    for stage, base, every in zip(result.estimate.stages, nothing.stages, full.stages):
        rows.append([str(stage.stage), layer_span(stage.layers), human(result.budget), human(stage.peak.peak),
                     human(stage.host_bytes), f"{stage.overhead:.1%}", human(base.peak.peak), f"{base.overhead:.1%}",
                     human(every.peak.peak), f"{every.overhead:.1%}"])
    lines += text_table(rows) + [""]
    for plan in result.stages:
        lines.append(f"stage {plan.stage}: " + describe(plan.layers, [option.choice for option in plan.options],
                                                        [option.prefetch for option in plan.options]))
    if result.empty:
        lines.append(f"the budget is at or above the peak without any recompute or swap "
                     f"({human(max(stage.peak.peak for stage in nothing.stages))}): the plan is empty")
    lines += [f"repair: {note}" for note in result.repairs]
    lines += [f"note: {note}" for note in result.notes]
    if not result.fits:
        lines.append("WARNING: the estimate of the written plan is over the budget in some stage")
    return "\n".join(lines)


def _margin_line(result: AutoPlan) -> str:
    if result.margin:
        return (f"predicted peaks held to {human(result.target)}: the budget less a {result.margin * 100:g}% margin "
                f"for the estimator's error (--margin 0 to plan to the budget itself; --measure checks by training)")
    if result.runtime == "cpu":
        return "no margin: predicted peaks held to the budget itself"
    return ("no margin: predicted peaks held to the budget itself (the ascend terms are not measured on this "
            "machine; give --margin for headroom)")


def auto_json(result: AutoPlan) -> dict:
    return {
        "config": result.config, "runtime": result.runtime, "budget_bytes": result.budget,
        "budget_source": result.budget_source,
        "margin": result.margin, "target_bytes": result.target,
        "host_budget_bytes": None if result.host_budget == INFINITE else result.host_budget,
        "family": result.family, "time_source": result.time_source, "priced_added_seconds": result.priced_s,
        "empty": result.empty, "fits": result.fits, "feasible": True, "notes": list(result.notes),
        "compress_methods": list(result.compress),
        "stages": [_stage_json(plan, stage) for plan, stage in zip(result.stages, result.estimate.stages)],
        "references": {name: _reference(estimate) for name, estimate in result.references.items()},
        "repairs": list(result.repairs), "yaml": result.text}


def _stage_json(plan, stage) -> dict:
    return {"stage": stage.stage, "layers": list(stage.layers), "searched_budget_bytes": plan.budget,
            "peak_bytes": stage.peak.peak, "peak_at": stage.peak.checkpoint, "host_bytes": stage.host_bytes,
            "overhead": stage.overhead, "recompute_seconds": stage.recompute_s, "swap_stall_seconds": stage.stall_s,
            "searched_added_seconds": plan.searched_s,
            "plan": [{"layer": layer, "choice": option.choice.name, "backward_prefetch": option.prefetch}
                     for layer, option in zip(plan.layers, plan.options)]}


def _reference(estimate: Estimate) -> list[dict]:
    return [{"stage": stage.stage, "peak_bytes": stage.peak.peak, "overhead": stage.overhead}
            for stage in estimate.stages]


def infeasible_text(error: InfeasibleBudget) -> str:
    parts = [f"stage {stage}: {human_up(value)}" + (" (binding)" if stage == error.binding else "")
             for stage, value in sorted(error.minimum.items())]
    margin = f", with the {error.margin * 100:g}% margin" if error.margin else ""
    return (f"auto: no plan fits {human(error.budget)} of device memory per stage; the smallest budget each stage "
            f"can meet{margin}: {', '.join(parts)}. Give at least {human_up(error.smallest)} "
            f"(stage {error.binding} binds).")


def infeasible_json(error: InfeasibleBudget) -> dict:
    return {"feasible": False, "budget_bytes": error.budget, "margin": error.margin, "binding_stage": error.binding,
            "smallest_budget_bytes": error.smallest,
            "minimum_budget_bytes": {str(stage): value for stage, value in sorted(error.minimum.items())},
            "least_peak_bytes": {str(stage): value for stage, value in sorted(error.peaks.items())}}


def layer_span(layers: tuple[int, ...]) -> str:
    """The layers as runs: `0-3,5`."""
    runs: list[list[int]] = []
    for layer in layers:
        if runs and runs[-1][1] == layer - 1:
            runs[-1][1] = layer
        else:
            runs.append([layer, layer])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def text_table(rows: list[list[str]]) -> list[str]:
    """The rows as lines of left-aligned columns, two spaces apart."""
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]


def measure_json(rounds) -> list[dict]:
    """`auto --measure`'s peak rounds (`measure.Round`), bytes."""
    return [{"round": item.number, "planned_for_bytes": item.planned_for, "predicted_peak_bytes": item.predicted,
             "measured_peak_bytes": item.measured} for item in rounds]


def timed_json(timed, kept: AutoPlan) -> list[dict]:
    """`auto --measure`'s raced plans (`measure.Timed`): peak, step time per race, which one was kept."""
    return [{"plan": item.name, "peak_bytes": item.peak, "step_seconds": item.time_s,
             "race_step_seconds": list(item.times), "kept": item.plan is kept} for item in timed]


def measure_text(rounds, timed, kept: AutoPlan, budget: int) -> str:
    """The lines `auto --measure` prints after the plan: the last peak round's verdict and every raced plan."""
    from .measure import highest, holds

    last = rounds[-1]
    verdict = "within" if holds(last.measured, budget) else "over"
    lines = [f"measured after {len(rounds)} round(s): the plan made for {human(last.planned_for)} peaks at "
             f"{human(last.measured)} in the memory pool (under {human(highest(last.measured) + 1)}), {verdict} the "
             f"{human(budget)} budget"]
    lines += [f"{'kept' if item.plan is kept else 'rival'}: {item.name}: pool peak {human(item.peak)}, step "
              f"{item.time_s * 1e3:.0f} ms (median of {len(item.times)} race(s))" for item in timed]
    return "\n".join(lines)


def auto_output_json(result: AutoPlan, output: Path | None, rounds=None, timed=None) -> dict:
    """`auto --json`: the plan (`auto_json`), the file it was written to, and with `--measure` its peak rounds and
    raced plans (`rounds` and `timed`, as `measure.measure_plan` gives them)."""
    data = auto_json(result)
    data["output"] = str(output) if output else None
    if rounds is not None:
        data["measure"] = measure_json(rounds)
        data["timed"] = timed_json(timed, result)
    return data


def auto_output_text(result: AutoPlan, output: Path | None, budget: int | None, rounds=None, timed=None) -> str:
    """`auto`'s text: the plan (`auto_text`), with `--measure` what its rounds and races measured, and where the YAML
    was written."""
    lines = [auto_text(result)]
    if rounds is not None:
        lines.append(measure_text(rounds, timed, result, budget))
    lines.append(f"written to {output}" if output else "(no --output: the YAML was not written)")
    return "\n".join(lines)


def tightened_json(error) -> dict:
    """`auto --measure --json` when a later round finds no plan (`measure.TightenedInfeasible`): the budget it could
    not meet, and the rounds before it."""
    return {**infeasible_json(error.error), "measure": measure_json(error.rounds)}
