"""The few things mf_memopt does to MindSpore cells and primitives, in one place.

Cells are walked as trees (`config.tree`: `_cells` and `_primitives` only). Tests pass fake
cells that offer the same attributes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..config.tree import children, join, primitives

__all__ = ["children", "join", "primitives"]

Prefetch = int | str


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
    return type(obj).__name__


def is_recompute_scoped(cell: Any) -> bool:
    """Whether `Cell.recompute` already marked this cell (its scope gets a `recompute_` prefix)."""
    return bool(getattr(cell, "_has_config_recompute", False))


def primitive_recompute(prim: Any) -> bool | None:
    value = prim.attrs.get("recompute")
    return None if value is None else bool(value)


def recompute_cell(cell: Any, **options: bool) -> None:
    cell.recompute(**options)


def recompute_primitive(prim: Any, on: bool) -> None:
    # Primitive.recompute stores `recompute` in the instance dict, which shadows the method
    # once it has been called (by us or by the model's own code): call it through the class.
    type(prim).recompute(prim, on)


def set_comm_recompute(prim: Any, on: bool) -> None:
    prim.add_prim_attr("recompute_comm_op", on)


def offload_primitive(prim: Any, prefetch: Prefetch) -> None:
    # Primitive._offload validates its argument (after setting `offload`) and then sets these two
    # attributes; the plan has validated backward_prefetch already, and the validation costs as
    # much as the attributes themselves.
    prim.add_prim_attr("offload", True)
    prim.add_prim_attr("backward_prefetch", prefetch)
