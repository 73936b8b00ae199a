"""A decoder layer as a tree of named child cells and primitive operators.

Patterns are matched against this tree only: `_cells` and `_primitives`, the same registries
MindSpore's own `Cell.offload` and `Cell.recompute` use, so a pattern can never reach a dunder,
a method or a non-primitive attribute. The tree is a real MindSpore layer when a model is
built, or `RecordedCell`, a layer recorded from a real model and kept as data by its family
(`models/<family>/layers.json`), so that `validate` can match patterns without MindSpore.
"""

from __future__ import annotations

from typing import Any


def children(cell: Any) -> list[tuple[str, Any]]:
    return [(name, child) for name, child in cell._cells.items() if child is not None]


def primitives(cell: Any) -> list[tuple[str, Any]]:
    return [(name, prim) for name, prim in cell._primitives.items() if prim is not None]


def join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


class RecordedCell:
    """A cell as recorded: its class name, child cells and primitives (by operator class name)."""

    def __init__(self, kind: str, cells: dict[str, RecordedCell], prims: dict[str, str]):
        self.kind, self._cells, self._primitives = kind, cells, prims

    @classmethod
    def from_dict(cls, data: dict) -> RecordedCell:
        return cls(data["type"], {name: cls.from_dict(child) for name, child in data.get("cells", {}).items()},
                   dict(data.get("primitives", {})))


def record(cell: Any) -> dict:
    """A cell's tree as data: {"type", "cells": {name: ...}, "primitives": {name: operator class}}."""
    result: dict = {"type": type(cell).__name__}
    found = {name: record(child) for name, child in children(cell)}
    prims = {name: type(prim).__name__ for name, prim in primitives(cell)}
    if found:
        result["cells"] = found
    if prims:
        result["primitives"] = prims
    return result
