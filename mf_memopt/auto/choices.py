"""What `auto` may give a decoder layer, and what each choice costs and saves there.

A choice is a small recipe (full recompute, select recompute of some cells, a layer or
operator swap, compression of a cell's Linear inputs); its bytes come from the estimator
itself: the choice is turned into the `LayerPlan` the YAML would produce and passed through
`estimate.effects.layer_effect` (and `estimate.compress.compress_effect`), so whatever the
estimator learns about a layer's tensors reaches the planner unchanged; the solver only sees
`Option`s.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from ..compress.family import compression_of
from ..config.plan import CompressUse, LayerPlan, SwapUse, Use
from ..config.rules import Origin
from ..estimate.compress import compress_effect
from ..estimate.effects import LayerEffect, layer_effect, with_kept_communication
from ..estimate.inventory import Op, Saved
from ..family import AutoCells, ModelFamily

FULL = "full"

_RECOMPUTE = Origin(path=("recompute_config", "recompute"), line=None)
_SELECT = Origin(path=("recompute_config", "select_recompute"), line=None)
_LAYER_SWAP = Origin(path=("swap_config", "layer_swap"), line=None)
_OP_SWAP = Origin(path=("swap_config", "op_swap"), line=None)
_COMPRESS = Origin(path=("compress_config", "op_compress"), line=None)
GROUP_SIZE = 256        # op_compress's default group_size
METHODS = ("int8", "int4", "int2", "lossless")


@dataclass(frozen=True, slots=True, kw_only=True)
class Choice:
    """One way to treat a layer's activations."""

    full: bool = False
    select: tuple[str, ...] = ()        # cells recomputed in the backward
    layer_swap: bool = False
    op_swap: tuple[str, ...] = ()       # cells whose outputs are swapped to host memory
    compress: tuple[tuple[str, str, str], ...] = ()     # (cell, op_compress pattern, method) kept compressed

    @property
    def swaps(self) -> bool:
        return self.layer_swap or bool(self.op_swap)

    @property
    def features(self) -> frozenset[str]:
        """The recompute settings this choice writes (for the per-stage count forms)."""
        return _features(self.full, self.select)

    @property
    def name(self) -> str:
        if self.full:
            return "full recompute"
        parts = [f"recompute {'+'.join(self.select)}"] if self.select else []
        parts += ["swap layer"] if self.layer_swap else []
        parts += [f"swap {'+'.join(self.op_swap)}"] if self.op_swap else []
        parts += [f"compress {cell} {method}" for cell, _, method in self.compress]
        return ", ".join(parts) or "keep"

    def layer_plan(self, layer: int, stage: int, chunk: int, prefetch: int = 1) -> LayerPlan:
        return LayerPlan(
            layer=layer, stage=stage, chunk=chunk, full_recompute=_RECOMPUTE if self.full else None,
            select_recompute=tuple(Use(pattern=cell, origin=_SELECT) for cell in self.select),
            layer_swap=SwapUse(pattern=None, prefetch=prefetch, origin=_LAYER_SWAP) if self.layer_swap else None,
            op_swap=tuple(SwapUse(pattern=cell, prefetch=prefetch, origin=_OP_SWAP) for cell in self.op_swap),
            op_compress=tuple(CompressUse(pattern=pattern, method=method, group_size=GROUP_SIZE, origin=_COMPRESS)
                              for _, pattern, method in self.compress))


KEEP = Choice()


@functools.cache
def _features(full: bool, select: tuple[str, ...]) -> frozenset[str]:
    return frozenset(select) | ({FULL} if full else frozenset())


def choice_set(cells: AutoCells, *, swap: bool, select: bool = True, full: bool = True,
               compress: tuple[str, ...] = ()) -> tuple[Choice, ...]:
    """The choices `auto` considers among the family's cells; swap ones only where swapping moves data (the
    ascend runtime): a cell swapped alone, or next to recomputing another; with `compress` (methods), a cell's
    Linear inputs kept compressed, alone or next to recomputing another cell."""
    choices = [KEEP]
    if select:
        choices += [Choice(select=(cell,)) for cell in cells.select]
        choices.append(Choice(select=cells.select))
    if full:
        choices.append(Choice(full=True))
    if swap:
        choices.append(Choice(layer_swap=True))
        choices += [Choice(op_swap=(cell,)) for cell in cells.swap]
        if select:
            choices += [Choice(select=(cell,), op_swap=(other,)) for cell in cells.select for other in cells.swap
                        if other != cell]
    targets = [(cell, pattern, method) for method in compress if method != "lossless"
               for cell, pattern in cells.compress]
    if "lossless" in compress and cells.lossless is not None:
        targets.append((*cells.lossless, "lossless"))
    for target in targets:
        choices.append(Choice(compress=(target,)))
        if select:
            choices += [Choice(select=(other,), compress=(target,)) for other in cells.select if other != target[0]]
    return tuple(choices)


@dataclass(frozen=True, slots=True, kw_only=True)
class Footprint:
    """What a choice leaves in one layer, per micro-batch, as the estimator counts it."""

    choice: Choice
    effect: LayerEffect
    attention_rebuilt: bool             # some tensor of the attention is rebuilt (the causal mask is then kept)
    rebuilt_at_once: int | None = None  # the most rebuilt at one time, when the effect spans layers (MTP followers)

    @property
    def kept(self) -> int:
        return self.effect.bytes("kept")

    @property
    def rebuilt(self) -> int:
        """The bytes a recompute rebuilds at once in the backward (one layer's: the working set's share)."""
        return self.effect.bytes("recomputed") if self.rebuilt_at_once is None else self.rebuilt_at_once

    @property
    def swapped(self) -> int:
        return self.effect.bytes("swapped")

    @property
    def held_in_backward(self) -> int:
        """What the ascend estimator's backward working set holds for this layer: what it rebuilds at once and what
        its codec restores (`estimate.memory`)."""
        return self.rebuilt + self.effect.backward_extra


def footprints(choices: tuple[Choice, ...], inventory: list[Saved], ops: list[Op],
               family: ModelFamily, communication: list[Saved] | tuple = (), *, model=None,
               element_bytes: int = 4) -> tuple[Footprint, ...]:
    """Each choice's effect on a layer (all layers of a model have the same tensors), as the estimator counts it:
    `communication`, the outputs of the tensor-parallel communication a fully recomputed layer keeps
    (`estimate.effects.keeps_communication`), added to full recompute; a compressed cell's input stored as its
    method stores it (`estimate.compress.compress_effect`, for `model`, `element_bytes` a saved element)."""
    prints = []
    for choice in choices:
        plan = choice.layer_plan(0, 0, 0)
        effect = layer_effect(plan, inventory, ops, family.cell_outputs, family.primitive_recompute)
        if choice.full and communication:
            effect = with_kept_communication(effect, list(communication))
        if choice.compress:
            effect = compress_effect(plan, effect, compression_of(family), element_bytes, model)
        rebuilt = any(item.fate == "recomputed" and item.saved.path.startswith(family.auto_cells.attention_prefix)
                      for item in effect.tensors)
        prints.append(Footprint(choice=choice, effect=effect, attention_rebuilt=rebuilt))
    return tuple(prints)
