"""What compression does to the tensors a layer keeps: each compressed input shrinks to its stored bytes.

A Linear cell's weight gradient reads its input; `op_compress` keeps that input as a
compressed copy (see mf_memopt/compress). The full-precision tensor is freed only when
every backward reader reads a compressed copy, so:

* `feed_forward.w2` frees `SiLU(w1) * w3` (its only backward reader); `lossless` stores
  nothing (the product is rebuilt from the two factors, which the product's own gradient
  keeps anyway); a quantiser stores `stored_bytes(method, elements)`;
* `feed_forward.w1` and `feed_forward.w3` (always both) free the normalised input of the
  MLP, and each keeps its own compressed copy;
* other cells are not modelled (a note says so).

Work: quantising costs about 12 element-wise operations per element in the forward pass
and 6 in the backward (decompression); lossless costs one multiplication per element.
"""

from __future__ import annotations

from dataclasses import replace

from ..compress.methods import stored_bytes
from ..patterns import compile_pattern
from ..plan import CompressUse, LayerPlan
from .effects import LayerEffect, TensorFate
from .inventory import FP32

# compressed cell -> (what its weight gradient reads, the inventory tensor that holds it)
FREES = {"feed_forward.w2": "SiLU(w1) * w3 (input of w2)", "feed_forward.w1": "normalised input of w1/w3",
         "feed_forward.w3": "normalised input of w1/w3"}
QUANTISE_OPS, DEQUANTISE_OPS = 12, 6


def compress_effect(plan: LayerPlan, effect: LayerEffect, element_bytes: int = FP32) -> LayerEffect:
    if not plan.op_compress:
        return effect
    by_cell = _cells(plan.op_compress)
    tensors, notes, work = [], list(effect.notes), 0
    for item in effect.tensors:
        users = [cell for cell, what in FREES.items() if what == item.saved.what and cell in by_cell]
        if not users or item.fate != "kept":
            tensors.append(item)
            continue
        elements = item.saved.nbytes // element_bytes
        stored = sum(stored_bytes(by_cell[cell].method, elements, by_cell[cell].group_size) for cell in users)
        work += sum(elements * (QUANTISE_OPS + DEQUANTISE_OPS) if by_cell[cell].method != "lossless" else elements
                    for cell in users)
        label = ", ".join(f"{cell} {by_cell[cell].method}" for cell in users)
        tensors.append(TensorFate(saved=replace(item.saved, what=f"{item.saved.what}, compressed ({label})",
                                                nbytes=stored), fate="kept", rule=by_cell[users[0]].origin.key))
    unmodelled = sorted(set(_named_cells(plan.op_compress)) - set(FREES))
    if unmodelled:
        notes.append(f"compression of {', '.join(unmodelled)} is not modelled: counted as saving nothing")
    if work:
        notes.append(f"compression work: about {work / 1e6:.1f} M element operations per layer and step")
    return replace(effect, tensors=tuple(tensors), notes=tuple(notes))


def _cells(uses: tuple[CompressUse, ...]) -> dict[str, CompressUse]:
    """The modelled cells each use compresses, with the w1/w3 partner rule; lossless only on w2."""
    result: dict[str, CompressUse] = {}
    for use in uses:
        for cell in FREES:
            if _matches(use.pattern, cell) and (use.method != "lossless" or cell == "feed_forward.w2"):
                result.setdefault(cell, use)
    for cell, partner in (("feed_forward.w1", "feed_forward.w3"), ("feed_forward.w3", "feed_forward.w1")):
        if cell in result and partner not in result:
            result[partner] = result[cell]
    return result


def _named_cells(uses: tuple[CompressUse, ...]) -> list[str]:
    return [use.pattern.replace("\\.", ".") for use in uses if not any(_matches(use.pattern, cell) for cell in FREES)]


def _matches(pattern: str, path: str) -> bool:
    compiled, parts = compile_pattern(pattern), path.split(".")
    return len(compiled.segments) == len(parts) and all(
        compiled.segment_matches(index, part) for index, part in enumerate(parts))
