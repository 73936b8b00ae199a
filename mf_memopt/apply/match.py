"""Match a pattern against the real cells of one decoder layer.

Every segment but the last fully matches child-cell names; the last matches child cells
and the primitives of the cell it is looked up in. Every match is returned (MindFormers
sets them all but logs only the last).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ..config.errors import did_you_mean
from ..config.patterns import compile_pattern
from . import cells
from .cells import join


@dataclass(frozen=True, slots=True)
class Match:
    path: str                      # relative to the layer: `mlp.activation.silu`
    target: Literal["cell", "primitive"]
    obj: Any


@dataclass(frozen=True, slots=True)
class Miss:
    """Where a pattern stopped matching, and what could have been named there."""

    segment: str
    parents: tuple[str, ...]       # paths (relative to the layer) where the segment was tried
    available: tuple[str, ...]     # names found there

    def describe(self) -> str:
        where = ", ".join(parent or "the layer" for parent in self.parents[:6])
        if len(self.parents) > 6:
            where += ", ..."
        shown = ", ".join(self.available[:24]) + (", ..." if len(self.available) > 24 else "")
        return f"segment `{self.segment}` matched nothing in {where}; names there: {shown or 'none'}"

    def hint(self) -> str | None:
        # Cell and operator names are short (`mul`, `fc1`): accept a looser match than for keys.
        return did_you_mean(self.segment, self.available, cutoff=0.5)


def find_matches(layer: Any, pattern_text: str) -> tuple[list[Match], Miss | None]:
    """All matches of a pattern in a layer, or the point where it stopped matching."""
    pattern = compile_pattern(pattern_text)
    frontier: list[tuple[str, Any]] = [("", layer)]
    for index in range(len(pattern.segments) - 1):
        frontier, miss = _step(frontier, pattern, index)
        if miss:
            return [], miss
    matches = []
    last = len(pattern.segments) - 1
    for path, cell in frontier:
        matches += [Match(join(path, name), "cell", child) for name, child in cells.children(cell)
                    if pattern.segment_matches(last, name)]
        matches += [Match(join(path, name), "primitive", prim) for name, prim in cells.primitives(cell)
                    if pattern.segment_matches(last, name)]
    if not matches:
        return [], _miss(frontier, pattern.segments[last], with_primitives=True)
    return matches, None


def _step(frontier: list[tuple[str, Any]], pattern, index: int) -> tuple[list[tuple[str, Any]], Miss | None]:
    found = [(join(path, name), child) for path, cell in frontier for name, child in cells.children(cell)
             if pattern.segment_matches(index, name)]
    if not found:
        return [], _miss(frontier, pattern.segments[index], with_primitives=False)
    return found, None


def _miss(frontier: list[tuple[str, Any]], segment: str, *, with_primitives: bool) -> Miss:
    names: list[str] = []
    for _, cell in frontier:
        names += [name for name, _ in cells.children(cell)]
        if with_primitives:
            names += [name for name, _ in cells.primitives(cell)]
    return Miss(segment=segment, parents=tuple(path for path, _ in frontier),
                available=tuple(dict.fromkeys(names)))
