"""The base class of every CPU stand-in of an mcore model (`cpu_kernels.py`: the dense model's kernels,
`moe_kernels.py`: the MoE layers'): a cell in the place of one primitive, under its name, that takes the marks a
plan sets on that primitive.
"""

from __future__ import annotations

from typing import Any

from mindspore import nn


class StandIn(nn.Cell):
    """A cell in the place of one primitive operator, under the primitive's name.

    A pattern resolves against the model as Ascend builds it, where the name is an operator; so the marks a plan
    sets on an operator (`recompute_comm_op` from select_comm_recompute, `recompute: False` from an exclude,
    `offload`) reach the stand-in as they would reach the primitive (`add_prim_attr`, `recompute(mode)`), and go to
    every operator inside it: each is part of what the primitive computes. `attrs` holds the marks so set, as the
    primitive's would. Select recompute of the name recomputes the stand-in as a cell, as before the plan's marks
    (`Cell.recompute()`, no positional argument): measured on CPU, and priced so by the estimate."""

    operator_stand_in = True        # read by config.match, which cannot import this module (no MindSpore there)

    def __init__(self):
        super().__init__()
        self.stand_in_marks: dict = {}

    @property
    def attrs(self) -> dict:
        return self.stand_in_marks

    def add_prim_attr(self, name: str, value: Any) -> StandIn:
        for primitive in self._operators():
            primitive.add_prim_attr(name, value)
        self.stand_in_marks[name] = value
        return self

    def recompute(self, mode: bool | None = None, **kwargs: Any) -> None:
        """`recompute(mode)` as `Primitive.recompute`: every operator inside; `recompute(**options)` as
        `Cell.recompute`."""
        if mode is None:
            super().recompute(**kwargs)
            return
        for primitive in self._operators():
            type(primitive).recompute(primitive, mode)
        self.stand_in_marks["recompute"] = bool(mode)

    def _operators(self) -> list[Any]:
        return [primitive for _, cell in self.cells_and_names() for primitive in cell._primitives.values()
                if primitive is not None]
