"""Patterns checked against the model's recorded decoder layer, before anything is built.

Where the model family has recorded the layer a YAML builds (`config.family_rules.ConfigRules.layer_tree`), every
pattern of the resolved plan is matched against it exactly as `apply` matches it against the
built layer, with the same messages: a pattern that matches nothing, a comm or exclude pattern
that names only cells, an op_compress pattern that names an operator. Without a recorded layer
these are found when the model is built, before any attribute is set.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..compress.family import compression_of
from ..document.errors import ConfigIssue
from .actions import layer_actions
from .compress_actions import compress_actions
from .match import merge_layers
from .plan import LayerPlan, Plan


def layer_issues(plan: Plan, tree: Any) -> list[ConfigIssue]:
    """The errors and warnings `apply` would find in every layer, found on the recorded layer, named per layer
    as `apply` names them. All decoder layers of a model have the same cells: layers with the same rules are resolved
    once, and the problems repeated for each of them."""
    resolved: dict[LayerPlan, tuple[int, list[ConfigIssue]]] = {}
    issues: list[ConfigIssue] = []
    for layer in plan.layers:
        rules = replace(layer, layer=0, stage=0, chunk=0)
        if rules not in resolved:
            resolved[rules] = (layer.layer, _issues(plan, layer, tree))
        first, found = resolved[rules]
        issues += [issue if layer.layer == first else
                   replace(issue, message=issue.message.replace(f"in layer {first}", f"in layer {layer.layer}", 1))
                   for issue in found]
    return merge_layers(issues)


def _issues(plan: Plan, layer: LayerPlan, tree: Any) -> list[ConfigIssue]:
    issues: list[ConfigIssue] = []
    layer_actions(layer, tree, plan.rules.options, plan.family, plan.file, issues)
    if layer.op_compress:
        compress_actions(layer.op_compress, layer.layer, tree, compression_of(plan.family), plan.file, issues)
    return issues
