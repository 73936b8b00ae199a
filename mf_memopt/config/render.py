"""Text forms of a plan: MindFormers' `Formative ...` lines, the per-layer table, a summary."""

from __future__ import annotations

from collections.abc import Iterable

from .plan import LayerPlan, Plan
from .rules import Kind, Rules, SwapRule


def formative_lines(plan: Plan) -> list[str]:
    """The normalised config, in the form MindFormers logs it (`Formative ...`), before resolution."""
    rules = plan.rules

    def form(layers: frozenset[int]) -> list:
        return sorted(layers) if rules.swap else plan.layout.chunk_counts(layers)

    lines = [f"Formative layer_recompute: {form(rules.full.layers)}"]
    for kind in Kind:
        body = ", ".join(f"'{rule.pattern}': {form(rule.layers)}" for rule in rules.of_kind(kind))
        lines.append(f"Formative {kind.value}: {{{body}}}")
    if rules.swap:
        lines += _formative_swap(rules)
    if rules.compresses:
        lines.append(_formative_compress(rules))
    return lines


def _formative_compress(rules: Rules) -> str:
    """`compress_dense` is shown as what it expands to, marked with its level."""
    items = []
    for rule in rules.compresses:
        item = f"'{rule.pattern}': {{'method': '{rule.method}', "
        item += "" if rule.method == "lossless" else f"'group_size': {rule.group_size}, "
        item += f"'layers': {sorted(rule.layers)}"
        item += f", 'offload': {rule.offload}" if rule.offload is not None else ""
        item += ", 'from': 'compress_dense'" if rule.dense else ""
        items.append(item + "}")
    return f"Formative op_compress: {{{', '.join(items)}}}"


def _formative_swap(rules: Rules) -> list[str]:
    layer_rules = [rule for rule in rules.swaps if rule.pattern is None]
    by_pattern: dict[str, list[SwapRule]] = {}
    for rule in rules.swaps:
        if rule.pattern is not None:
            by_pattern.setdefault(rule.pattern, []).append(rule)
    ops = ", ".join(f"'{pattern}': {_swap_list(entries)}" for pattern, entries in by_pattern.items())
    return [f"Formative layer swap: {_swap_list(layer_rules)}", f"Formative op swap: {{{ops}}}"]


def _swap_list(rules: Iterable[SwapRule]) -> str:
    items = [f"{{'backward_prefetch': {rule.prefetch!r}, 'layers': {sorted(rule.layers)}}}" for rule in rules]
    return f"[{', '.join(items)}]"


def layer_table(plan: Plan) -> str:
    header = ["layer", "stage", "chunk", "full", "select", "comm", "exclude", "comm-exclude",
              "layer-swap", "op-swap", "conflicts"]
    rows = [header] + [_row(plan, layer) for layer in plan.layers]
    if any(layer.op_compress for layer in plan.layers):
        for row, layer in zip(rows, (None, *plan.layers)):
            row.insert(-1, "op-compress" if layer is None else _compressed(layer))
    widths = [max(len(row[column]) for row in rows) for column in range(len(header))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows)


def _row(plan: Plan, layer: LayerPlan) -> list[str]:
    def patterns(kind: Kind) -> str:
        return ",".join(use.pattern for use in layer.uses(kind)) or "-"

    op_swap = ",".join(f"{use.pattern}={use.prefetch}" for use in layer.op_swap) or "-"
    layer_swap = str(layer.layer_swap.prefetch) if layer.layer_swap else "-"
    conflicts = len(plan.conflicts_at(layer.layer))
    return [str(layer.layer), str(layer.stage), str(layer.chunk), "yes" if layer.full_recompute else "-",
            *(patterns(kind) for kind in Kind), layer_swap, op_swap, str(conflicts) if conflicts else "-"]


def _compressed(layer: LayerPlan) -> str:
    return ",".join(f"{use.pattern}={use.method}" for use in layer.op_compress) or "-"


def summary(plan: Plan) -> str:
    layers = plan.layers
    full = sum(1 for layer in layers if layer.full_recompute)
    select = sum(1 for layer in layers if layer.select_recompute)
    comm = sum(1 for layer in layers if layer.select_comm_recompute)
    swapped = sum(1 for layer in layers if layer.layer_swap or layer.op_swap)
    layout = plan.layout
    swap = f"swap on ({_count(swapped, 'layer')} swapped)" if plan.swap else "swap off"
    compressed = sum(1 for layer in layers if layer.op_compress)
    if compressed:
        swap += f"; compression in {_count(compressed, 'layer')}"
    return (f"{plan.file}: valid: {_count(plan.num_layers, 'layer')} in {_count(layout.stages, 'pipeline stage')}"
            f" x {_count(layout.chunks, 'chunk')}; layers with full recompute: {full}, select recompute: "
            f"{select}, comm recompute: {comm}; {swap}; {_count(len(plan.conflicts), 'conflict')} resolved, "
            f"{_count(len(plan.warnings), 'warning')}")


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"
