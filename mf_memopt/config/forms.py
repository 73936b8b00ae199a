"""Turn the polymorphic layer selections of the YAML into one unit: a set of layer indices.

With swap off, MindFormers reads `true`, `[n, ...]` and `[[n, ...], ...]` as "the first n
layers of each pipeline stage (or interleave chunk)". With swap on, the same keys take
`true` or a list of global layer indices. `select_layers` is the only place that knows
both readings.
"""

from __future__ import annotations

from typing import Any

from ..document.errors import ConfigIssue
from ..document.source import KeyPath, Source
from .layout import Layout


def select_layers(value: Any, layout: Layout, *, by_index: bool, source: Source, path: KeyPath,
                  issues: list[ConfigIssue]) -> frozenset[int]:
    """The layers a (schema-valid) selection names."""
    if isinstance(value, bool):
        return frozenset(range(layout.num_layers)) if value else frozenset()
    if value is None:
        return frozenset()
    if by_index:
        return layer_indices(value, layout.num_layers, source=source, path=path, issues=issues)
    if value and all(isinstance(row, (list, bool)) for row in value) and any(isinstance(row, list) for row in value):
        return _from_chunk_counts(value, layout, source, path, issues)
    return _from_stage_counts(value, layout, source, path, issues)


def layer_indices(value: list[int], num_layers: int, *, source: Source, path: KeyPath,
                  issues: list[ConfigIssue]) -> frozenset[int]:
    seen: dict[int, int] = {}
    for position, layer in enumerate(value):
        where = (*path, position)
        if layer >= num_layers:
            issues.append(source.issue(where, f"layer {layer} does not exist: the model has {num_layers} layers",
                                       f"use indices 0 to {num_layers - 1}"))
        elif layer in seen:
            issues.append(source.issue(where, f"layer {layer} is listed twice",
                                       f"it is already item [{seen[layer]}]; remove one"))
        else:
            seen[layer] = position
    return frozenset(seen)


def _from_stage_counts(counts: list[int | bool], layout: Layout, source: Source, path: KeyPath,
                       issues: list[ConfigIssue]) -> frozenset[int]:
    if not _fits(counts, layout.stages, "counts", "pipeline stage", layout.stages_why, source, path, issues,
                 "with swap off a list gives the number of recomputed layers per pipeline stage; "
                 "to pick layers by index, set swap_config.swap: true"):
        return frozenset()
    grid = [[0] * layout.stages for _ in range(layout.chunks)]
    for stage, count in enumerate(counts):
        wanted = _count(count, layout.stage_size(stage), source, (*path, stage), f"stage {stage}", issues)
        for chunk, share in enumerate(_round_robin(wanted, layout, stage)):
            grid[chunk][stage] = share
    return _first_layers(grid, layout)


def _round_robin(count: int, layout: Layout, stage: int) -> list[int]:
    """Spread a stage's count over its chunks one layer at a time, as MindFormers does."""
    shares = [0] * layout.chunks
    capacity = [layout.chunk_sizes[chunk][stage] for chunk in range(layout.chunks)]
    while count > 0:
        for chunk in range(layout.chunks):
            if count and shares[chunk] < capacity[chunk]:
                shares[chunk] += 1
                count -= 1
    return shares


def _from_chunk_counts(rows: list[Any], layout: Layout, source: Source, path: KeyPath,
                       issues: list[ConfigIssue]) -> frozenset[int]:
    if not _fits(rows, layout.chunks, "rows", "interleave chunk", layout.chunks_why, source, path, issues,
                 "a 2-D list has one row per pp_interleave_num chunk and one count per pipeline stage"):
        return frozenset()
    grid = [[0] * layout.stages for _ in range(layout.chunks)]
    for chunk, row in enumerate(rows):
        if isinstance(row, bool):
            row = [row] * layout.stages
        elif not _fits(row, layout.stages, "counts", "pipeline stage", layout.stages_why, source, (*path, chunk),
                       issues, "each row has one count per pipeline stage"):
            continue
        for stage, count in enumerate(row):
            size = layout.chunk_sizes[chunk][stage]
            grid[chunk][stage] = _count(count, size, source, (*path, chunk, stage),
                                        f"chunk {chunk} of stage {stage}", issues)
    return _first_layers(grid, layout)


def _fits(values: list, limit: int, noun: str, unit: str, why: str, source: Source, path: KeyPath,
          issues: list[ConfigIssue], hint: str) -> bool:
    """More entries than `limit` is an error; fewer is a warning, and the missing ones count 0.

    `why` names the keys that set `limit`, so the user sees which one to change.
    """
    because = f" ({why})" if why else ""
    if len(values) > limit:
        issues.append(source.issue(path, f"has {len(values)} {noun} but there are {limit} {unit}(s)"
                                   + (f": {why}" if why else ""), hint))
        return False
    if len(values) < limit:
        issues.append(source.issue(path, f"has {len(values)} {noun} for {limit} {unit}s{because}; the missing "
                                   f"{unit}s get 0", f"give one per {unit}", severity="warning"))
    return True


def _count(count: int | bool, size: int, source: Source, path: KeyPath, where: str,
           issues: list[ConfigIssue]) -> int:
    if isinstance(count, bool):
        return size if count else 0
    if count > size:
        issues.append(source.issue(path, f"count {count} is more than the {size} layers of {where}; "
                                   f"all {size} are selected", f"use at most {size}, or true",
                                   severity="warning"))
    return min(count, size)


def _first_layers(grid: list[list[int]], layout: Layout) -> frozenset[int]:
    layers: set[int] = set()
    for chunk, row in enumerate(grid):
        for stage, count in enumerate(row):
            layers.update(layout.chunk_layers(chunk, stage)[:count])
    return frozenset(layers)
