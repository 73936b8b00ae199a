"""From one layer's plan and its cells to the exact attributes to set (nothing is set here).

The cells are the built layer's (`apply` then sets the attributes) or the family's recorded layer
(`validate` reports the same problems without building anything).

The recompute actions come first; the offload actions are then computed per primitive, so
that interaction rule 3 (recompute beats swap, docs/configuration.md) is enforced on the operators themselves:
a primitive that will be recomputed gets no offload attribute.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

from ..document import tree as cells
from ..document.errors import ConfigIssue
from ..family import ModelFamily
from .family_rules import rules_of
from .match import Match, Where, matches_or_issue, primitives_only
from .plan import LayerPlan, SwapUse, Use
from .rules import Kind, Origin, RecomputeOptions

Setting = Literal["recompute_cell", "recompute", "recompute_comm_op", "offload"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Action:
    layer: int
    path: str                      # relative to the layer; "" is the layer cell itself
    target: Literal["cell", "primitive"]
    setting: Setting
    value: Any                     # options dict, bool, or backward_prefetch
    origin: Origin
    obj: Any = field(compare=False, repr=False)

    def to_dict(self) -> dict:
        return {"layer": self.layer, "path": self.path, "target": self.target, "type": cells.type_name(self.obj),
                "set": {self.setting: self.value}, "rule": self.origin.key, "line": self.origin.line}


@dataclass(frozen=True, slots=True, kw_only=True)
class Skip:
    """An operator a swap rule named but that keeps no offload, because it is recomputed."""

    layer: int
    path: str
    swap: Origin
    recomputed_by: str

    def to_dict(self) -> dict:
        return {"layer": self.layer, "path": self.path, "swap_rule": self.swap.key, "swap_line": self.swap.line,
                "reason": f"recomputed ({self.recomputed_by}); recompute wins over swap"}


@dataclass(slots=True)
class LayerActions:
    layer: int
    recompute: list[Action] = field(default_factory=list)
    matched: dict[Kind, list[tuple[Use, list[Match]]]] = field(default_factory=dict)
    offload: list[Action] = field(default_factory=list)
    op_swaps: list[tuple[SwapUse, Match, list[int]]] = field(default_factory=list)  # with the ids below each match
    layer_swap: SwapUse | None = None
    skipped: list[Skip] = field(default_factory=list)


_NEEDS_PRIMITIVES = {Kind.COMM: "recompute_comm_op", Kind.EXCLUDE: "recompute", Kind.COMM_EXCLUDE: "recompute_comm_op"}


def layer_actions(plan: LayerPlan, layer: Any, options: RecomputeOptions, family: ModelFamily, file: str,
                  issues: list[ConfigIssue]) -> LayerActions:
    result = LayerActions(layer=plan.layer, layer_swap=plan.layer_swap)
    if plan.full_recompute is not None:
        result.recompute.append(Action(layer=plan.layer, path="", target="cell", setting="recompute_cell",
                                       value=options.kwargs(), origin=plan.full_recompute, obj=layer))
    for kind in Kind:
        missed: list[ConfigIssue] = []          # default patterns that match nothing
        defaults_match = False
        for use in plan.uses(kind):
            matches = _matches(family, layer, plan.layer, use.pattern, use.origin, file,
                               missed if use.default else issues)
            defaults_match |= use.default and bool(matches)
            note = rules_of(family).default_note(use.pattern) if use.default and matches else None
            if note:
                issues.append(Where(file, use.origin).issue(f"in layer {plan.layer}, MindFormers' default pattern "
                                                            f"`{use.pattern}` {note}", None, severity="warning"))
            if kind is not Kind.SELECT:
                matches = primitives_only(matches, kind.value, plan.layer, use.pattern, Where(file, use.origin), issues)
            result.matched.setdefault(kind, []).append((use, matches))
            result.recompute += _recompute_actions(kind, plan.layer, use, matches)
        issues += [_default_missed(issue) for issue in missed] if defaults_match else missed
    result.recompute = _final_settings(result.recompute)
    _offload_actions(plan, layer, result, family, file, issues)
    return result


def _default_missed(issue: ConfigIssue) -> ConfigIssue:
    """A default pattern that names nothing in this model while another default of the same setting does: it does
    nothing, as in MindFormers, and is said once rather than refused."""
    return replace(issue, severity="warning", message=f"{issue.message}; it is one of MindFormers' default patterns, "
                                                      "the others apply")


def _final_settings(actions: list[Action]) -> list[Action]:
    """One action per object and setting, the last one winning (excludes come after selects).

    A primitive's recompute can be set only once (see cells.recompute_primitive), and an
    exclusion must win over the selection it carves out of.
    """
    final: dict[tuple[int, str], Action] = {}
    for action in actions:
        final.pop((id(action.obj), action.setting), None)
        final[(id(action.obj), action.setting)] = action
    return list(final.values())


def _matches(family: ModelFamily, layer: Any, index: int, pattern: str, origin: Origin, file: str,
             issues: list[ConfigIssue]) -> list[Match]:
    return matches_or_issue(layer, index, pattern, Where(file, origin), issues, rules_of(family).pattern_hint)


def _recompute_actions(kind: Kind, index: int, use: Use, matches: list[Match]) -> list[Action]:
    actions = []
    for match in _outermost(matches):
        if match.target == "cell":
            setting, value = "recompute_cell", {}
        else:
            setting = _NEEDS_PRIMITIVES.get(kind, "recompute")
            value = kind in (Kind.SELECT, Kind.COMM)
        actions.append(Action(layer=index, path=match.path, target=match.target, setting=setting, value=value,
                              origin=use.origin, obj=match.obj))
    return actions


def _outermost(matches: list[Match]) -> list[Match]:
    """Drop cells inside another matched cell: Cell.recompute covers them, and can be set only once."""
    cell_paths = [match.path for match in matches if match.target == "cell"]
    return [match for match in matches if match.target == "primitive"
            or not any(match.path.startswith(outer + ".") for outer in cell_paths)]


def _offload_actions(plan: LayerPlan, layer: Any, result: LayerActions, family: ModelFamily, file: str,
                     issues: list[ConfigIssue]) -> None:
    if plan.layer_swap is None and not plan.op_swap:
        return
    walk = list(cells.walk_primitives(layer))
    wanted: dict[int, tuple[str, Any, SwapUse]] = {}
    if plan.layer_swap is not None:
        for path, prim, _ in walk:
            wanted.setdefault(id(prim), (path, prim, plan.layer_swap))
    by_op: dict[int, SwapUse] = {}
    for use in plan.op_swap:
        matches = _matches(family, layer, plan.layer, use.pattern, use.origin, file, issues)
        for match in matches:
            under = _primitives_under(match)
            result.op_swaps.append((use, match, [id(prim) for _, prim in under]))
            for path, prim in under:
                earlier = by_op.get(id(prim))
                if earlier is not None and earlier.prefetch != use.prefetch:
                    issues.append(_ambiguous_prefetch(file, plan.layer, path, earlier, use))
                by_op[id(prim)] = use
                wanted[id(prim)] = (path, prim, use)  # op_swap is more specific than layer_swap
    recomputed = _recomputed_primitives(layer, walk, result.recompute, wanted)
    for key, (path, prim, use) in wanted.items():
        if key in recomputed:
            result.skipped.append(Skip(layer=plan.layer, path=path, swap=use.origin, recomputed_by=recomputed[key]))
            continue
        result.offload.append(Action(layer=plan.layer, path=path, target="primitive", setting="offload",
                                     value=use.prefetch, origin=use.origin, obj=prim))


def _primitives_under(match: Match) -> list[tuple[str, Any]]:
    if match.target == "primitive":
        return [(match.path, match.obj)]
    return [(path, prim) for path, prim, _ in cells.walk_primitives(match.obj, match.path)]


def _ambiguous_prefetch(file: str, index: int, path: str, earlier: SwapUse, later: SwapUse) -> ConfigIssue:
    return ConfigIssue(
        file=file, line=later.origin.line, path=later.origin.key,
        message=f"in layer {index}, operator {path} is swapped by op_name `{earlier.pattern}` "
                f"(backward_prefetch {earlier.prefetch}, {earlier.origin.describe()}) and by op_name "
                f"`{later.pattern}` (backward_prefetch {later.prefetch}); the prefetch is ambiguous",
        hint="give the overlapping entries the same backward_prefetch, or make the patterns disjoint")


def _recomputed_primitives(layer: Any, walk: list[tuple[str, Any, tuple[Any, ...]]], recompute: list[Action],
                           candidates: dict[int, Any]) -> dict[int, str]:
    """Which of the candidate primitives will be recomputed, each with what recomputes it.

    A primitive's own recompute attribute (set here or already present) decides; otherwise
    it is recomputed when a cell around it is (MindSpore: the primitive's setting wins).
    """
    explicit = {id(action.obj): (action.value, action.origin.key) for action in recompute
                if action.setting == "recompute"}
    scoped = {id(cell): "the model's own Cell.recompute" for cell in cells.walk_cells(layer)
              if cells.is_recompute_scoped(cell)}
    scoped.update({id(action.obj): action.origin.key for action in recompute if action.setting == "recompute_cell"})
    result = {}
    for _, prim, ancestors in walk:
        if id(prim) not in candidates:
            continue
        own = explicit.get(id(prim))
        if own is None and cells.primitive_recompute(prim) is not None:
            own = (cells.primitive_recompute(prim), "the model's own recompute attribute")
        if own is not None:
            if own[0]:
                result[id(prim)] = own[1]
            continue
        if scoped:  # the primitive is recomputed when a cell around it is (innermost reason first)
            outer = next((scoped[id(cell)] for cell in reversed(ancestors) if id(cell) in scoped), None)
            if outer is not None:
                result[id(prim)] = outer
    return result

