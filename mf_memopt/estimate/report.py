"""Text and chart forms of an estimate."""

from __future__ import annotations

import math
import re
from pathlib import Path

from .core import Estimate
from .transfer import UNSOURCED

_UNITS = (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))


def human(nbytes: float) -> str:
    for unit, size in _UNITS:
        if abs(nbytes) >= size:
            return f"{nbytes / size:.1f} {unit}"
    return f"{nbytes:.0f} B"


def human_up(nbytes: float) -> str:
    """Like `human`, rounded up to the shown digit: a budget given as printed is enough."""
    for unit, size in _UNITS:
        if nbytes >= size:
            return f"{math.ceil(nbytes / size * 10) / 10:.1f} {unit}"
    return f"{nbytes:.0f} B"


# A size on the command line: a number (digits, a point, an exponent; no spaces inside) and a unit. GB, MB and KB
# are read as MindSpore reads max_device_memory ("58GB" is 58 GiB: kGBToByte = 1024 << 20, kMBToByte = 1024 << 10),
# so a value copied from the YAML means the same bytes here; GiB, MiB and KiB are the same sizes.
SIZE_UNITS = {"": 1, "b": 1, "kb": 2**10, "kib": 2**10, "mb": 2**20, "mib": 2**20, "gb": 2**30, "gib": 2**30}
_SIZE = re.compile(r"(?P<number>(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)\s*(?P<unit>[A-Za-z]*)")


def parse_size(text: str) -> int:
    """The bytes of a command-line size (`58GB`, `58 GiB`, `512MiB`, `1000`): more than 0, finite, whole bytes
    when given in bytes, else rounded down to whole bytes (as MindSpore rounds max_device_memory)."""
    written = text.strip()
    found = _SIZE.fullmatch(written)
    if found is None and written.startswith("-") and _SIZE.fullmatch(written[1:]):
        raise ValueError(f"must be more than 0, got {text!r}")
    unit = SIZE_UNITS.get(found["unit"].lower()) if found else None
    if found is None or unit is None:
        raise ValueError(f"not a size: {text!r} (examples: 64GiB, 32GB, 512MiB)")
    number = found["number"]
    if number.isdigit():
        return _positive(int(number) * unit, text)
    value = float(number) * unit
    if not math.isfinite(value):
        raise ValueError(f"not a finite size: {text!r}")
    if unit == 1 and not value.is_integer():
        raise ValueError(f"not a whole number of bytes: {text!r}")
    return _positive(int(value), text)


def _positive(nbytes: int, text: str) -> int:
    if nbytes < 1:
        raise ValueError(f"must be more than 0, got {text!r}")
    return nbytes


def estimate_text(estimate: Estimate) -> str:
    hardware = estimate.hardware
    lines = [f"{estimate.config}: {estimate.runtime} runtime; device memory {human(hardware.device_memory)} (from "
             f"{estimate.budget_source}), {hardware.tflops:g} TFLOPS, host link {hardware.host_gbps:g} GB/s per "
             "direction" + hardware.codec_text()]
    if estimate.step is not None:
        lines.append(f"training step: {estimate.step.describe()}")
    lines += ["", *_table(_stage_rows(estimate)), ""]
    lines += [f"stage {stage.stage} peak ({stage.peak.checkpoint}): "
              + ", ".join(f"{name} {human(value)}" for name, value in stage.peak.components.items())
              for stage in estimate.stages]
    lines += ["", *_table(_layer_rows(estimate))]
    lines += [f"note: {note}" for note in estimate.notes]
    lines.append(f"note: {UNSOURCED}")
    if estimate.runtime == "cpu":
        lines.append("note: cpu runtime: the MindSpore memory-pool peak of the CPU launcher (parameters and optimizer "
                     "moments are host tensors there); nothing is swapped on CPU")
    return "\n".join(lines)


def _stage_rows(estimate: Estimate) -> list[list[str]]:
    codec = any(stage.codec_s for stage in estimate.stages)    # a column only where a codec time is counted
    rows = [["stage", "layers", "peak", "fits", "static", "activations", "working set", "in flight", "host (swap)",
             "D2H = H2D / step", "compute / step", "recompute", *(["codec"] if codec else []), "swap stalls",
             "overhead"]]
    for stage in estimate.stages:
        peak = stage.peak
        mtp = estimate.model.mtp_layers if stage.stage == len(estimate.stages) - 1 else 0
        rows.append([str(stage.stage), _ranges(stage.layers) + (f" +{mtp} mtp" if mtp else ""),
                     human(peak.peak), "yes" if stage.fits else "NO", human(peak.part("static")),
                     human(peak.part("activations")), human(peak.part("working")), f"{stage.in_flight:g}",
                     human(stage.host_bytes), human(stage.traffic_bytes), f"{stage.compute_s * 1e3:.1f} ms",
                     f"{stage.recompute_s * 1e3:.1f} ms", *([f"{stage.codec_s * 1e3:.1f} ms"] if codec else []),
                     f"{stage.stall_s * 1e3:.1f} ms", f"{stage.overhead:.1%}"])
    return rows


