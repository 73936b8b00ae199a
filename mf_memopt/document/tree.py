"""A decoder layer as a tree of named child cells and primitive operators.

Patterns are matched against this tree only: `_cells` and `_primitives`, the same registries
MindSpore's own `Cell.offload` and `Cell.recompute` use, so a pattern can never reach a dunder,
a method or a non-primitive attribute. The tree is a real MindSpore layer when a model is
built, or `RecordedCell`, a layer recorded from a real model and kept as data by its family
(`models/<family>/layers.json`), so that `validate` can match patterns without MindSpore.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def children(cell: Any) -> list[tuple[str, Any]]:
    return [(name, child) for name, child in cell._cells.items() if child is not None]


def primitives(cell: Any) -> list[tuple[str, Any]]:
    return [(name, prim) for name, prim in cell._primitives.items() if prim is not None]


def join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def walk_primitives(cell: Any, prefix: str = "") -> Iterator[tuple[str, Any, tuple[Any, ...]]]:
    """(dotted path, primitive, ancestor cells from `cell` down) for every primitive below `cell`."""
    yield from _walk(cell, prefix, (cell,))


def _walk(cell: Any, prefix: str, ancestors: tuple[Any, ...]) -> Iterator[tuple[str, Any, tuple[Any, ...]]]:
    for name, prim in primitives(cell):
        yield join(prefix, name), prim, ancestors
    for name, child in children(cell):
        yield from _walk(child, join(prefix, name), (*ancestors, child))


def walk_cells(cell: Any) -> Iterator[Any]:
    """`cell` and every cell below it."""
    yield cell
    for _, child in children(cell):
        yield from walk_cells(child)


def type_name(obj: Any) -> str:
    """The class of a cell or primitive (of the recorded one, for a recorded cell)."""
    return getattr(obj, "recorded_kind", None) or type(obj).__name__


def is_recompute_scoped(cell: Any) -> bool:
    """Whether `Cell.recompute` already marked this cell (its scope gets a `recompute_` prefix)."""
    return bool(getattr(cell, "_has_config_recompute", False))


def primitive_recompute(prim: Any) -> bool | None:
    value = prim.attrs.get("recompute")
    return None if value is None else bool(value)


MARKS = ("recompute", "recompute_comm_op", "offload", "backward_prefetch")   # attributes a built model may carry


class RecordedPrim:
    """A primitive operator as recorded: its class and the marks the model set on it itself."""

    def __init__(self, kind: str, attrs: dict):
        self.recorded_kind, self.attrs = kind, attrs


class RecordedCell:
    """A cell as recorded: its class, the attributes its family looks at, its child cells and primitives."""

    def __init__(self, kind: str, cells: dict[str, RecordedCell], prims: dict[str, RecordedPrim],
                 attributes: dict, scoped: bool):
        self.recorded_kind, self._cells, self._primitives = kind, cells, prims
        self._attributes, self._has_config_recompute = attributes, scoped

    def __getattr__(self, name: str) -> Any:
        attributes = self.__dict__.get("_attributes", {})
        if name in attributes:
            return attributes[name]
        raise AttributeError(name)

    @classmethod
    def from_dict(cls, data: dict) -> RecordedCell:
        prims = {name: RecordedPrim(kind, {}) if isinstance(kind, str) else RecordedPrim(kind["type"], kind["marks"])
                 for name, kind in data.get("primitives", {}).items()}
        return cls(data["type"], {name: cls.from_dict(child) for name, child in data.get("cells", {}).items()},
                   prims, dict(data.get("attributes", {})), bool(data.get("recompute_scoped", False)))


def record(cell: Any, attributes: tuple[str, ...] = ()) -> dict:
    """A cell's tree as data: {"type", "attributes", "recompute_scoped", "cells": {name: ...}, "primitives":
    {name: operator class, or {"type", "marks"} when the model marked it}}, with the `attributes` it has."""
    result: dict = {"type": type_name(cell)}
    found = {name: record(child, attributes) for name, child in children(cell)}
    prims = {name: _record_prim(prim) for name, prim in primitives(cell)}
    values = {name: getattr(cell, name) for name in attributes if _plain(getattr(cell, name, None))}
    if values:
        result["attributes"] = values
    if is_recompute_scoped(cell):
        result["recompute_scoped"] = True
    if found:
        result["cells"] = found
    if prims:
        result["primitives"] = prims
    return result


def _record_prim(prim: Any) -> str | dict:
    marks = {name: prim.attrs[name] for name in MARKS if name in prim.attrs}
    return {"type": type_name(prim), "marks": marks} if marks else type_name(prim)


def _plain(value: Any) -> bool:
    return isinstance(value, (bool, int, str)) and not isinstance(value, type)
