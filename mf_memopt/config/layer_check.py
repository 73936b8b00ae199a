"""Patterns checked against the model's recorded decoder layer, before anything is built.

Where the model family has recorded the layer a YAML builds (`ModelFamily.layer_tree`), every
pattern of the resolved plan is matched against it exactly as `apply` matches it against the
built layer, with the same messages: a pattern that matches nothing, a comm or exclude pattern
that names only cells, an op_compress pattern that names an operator. Without a recorded layer
these are found when the model is built, before any attribute is set.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from .errors import ConfigIssue
from .match import Where, cells_only, matches_or_issue, merge_layers, primitives_only
from .plan import Plan
from .rules import Kind


def layer_issues(plan: Plan, tree: Any) -> list[ConfigIssue]:
    """Every problem of the plan's patterns in the recorded layer, named per layer as `apply` names them.

    All decoder layers of a model have the same cells: each rule's pattern is matched once, in the first
    layer that uses it, and its problems are repeated for the other layers.
    """
    first: dict[tuple, tuple[int, list[ConfigIssue]]] = {}
    issues: list[ConfigIssue] = []
    for layer in plan.layers:
        for what, use in _uses(layer):
            where = Where(plan.file, use.origin)
            key = (what, use.pattern, where)
            if key not in first:
                found: list[ConfigIssue] = []
                _check(what, tree, layer.layer, use.pattern, where, found, plan.family)
                first[key] = (layer.layer, found)
            index, found = first[key]
            issues += [issue if layer.layer == index else
                       replace(issue, message=issue.message.replace(f"in layer {index}", f"in layer {layer.layer}", 1))
                       for issue in found]
    return merge_layers(issues)


def _uses(layer: Any):
    """(what the rule sets, its use) for every pattern rule of a layer's plan."""
    for kind in Kind:
        for use in layer.uses(kind):
            yield kind, use
    for use in layer.op_swap:
        yield "op_swap", use
    for use in layer.op_compress:
        yield "op_compress", use


def _check(what: Kind | str, tree: Any, index: int, pattern: str, where: Where, issues: list[ConfigIssue],
           family: Any) -> None:
    hint = family.pattern_hint if what != "op_compress" else (lambda pattern: None)
    matches = matches_or_issue(tree, index, pattern, where, issues, hint)
    if what == "op_compress":
        cells_only(matches, index, pattern, family.compression.example, where, issues)
    elif isinstance(what, Kind) and what is not Kind.SELECT:
        primitives_only(matches, what.value, index, pattern, where, issues)
