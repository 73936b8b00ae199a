"""The per-layer plan: what each decoder layer gets, after the interaction rules.

This is the single thing `apply_plan` needs, and what `plan --json` prints.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..document.errors import ConfigIssue
from ..family import ModelFamily
from .layout import Layout
from .rules import Kind, Origin, Prefetch, Rules


@dataclass(frozen=True, slots=True, kw_only=True)
class Use:
    """A recompute pattern as it applies in one layer."""

    pattern: str
    origin: Origin
    default: bool = False           # the family's default pattern (MindFormers'), not one the YAML names


@dataclass(frozen=True, slots=True, kw_only=True)
class SwapUse:
    """An offload in one layer: the whole layer (`pattern` None) or what a pattern matches."""

    pattern: str | None
    prefetch: Prefetch
    origin: Origin
    default: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class CompressUse:
    """A compression in one layer: the cells a pattern matches keep their saved input compressed."""

    pattern: str
    method: str
    group_size: int
    origin: Origin
    offload: Prefetch | None = None   # the compressed copy is also offloaded (compress_dense level1, or a swap)
    dense: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerPlan:
    layer: int
    stage: int
    chunk: int
    full_recompute: Origin | None
    select_recompute: tuple[Use, ...] = ()
    select_comm_recompute: tuple[Use, ...] = ()
    select_recompute_exclude: tuple[Use, ...] = ()
    select_comm_recompute_exclude: tuple[Use, ...] = ()
    layer_swap: SwapUse | None = None
    op_swap: tuple[SwapUse, ...] = ()
    op_compress: tuple[CompressUse, ...] = ()

    def uses(self, kind: Kind) -> tuple[Use, ...]:
        return getattr(self, kind.value)

    def to_dict(self) -> dict:
        result: dict = {"layer": self.layer, "stage": self.stage, "chunk": self.chunk,
                        "full_recompute": self.full_recompute is not None}
        for kind in Kind:
            result[kind.value] = sorted(use.pattern for use in self.uses(kind))
        result["layer_swap"] = self.layer_swap.prefetch if self.layer_swap else None
        result["op_swap"] = {use.pattern: use.prefetch for use in sorted(self.op_swap, key=_by_pattern)}
        if self.op_compress:
            result["op_compress"] = {use.pattern: _compress_dict(use)
                                     for use in sorted(self.op_compress, key=lambda use: use.pattern)}
        return result


def _compress_dict(use: CompressUse) -> dict:
    result: dict = {"method": use.method}
    if use.method != "lossless":
        result["group_size"] = use.group_size
    if use.offload is not None:
        result["offload"] = use.offload
    return result


def _by_pattern(use: SwapUse) -> str:
    return use.pattern or ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Party:
    """One side of a conflict: a rule, named the way the user wrote it."""

    what: str
    origin: Origin
    pattern: str | None = None

    def describe(self) -> str:
        return f"{self.what} ({self.origin.describe()})"

    def to_dict(self) -> dict:
        return {"what": self.what, "key": self.origin.key, "line": self.origin.line, "pattern": self.pattern}


Effect = Literal["dropped", "narrowed", "combined"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Conflict:
    """Two rules that meet in some layers, and which one the documented rule keeps there."""

    rule: str
    kept: Party
    dropped: Party
    effect: Effect
    layers: tuple[int, ...]

    def message(self) -> str:
        layers = ", ".join(str(layer) for layer in self.layers)
        noun = "layer" if len(self.layers) == 1 else "layers"
        outcome = {"dropped": "which is dropped there",
                   "narrowed": "which stays but does not swap what the former recomputes",
                   "combined": "both apply: the swap offloads the compressed copy"}[self.effect]
        if self.effect == "combined":
            return f"{noun} {layers}: {self.kept.describe()} and {self.dropped.describe()} {outcome} [{self.rule}]"
        return (f"{noun} {layers}: {self.kept.describe()} wins over {self.dropped.describe()}, {outcome} "
                f"[{self.rule}]")

    def to_dict(self) -> dict:
        return {"rule": self.rule, "effect": self.effect, "layers": list(self.layers),
                "kept": self.kept.to_dict(), "dropped": self.dropped.to_dict(), "message": self.message()}


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """A validated, normalised and resolved memory plan for every decoder layer."""

    file: str
    layout: Layout
    rules: Rules
    family: ModelFamily                     # the model family the YAML trains (`family`)
    layers: tuple[LayerPlan, ...]
    conflicts: tuple[Conflict, ...] = ()
    warnings: tuple[ConfigIssue, ...] = ()
    differences: tuple[ConfigIssue, ...] = ()    # notes: where the marks differ from MindFormers' (differences.py)

    @property
    def num_layers(self) -> int:
        return self.layout.num_layers

    @property
    def swap(self) -> bool:
        return self.rules.swap

    def conflicts_at(self, layer: int) -> tuple[Conflict, ...]:
        return tuple(conflict for conflict in self.conflicts if layer in conflict.layers)

    def to_dict(self) -> dict:
        return {
            "num_layers": self.num_layers,
            "layers": [layer.to_dict() for layer in self.layers],
            "conflicts": [conflict.to_dict() for conflict in self.conflicts],
            "warnings": [{key: value for key, value in warning.to_dict().items() if key not in ("file", "severity")}
                         for warning in self.warnings],
        }
