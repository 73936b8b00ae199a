"""Match a pattern against a decoder layer (real cells, or a recorded layer: `tree.py`).

Every segment but the last fully matches child-cell names; the last matches child cells
and the primitives of the cell it is looked up in. Every match is returned (MindFormers
sets them all but logs only the last). What goes wrong is said here, in one wording, for
`validate` (on the recorded layer) and `apply` (on the real one) alike.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from ..document.errors import ConfigIssue, did_you_mean
from ..document.patterns import compile_pattern
from ..document.tree import children, join, primitives
from .rules import Origin


@dataclass(frozen=True, slots=True)
class Where:
    """The YAML rule a problem belongs to: the plan's file and the rule's origin."""

    file: str
    origin: Origin

    def issue(self, message: str, hint: str | None = None, *, severity: str = "error") -> ConfigIssue:
        return ConfigIssue(file=self.file, line=self.origin.line, path=self.origin.key, message=message, hint=hint,
                           severity=severity)


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
        matches += [Match(join(path, name), "cell", child) for name, child in children(cell)
                    if pattern.segment_matches(last, name)]
        matches += [Match(join(path, name), "primitive", prim) for name, prim in primitives(cell)
                    if pattern.segment_matches(last, name)]
    if not matches:
        return [], _miss(frontier, pattern.segments[last], with_primitives=True)
    return matches, None


def _step(frontier: list[tuple[str, Any]], pattern, index: int) -> tuple[list[tuple[str, Any]], Miss | None]:
    found = [(join(path, name), child) for path, cell in frontier for name, child in children(cell)
             if pattern.segment_matches(index, name)]
    if not found:
        return [], _miss(frontier, pattern.segments[index], with_primitives=False)
    return found, None


def _miss(frontier: list[tuple[str, Any]], segment: str, *, with_primitives: bool) -> Miss:
    names: list[str] = []
    for _, cell in frontier:
        names += [name for name, _ in children(cell)]
        if with_primitives:
            names += [name for name, _ in primitives(cell)]
    return Miss(segment=segment, parents=tuple(path for path, _ in frontier),
                available=tuple(dict.fromkeys(names)))


NO_MATCH = "matches nothing in layer"      # the words of the issue for a pattern that names nothing in a layer


def matches_or_issue(layer: Any, index: int, pattern: str, where: Where, issues: list[ConfigIssue],
                     hint: Callable[[str], str | None] = lambda pattern: None) -> list[Match]:
    """The matches of `pattern` in layer `index`; when there are none, an issue at `where` (the rule's file and
    origin), with `hint(pattern)` (the family's hint for its defaults) or a did-you-mean."""
    matches, miss = find_matches(layer, pattern)
    if miss is not None:
        issues.append(where.issue(f"pattern `{pattern}` {NO_MATCH} {index}: {miss.describe()}",
                                  hint(pattern) or miss.hint()))
    return matches


def primitives_only(matches: list[Match], setting: str, index: int, pattern: str, where: Where,
                    issues: list[ConfigIssue]) -> list[Match]:
    """The primitives among `matches`; an issue when the pattern names only cells but `setting` marks operators.

    A CPU stand-in (`models/mcore/stand_in.StandIn`) is a cell in the place of a primitive, under its name: it
    counts as that primitive, so that a pattern `validate` accepts on the model as Ascend builds it is not refused
    when the model runs on CPU."""
    found = [Match(match.path, "primitive", match.obj) if _stands_in(match) else match for match in matches
             if match.target == "primitive" or _stands_in(match)]
    if matches and not found:
        cell_names = ", ".join(match.path for match in matches)
        issues.append(where.issue(f"pattern `{pattern}` names only cells in layer {index} ({cell_names}), but "
                                  f"{setting} sets an attribute of primitive operators",
                                  f"name operators inside, e.g. `{pattern}\\.<operator>`"))
    return found


def _stands_in(match: Match) -> bool:
    return match.target == "cell" and getattr(match.obj, "operator_stand_in", False) is True


def cells_only(matches: list[Match], index: int, pattern: str, example: str, where: Where,
               issues: list[ConfigIssue]) -> list[Match]:
    """The cells among `matches`; an issue for each operator, since op_compress replaces cells."""
    for match in matches:
        if match.target != "cell":
            issues.append(where.issue(f"pattern `{pattern}` names the operator {match.path} in layer {index}; "
                                      "op_compress names Linear cells, whose saved input it compresses",
                                      f"name the cell, e.g. '{example}'"))
    return [match for match in matches if match.target == "cell"]


_IN_LAYER = re.compile(r"in layer (\d+)")


def merge_layers(issues: list[ConfigIssue]) -> list[ConfigIssue]:
    """One issue per problem, naming every layer it occurs in, instead of one per layer."""
    layers: dict[tuple, list[str]] = {}
    first: dict[tuple, ConfigIssue] = {}
    for issue in issues:
        match = _IN_LAYER.search(issue.message)
        key = (issue.file, issue.line, issue.path, _IN_LAYER.sub("in layer {}", issue.message), issue.hint)
        layers.setdefault(key, []).append(match.group(1) if match else "")
        first.setdefault(key, issue)
    merged = []
    for key, numbers in layers.items():
        issue = first[key]
        if len(numbers) > 1:
            message = key[3].replace("in layer {}", f"in layers {', '.join(numbers)}")
            issue = ConfigIssue(file=issue.file, line=issue.line, path=issue.path, message=message, hint=issue.hint,
                                severity=issue.severity)
        merged.append(issue)
    return merged
