"""The comparison as text, and as a chart of both loss curves and their difference."""

from __future__ import annotations

from .engine import Comparison


def comparison_text(result: Comparison) -> str:
    lines = [f"base:      {result.base.config}", f"candidate: {result.candidate.config}",
             f"trained {len(result.base.steps)} step(s) each on {result.runtime}, from the same seed, data and "
             "initial weights"]
    lines += ["the candidate changes:"] + [f"  {change}" for change in result.changes or ["nothing in the plan"]]
    if result.exact:
        lines.append("it must be bit-identical: recompute, swap and lossless compression run the same arithmetic")
    else:
        methods = sorted({use.method for use in result.lossy})
        lines.append(f"it quantises {len(result.lossy)} use(s) ({', '.join(methods)}): every step's loss must stay "
                     f"within {result.tolerance:.2%} of the base's")
    lines += ["", f"{'step':>4}  {'base loss':>12}  {'candidate':>12}  {'drift':>9}  {'base norm':>12}  "
                  f"{'candidate':>12}  {'drift':>9}"]
    for b, c, drift, norm in zip(result.base.steps, result.candidate.steps, result.loss_drifts(),
                                 result.norm_drifts()):
        lines.append(f"{b.step:>4}  {_number(b.loss):>12}  {_number(c.loss):>12}  {_percent(drift):>9}  "
                     f"{_number(b.global_norm):>12}  {_number(c.global_norm):>12}  {_percent(norm):>9}")
    if len(result.base.steps) != len(result.candidate.steps):
        lines.append(f"the base recorded {len(result.base.steps)} step(s), the candidate "
                     f"{len(result.candidate.steps)}")
    lines.append("")
    differing = result.differing_parameters()
    total = len(set(result.base.parameters) | set(result.candidate.parameters))
    if total:
        lines.append(f"parameters and optimizer state: {total - len(differing)} of {total} bit-identical"
                     + (f"; differ: {', '.join(differing[:6])}{' ...' if len(differing) > 6 else ''}"
                        if differing else ""))
    lines.append(f"memory-pool peak: base {_mib(result.base.peak_bytes)}, candidate "
                 f"{_mib(result.candidate.peak_bytes)}{_ratio(result)}")
    if result.exact and result.first_difference() is not None:
        lines.append(f"first difference at step {result.first_difference()}")
    if result.not_finite():
        lines.append("the candidate's loss or gradient norm is not finite at step(s) "
                     f"{', '.join(map(str, result.not_finite()))}, where the base's is")
    if not result.exact:
        lines.append(f"loss drift: {result.drift():.3%} at worst (tolerance {result.tolerance:.2%})")
    for probe in result.probes:
        lines.append(f"  bisection: {len(probe.uses)} use(s) alone drift {probe.drift:.3%}: "
                     + ", ".join(use.label() for use in probe.uses))
    if result.keep_exact:
        lines.append("keep exact (each drifts beyond the tolerance on its own): "
                     + "; ".join(use.label() for use in result.keep_exact))
    if result.bisect_note:
        lines.append(f"bisection: {result.bisect_note}")
    lines.append(f"verdict: {result.verdict()}")
    return "\n".join(lines)


def _number(value) -> str:
    return "-" if value is None else f"{value:.7g}"


def _percent(value) -> str:
    return "-" if value is None else ("0" if value == 0 else f"{value:.3%}")


def _mib(value) -> str:
    return "not printed" if value is None else f"{value / 2**20:.0f} MiB"


def _ratio(result: Comparison) -> str:
    base, candidate = result.base.peak_bytes, result.candidate.peak_bytes
    return f" ({candidate / base:.2f}x)" if base and candidate else ""


def write_chart(result: Comparison, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [step.step for step in result.base.steps]
    figure, (losses, drifts) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    losses.plot(steps, [step.loss for step in result.base.steps], label="base", marker="o")
    losses.plot([step.step for step in result.candidate.steps], [step.loss for step in result.candidate.steps],
                label="candidate", marker="x", linestyle="--")
    losses.set_ylabel("loss")
    losses.legend()
    losses.set_title(f"compare: {result.verdict()}")
    drifts.plot(steps[:len(result.loss_drifts())], [d or 0.0 for d in result.loss_drifts()], label="loss")
    drifts.plot(steps[:len(result.norm_drifts())], [d or 0.0 for d in result.norm_drifts()], label="global norm")
    if not result.exact:
        drifts.axhline(result.tolerance, color="red", linestyle=":", label="tolerance")
    drifts.set_ylabel("relative difference")
    drifts.set_xlabel("step")
    drifts.legend()
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
