"""Write a chosen plan back into the training YAML, in the forms a person would write.

Without swap the recompute keys take per-stage counts (`recompute: [2, 0]`, 2-D per
interleave chunk, `True` when every layer): the solver only picks plans in which every
setting covers the first layers of each stage or chunk, so counts can say it. Select
counts include the fully recomputed layers before them (full recompute wins there, rule
1). With swap the keys take layer indices. Only `recompute_config` and
`swap_config` change; the rest of the file is kept line for line. Of the section's other keys,
a boolean `select_comm_recompute` is kept, and the `Cell.recompute` options
(`mp_comm_recompute`, ...) are kept when some layer is fully recomputed, the only layers
they act on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..config.layout import Layout
from ..family import AutoCells
from .choices import FULL, Choice

HEADER_MARK = "# mf_memopt auto:"
_PATTERN_KEYS = ("select_recompute",)   # its keys are patterns: written quoted
_KEPT_OPTIONS = ("select_comm_recompute", "mp_comm_recompute", "recompute_slice_activation",
                 "parallel_optimizer_comm_recompute")


@dataclass(frozen=True, slots=True, kw_only=True)
class Assignment:
    """What each layer got: its choice and, for a swap, its backward_prefetch."""

    choices: dict[int, Choice]
    prefetch: dict[int, int]

    @property
    def swaps(self) -> bool:
        return any(choice.swaps for choice in self.choices.values())


def sections(assignment: Assignment, layout: Layout, original: dict[str, Any],
             cells: AutoCells, compress: bool = False) -> dict[str, dict[str, Any]]:
    """The new `recompute_config` and `swap_config` as plain values, naming the family's cells; with `compress`
    (compression was among the choices), `compress_config` too: an `op_compress` entry per pattern and method, with
    the layers it applies to (or `compress: False`)."""
    if assignment.swaps:
        recompute = _by_index(assignment, cells)
        swap = {"swap": True, **_swaps(assignment, cells)}
    else:
        recompute = _by_counts(assignment, layout, cells)
        swap = {"swap": False}
    full = any(choice.full for choice in assignment.choices.values())
    for key in _KEPT_OPTIONS:
        # The Cell.recompute options only act on full-recompute layers (validate warns otherwise).
        if isinstance(original.get(key), bool) and (full or key == "select_comm_recompute"):
            recompute[key] = original[key]
    recompute.setdefault("select_comm_recompute", False)
    written = {"recompute_config": recompute, "swap_config": swap}
    if compress:
        written["compress_config"] = _compressions(assignment)
    return written


def _compressions(assignment: Assignment) -> dict[str, Any]:
    entries: dict[tuple[str, str], list[int]] = {}
    for layer, choice in sorted(assignment.choices.items()):
        for _, pattern, method in choice.compress:
            entries.setdefault((pattern, method), []).append(layer)
    every = len(assignment.choices)
    if not entries:
        return {"compress": False}
    return {"compress": True, "op_compress": [
        {"op_name": pattern, "method": method, "layers": True if len(layers) == every else layers}
        for (pattern, method), layers in sorted(entries.items())]}


def _by_index(assignment: Assignment, cells: AutoCells) -> dict[str, Any]:
    full = sorted(layer for layer, choice in assignment.choices.items() if choice.full)
    select = {cell: sorted(layer for layer, choice in assignment.choices.items()
                           if cell in choice.select and not choice.full) for cell in cells.select}
    every = len(assignment.choices)
    return {"recompute": _all_or(full, every),
            "select_recompute": {cell: _all_or(layers, every) for cell, layers in select.items() if layers} or False}


def _all_or(layers: list[int], every: int) -> Any:
    return True if len(layers) == every else (layers or False)


def _swaps(assignment: Assignment, cells: AutoCells) -> dict[str, Any]:
    layer_swap: dict[int, list[int]] = {}
    op_swap: dict[tuple[str, int], list[int]] = {}
    for layer, choice in sorted(assignment.choices.items()):
        prefetch = assignment.prefetch.get(layer, 1)
        if choice.layer_swap:
            layer_swap.setdefault(prefetch, []).append(layer)
        for cell in choice.op_swap:
            op_swap.setdefault((cell, prefetch), []).append(layer)
    result: dict[str, Any] = {}
    if layer_swap:
        result["layer_swap"] = [{"backward_prefetch": prefetch, "layers": layers}
                                for prefetch, layers in sorted(layer_swap.items())]
    if op_swap:
        order = {cell: index for index, cell in enumerate(cells.swap)}
        result["op_swap"] = [{"op_name": cell, "backward_prefetch": prefetch, "layers": layers}
                             for (cell, prefetch), layers in sorted(op_swap.items(),
                                                                    key=lambda item: (order[item[0][0]], item[0][1]))]
    return result


def _by_counts(assignment: Assignment, layout: Layout, cells: AutoCells) -> dict[str, Any]:
    def counts(feature: str) -> list[list[int]]:
        return [[_prefix(assignment, layout.chunk_layers(chunk, stage), feature) for stage in range(layout.stages)]
                for chunk in range(layout.chunks)]

    select = {cell: _count_form(counts(cell), layout) for cell in cells.select}
    return {"recompute": _count_form(counts(FULL), layout),
            "select_recompute": {cell: form for cell, form in select.items() if form is not False} or False}


def _prefix(assignment: Assignment, layers: range, feature: str) -> int:
    """How many first layers of the chunk the setting must cover (its last user, inclusive)."""
    users = [position for position, layer in enumerate(layers) if feature in assignment.choices[layer].features]
    return users[-1] + 1 if users else 0


def _count_form(grid: list[list[int]], layout: Layout) -> Any:
    if all(count == 0 for row in grid for count in row):
        return False
    if grid == [list(row) for row in layout.chunk_sizes]:
        return True
    return grid[0] if layout.chunks == 1 else grid


def yaml_lines(key: str, value: Any, indent: int = 0) -> list[str]:
    """Block YAML for dicts and lists of dicts, flow style for lists of scalars; pattern keys quoted."""
    pad = " " * indent
    if isinstance(value, dict):
        lines = [f"{pad}{key}:"]
        for name, item in value.items():
            lines += yaml_lines(f"'{name}'" if key in _PATTERN_KEYS else name, item, indent + 2)
        return lines
    if isinstance(value, list) and value and isinstance(value[0], dict):
        lines = [f"{pad}{key}:"]
        for item in value:
            entry = [line for name, inner in item.items() for line in yaml_lines(name, inner, indent + 4)]
            lines += [f"{pad}  - {entry[0].lstrip()}", *entry[1:]]
        return lines
    return [f"{pad}{key}: {_scalar(value)}"]


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, list):
        return "[" + ", ".join(_scalar(item) for item in value) + "]"
    if isinstance(value, str):
        return f"'{value}'"
    return str(value)


def replace_sections(text: str, new: dict[str, dict[str, Any]], header: list[str]) -> str:
    """The YAML text with the two sections replaced (appended if absent) and `header` on top."""
    lines = [line for line in text.splitlines() if not line.startswith(HEADER_MARK)]
    for key, value in new.items():
        block = yaml_lines(key, value)
        start = next((index for index, line in enumerate(lines) if line.startswith(f"{key}:")), None)
        if start is None:
            lines += ["", *block]
            continue
        end = start + 1
        while end < len(lines) and (not lines[end].strip() or lines[end][0] in " \t"):
            end += 1
        while end > start + 1 and not lines[end - 1].strip():
            end -= 1
        lines[start:end] = block
    return "\n".join([*(f"{HEADER_MARK} {line}".rstrip() for line in header), *lines]) + "\n"


def describe(layers: tuple[int, ...], choices: list[Choice], prefetch: list[int | None]) -> str:
    """`0-1 full recompute; 2 recompute <cell>; 3 keep` (runs of equal choices)."""
    runs: list[list] = []
    for layer, choice, value in zip(layers, choices, prefetch):
        label = choice.name + (f" (backward_prefetch {value})" if value is not None else "")
        if runs and runs[-1][2] == label and runs[-1][1] == layer - 1:
            runs[-1][1] = layer
        else:
            runs.append([layer, layer, label])
    return "; ".join(f"{start if start == end else f'{start}-{end}'} {label}" for start, end, label in runs)
