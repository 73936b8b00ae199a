"""Log lines in MindFormers' own grep-able form, through `logging` in MindFormers' style.

Users grep these (`grep 'Set op_swap at layer' output/msrun/worker_0.log`), so the text
after `- INFO - ` is exactly MindFormers' (without the runs of stray spaces some of its lines carry):

    Set full recompute at layer 0
    Set select recompute at layer 0: <cell>
    Set layer swap at layer 0 and value is: 20
    Set op_swap at layer 1: .<cell>, value=20, .<cell>, value=15
    Set op_swap at layer 0: <cell>.<operator>, value=10

Unlike MindFormers, every match is logged, not only the last one of a pattern.
"""

from __future__ import annotations

import logging

from ..config.actions import LayerActions
from ..config.rules import Kind
from ..document.patterns import compile_pattern

LOGGER = logging.getLogger("mf_memopt")   # configured by the runtime (`runtime.environment`)

_LABELS = {Kind.SELECT: "select recompute", Kind.COMM: "select comm recompute",
           Kind.EXCLUDE: "select recompute exclude", Kind.COMM_EXCLUDE: "select comm recompute exclude"}


def layer_lines(actions: LayerActions) -> list[str]:
    """What was set on one layer, one line per kind of setting."""
    layer = actions.layer
    lines = []
    if any(action.path == "" and action.setting == "recompute_cell" for action in actions.recompute):
        lines.append(f"Set full recompute at layer {layer}")
    for kind, label in _LABELS.items():
        paths = [match.path for _, matches in actions.matched.get(kind, []) for match in matches]
        if paths:
            lines.append(f"Set {label} at layer {layer}: {', '.join(paths)}")
    offloaded = {id(action.obj): action.origin for action in actions.offload}
    if actions.layer_swap is not None and actions.layer_swap.origin in offloaded.values():
        lines.append(f"Set layer swap at layer {layer} and value is: {actions.layer_swap.prefetch}")
    items = [f"{_swap_name(use.pattern, match.path)}, value={use.prefetch}"
             for use, match, below in actions.op_swaps if any(offloaded.get(key) == use.origin for key in below)]
    if items:
        lines.append(f"Set op_swap at layer {layer}: {', '.join(items)}")
    if actions.skipped:
        paths = ", ".join(skip.path for skip in actions.skipped)
        lines.append(f"Not swapped at layer {layer}, because recompute wins over swap: {paths}")
    return lines


def _swap_name(pattern: str, path: str) -> str:
    # MindFormers prints a one-segment pattern's match with a leading dot (`.<cell>`),
    # a nested one without (`<cell>.<operator>`).
    return f".{path}" if len(compile_pattern(pattern).segments) == 1 else path
