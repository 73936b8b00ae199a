"""What a layer's plan does to the tensors it keeps for backward: kept, recomputed or swapped.

The plan's patterns are matched against the inventory's operator paths exactly as
`apply_plan` matches them against cells: a pattern with fewer segments than the path names
an enclosing cell, one with as many names the primitive itself.

* Full recompute: every tensor except the layer's output (a cell's output is never
  recomputed) is rebuilt in the backward; the layer's forward FLOPs are paid again.
* Select recompute of a cell: the tensors produced inside it are rebuilt, its FLOPs paid
  again. Select recompute of a single primitive is counted as saving nothing in the legacy
  Llama: MindSpore 2.9 inserts no recompute copy for such primitives there (their consumers'
  inputs stay alive), which `python -m mf_memopt verify` shows on the compiled graph. In an
  mcore layer it does (the SiLU output of `mlp.activation_func.silu` is freed, memory-pool
  traces of the mcore sweep), so that family rebuilds a named primitive's output
  (`ModelFamily.primitive_recompute`); an operator the backward runs early is not rebuilt.
* An exclusion naming a primitive keeps its tensor even inside a recomputed cell.
* A tensor that a cell with its own backward holds (`never_recomputed`: the CPU attention stand-in
  of mcore models) is kept whatever recomputes it.
* A layer whose norm casts its input (the layernorm dtype differs from the compute dtype)
  keeps the cast copy, not its input; under full recompute it keeps the input instead (the
  recompute starts from it), so that tensor exists only then. Such a recompute input
  (`recompute_input`) is kept when a recompute covers where it is made: full recompute, or
  a recomputed cell enclosing it (mcore's multi-latent split, kept when the attention is).
* Swap moves the tensors a layer_swap or op_swap names to host memory, except recomputed
  ones (recompute beats swap); op_swap's prefetch wins over layer_swap's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from ..config.plan import LayerPlan, SwapUse
from ..config.rules import Prefetch
from ..document.patterns import compile_pattern
from .inventory import Op, Saved

Fate = Literal["kept", "recomputed", "swapped"]


@dataclass(frozen=True, slots=True, kw_only=True)
class TensorFate:
    saved: Saved
    fate: Fate
    rule: str | None = None          # the YAML key that decided it
    prefetch: Prefetch | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerEffect:
    layer: int
    tensors: tuple[TensorFate, ...]
    recompute_flops: int
    notes: tuple[str, ...] = ()
    recomputed_ops: tuple[str, ...] = ()   # matmul paths (layer_ops) whose forward is run again in the backward
    recompute_scoped: tuple[str, ...] = ()  # matmul paths inside a recomputed scope (their weight casts run again)
    backward_extra: int = 0          # bytes the layer's backward holds beyond its kept tensors (compression)
    codec: tuple[tuple[str, int], ...] = ()  # (method, input bytes) compressed and restored per micro-batch

    def bytes(self, fate: Fate | None = None) -> int:
        return sum(item.saved.nbytes for item in self.tensors if fate is None or item.fate == fate)

    def prefetch_operators(self) -> int | None:
        """The smallest backward_prefetch among the swapped tensors, in operators ('Auto' is 1)."""
        values = [1 if item.prefetch == "Auto" else int(item.prefetch) for item in self.tensors
                  if item.fate == "swapped" and item.prefetch is not None]
        return min(values) if values else None


def _named(pattern: str, path: str) -> Literal["cell", "primitive"] | None:
    """Whether `pattern` names a cell enclosing the operator at `path`, the primitive itself, or neither."""
    compiled, parts = compile_pattern(pattern), path.split(".")
    if len(compiled.segments) > len(parts):
        return None
    if not all(compiled.segment_matches(index, part) for index, part in enumerate(parts[:len(compiled.segments)])):
        return None
    return "primitive" if len(compiled.segments) == len(parts) else "cell"


def layer_effect(plan: LayerPlan, inventory: list[Saved], ops: list[Op],
                 cell_outputs: frozenset[str] = frozenset(), primitive_recompute: bool = False) -> LayerEffect:
    """The layer's tensors under its plan; `cell_outputs` are the operators whose output is their recomputed
    cell's output (kept, not recomputed): they run again only under full recompute of the layer.
    `primitive_recompute`: a select pattern naming a primitive rebuilds that primitive's output (the
    family's model gets MindSpore's recompute copy for it), else it is counted as saving nothing."""
    recomputed_by, notes = _recompute_rules(plan, inventory, primitive_recompute)

    def in_recomputed_cell(path: str) -> bool:
        return plan.full_recompute is not None or any(_named(use.pattern, path) == "cell"
                                                      for use in plan.select_recompute)

    fates = []
    for saved in inventory:
        if saved.recompute_input:
            # the input a recompute starts from: held only when the recompute covers where it is made
            if in_recomputed_cell(saved.path):
                fates.append(TensorFate(saved=saved, fate="kept", rule=recomputed_by(saved.path)))
            continue
        rule = None if saved.never_recomputed else recomputed_by(saved.path, saved.output_of, saved.cpu_only)
        if rule is None and saved.rebuilt_nbytes is not None and (
                in_recomputed_cell(saved.path) or (saved.read_by and recomputed_by(saved.read_by))):
            # read by a recomputed matmul, or excluded inside a recomputed cell: the backward's
            # cast runs late, inside its matmul, so the tensor is held in compute_dtype
            saved = replace(saved, nbytes=saved.rebuilt_nbytes, what=f"{saved.what.split(',')[0]} (its matmul is "
                            "recomputed: held in compute_dtype)")
        if rule is not None and not (plan.full_recompute is not None and saved.kept_by_full_recompute
                                     and rule == plan.full_recompute.key):
            fates.append(TensorFate(saved=saved, fate="recomputed", rule=rule))
            continue
        swap = _swap_of(plan, saved.path)
        if swap is None or (rule is not None):
            fates.append(TensorFate(saved=saved, fate="kept"))
        else:
            fates.append(TensorFate(saved=saved, fate="swapped", rule=swap.origin.key, prefetch=swap.prefetch))
    recomputed = [op for op in ops if recomputed_by(op.path) is not None]
    flops = sum(op.flops for op in recomputed)
    scoped = tuple(op.path for op in recomputed)
    rerun = tuple(path for path in scoped if plan.full_recompute is not None or path not in cell_outputs)
    return LayerEffect(layer=plan.layer, tensors=tuple(fates), recompute_flops=flops, notes=tuple(notes),
                       recomputed_ops=rerun, recompute_scoped=scoped)


def _recompute_rules(plan: LayerPlan, inventory: list[Saved], primitive_recompute: bool = False):
    """A function path -> the rule that recomputes that operator's output (or None), and notes."""
    notes = []
    cells = []
    for use in plan.select_recompute:
        kinds = {_named(use.pattern, saved.path) for saved in inventory} - {None}
        if kinds == {"primitive"} and not primitive_recompute:
            notes.append(f"select recompute `{use.pattern}` names primitives: MindSpore makes no recompute copy of "
                         "them in this model, so they are counted as kept (check with `mf_memopt verify`)")
        cells.append(use)
    excluded = [use.pattern for use in plan.select_recompute_exclude]

    def recomputed_by(path: str, output_of: str | None = None, early: bool = False) -> str | None:
        if any(_named(pattern, path) == "primitive" for pattern in excluded):
            return None
        if plan.full_recompute is not None:
            return plan.full_recompute.key
        # a recomputed cell's output is kept: the next operator's backward reads it (memory-pool trace
        # of configs/recompute_select_patterns.yaml: the MLP's gate cell recomputed, its SiLU output kept)
        # a named primitive's output is rebuilt where the family's model recomputes single primitives; what
        # the backward runs early is not rebuilt by it
        kinds = ("cell", "primitive") if primitive_recompute and not early else ("cell",)
        return next((use.origin.key for use in cells if _named(use.pattern, path) in kinds
                     and not (output_of and _named(use.pattern, output_of) == "primitive")), None)

    return recomputed_by, notes


def _swap_of(plan: LayerPlan, path: str) -> SwapUse | None:
    for use in plan.op_swap:
        if _named(use.pattern, path) is not None:
            return use
    return plan.layer_swap


def keeps_communication(mp_comm_recompute: bool | None, parallel, runtime: str) -> bool:
    """Whether a fully recomputed layer keeps the outputs of its tensor-parallel communication for the backward:
    on the ascend runtime, with tensor parallelism and `mp_comm_recompute: False`."""
    return runtime == "ascend" and parallel.tensor > 1 and mp_comm_recompute is False


def with_kept_communication(effect: LayerEffect, kept_outputs: list[Saved]) -> LayerEffect:
    """A fully recomputed layer under `mp_comm_recompute: False`: the outputs of its tensor-parallel communication
    kept for the backward (the family's `kept_communication`; the mcore family counts them)."""
    kept = tuple(TensorFate(saved=saved, fate="kept", rule="recompute_config.mp_comm_recompute")
                 for saved in kept_outputs)
    return replace(effect, tensors=effect.tensors + kept)
