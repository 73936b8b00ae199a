"""The few things mf_memopt does to MindSpore cells and primitives, in one place.

Cells are walked as trees (`document.tree`: `_cells` and `_primitives` only). Tests pass fake
cells that offer the same attributes.
"""

from __future__ import annotations

from typing import Any

from ..document.tree import (
    children,
    is_recompute_scoped,
    join,
    primitive_recompute,
    primitives,
    type_name,
    walk_cells,
    walk_primitives,
)

__all__ = ["children", "is_recompute_scoped", "join", "primitive_recompute", "primitives", "type_name", "walk_cells",
           "walk_primitives"]

Prefetch = int | str


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