def _ranges(layers: tuple[int, ...]) -> str:
    """`0-3,24-28` for the layers of an interleaved stage."""
    spans: list[list[int]] = []
    for layer in layers:
        if spans and layer == spans[-1][1] + 1:
            spans[-1][1] = layer
        else:
            spans.append([layer, layer])
    return ",".join(f"{low}-{high}" if high > low else str(low) for low, high in spans) or "-"


def _layer_rows(estimate: Estimate) -> list[list[str]]:
    rows = [["layer", "stage", "saved", "kept", "recomputed", "swapped", "leaves device", "transfer", "fwd stall",
             "bwd stall"]]
    for layer in estimate.layers:
        effect, transfer = layer.effect, layer.transfer
        leaves = "-" if not transfer.nbytes else ("no (needed at the turn)" if transfer.on_device_at_turn else "yes")
        rows.append([layer.label, str(layer.stage), human(effect.bytes()), human(effect.bytes("kept")),
                     human(effect.bytes("recomputed")), human(effect.bytes("swapped")), leaves,
                     f"{transfer.transfer_s * 1e3:.2f} ms", f"{transfer.forward_stall_s * 1e3:.2f} ms",
                     f"{transfer.backward_stall_s * 1e3:.2f} ms"])
    return rows


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]


def write_chart(estimate: Estimate, path: str | Path) -> None:
    """Stacked bars per layer (kept / recomputed / swapped), and each stage's peak against the device."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, (bars, peaks) = pyplot.subplots(1, 2, figsize=(15, 5), width_ratios=[3, 1.2])
    _layer_bars(bars, estimate)
    _stage_bars(peaks, estimate)
    figure.suptitle(f"{Path(estimate.config).name}: activation memory per layer and peak per stage "
                    f"({estimate.runtime} runtime)")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    pyplot.close(figure)


_COLOURS = {"kept": "#4c72b0", "recomputed": "#dd8452", "swapped": "#55a868"}
_COMPONENT_COLOURS = {"parameters": "#8c8c8c", "gradients": "#b5b5b5", "optimizer states": "#d9d9d9",
                      "activations kept": "#4c72b0", "swapped, still on device": "#55a868",
                      "backward working set": "#c44e52", "model-level tensors": "#8172b3", "loss tensors": "#937860",
                      "gradients so far": "#b5b5b5", "layer working set": "#c44e52",
                      "optimizer outputs": "#d9d9d9", "weight copies": "#a6a6a6"}


def _layer_bars(axes, estimate: Estimate) -> None:
    from matplotlib.ticker import MaxNLocator

    positions = [layer.layer for layer in estimate.layers]
    bottom = [0.0] * len(positions)
    for fate, colour in _COLOURS.items():
        values = [layer.effect.bytes(fate) / 2**20 for layer in estimate.layers]
        hatches = ["//" if fate == "swapped" and layer.transfer.on_device_at_turn else "" for layer in estimate.layers]
        label = "swapped (hatched: stays on the device)" if fate == "swapped" else fate
        axes.bar(positions, values, bottom=bottom, color=colour, label=label, width=0.8, hatch=hatches)
        bottom = [low + value for low, value in zip(bottom, values)]
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    top = max(bottom, default=1.0) * 1.2 or 1.0
    starts = [index for index, layer in enumerate(estimate.layers)
              if index == 0 or layer.stage != estimate.layers[index - 1].stage]
    for start in starts:
        if start:
            axes.axvline(positions[start] - 0.5, color="grey", linestyle=":", linewidth=1)
        axes.text(positions[start] - 0.4, top * 0.86, f"s{estimate.layers[start].stage}", fontsize="small",
                  color="grey")
    axes.set_xlabel("layer (dotted lines and s<N>: pipeline stage)")
    axes.set_ylabel("activations saved for backward, MiB per micro-batch")
    axes.set_ylim(0, top)
    axes.legend(loc="upper center", ncols=3)


def _stage_bars(axes, estimate: Estimate) -> None:
    names = list(dict.fromkeys(name for stage in estimate.stages for name in stage.peak.components))
    highest = max(stage.peak.peak for stage in estimate.stages)
    unit, scale = ("GiB", 2**30) if highest >= 2**30 else ("MiB", 2**20)
    bottom = [0.0] * len(estimate.stages)
    positions = [stage.stage for stage in estimate.stages]
    for name in names:
        values = [stage.peak.components.get(name, 0) / scale for stage in estimate.stages]
        axes.bar(positions, values, bottom=bottom, label=name, width=0.6, color=_COMPONENT_COLOURS.get(name))
        bottom = [low + value for low, value in zip(bottom, values)]
    device = estimate.hardware.device_memory
    if estimate.runtime != "cpu" and device <= 3 * highest:
        axes.axhline(device / scale, color="red", linestyle="--", label="device memory")
    elif estimate.runtime != "cpu":
        axes.set_title(f"device memory {human(device)}: off this scale", fontsize="small")
    axes.set_xticks(positions)
    axes.set_xlabel("pipeline stage")
    axes.set_ylabel(f"peak memory, {unit}")
    axes.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.02, 1.0))

