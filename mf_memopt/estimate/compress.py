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

The backward of a compressed cell holds more than the uncompressed one for a moment: a
restored block of rows with its conversion temporaries (about 12 bytes per element of a
block of at most 2^18 elements) and, when the input spans several blocks, two partial
weight gradients; the lossless w2 rebuilds its whole input. The largest of these in a layer
is added to that layer's backward working set (`backward_extra`): the peak of the CPU
runtime is reached at the end of the forward pass or in the backward of the last layer,
which hold almost the same tensors.

Work: quantising costs about 12 element-wise operations per element in the forward pass
and 6 in the backward (decompression); lossless costs one multiplication per element.
"""

from __future__ import annotations

from dataclasses import replace

from ..compress.codec_shape import restore_block_rows
from ..compress.methods import stored_bytes
from ..patterns import compile_pattern
from ..plan import CompressUse, LayerPlan
from .effects import LayerEffect, TensorFate
from .inventory import FP32

# compressed cell -> (what its weight gradient reads, the inventory tensor that holds it)
FREES = {"feed_forward.w2": "SiLU(w1) * w3 (input of w2)", "feed_forward.w1": "normalised input of w1/w3",
         "feed_forward.w3": "normalised input of w1/w3"}
QUANTISE_OPS, DEQUANTISE_OPS = 12, 6
RESTORE_BYTES_PER_ELEMENT = 12   # restored float32 block + int32 levels + float32 temporary


def compress_effect(plan: LayerPlan, effect: LayerEffect, element_bytes: int = FP32, model=None) -> LayerEffect:
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
    extra = max((_backward_extra(cell, use, model, element_bytes) for cell, use in by_cell.items()), default=0) \
        if model is not None else 0
    return replace(effect, tensors=tuple(tensors), notes=tuple(notes), backward_extra=extra)


def _backward_extra(cell: str, use: CompressUse, model, element_bytes: int) -> int:
    """Bytes the backward of one compressed cell holds beyond what the uncompressed backward holds."""
    columns, outputs = (model.ffn, model.hidden) if cell == "feed_forward.w2" else (model.hidden, model.ffn)
    rows = model.batch * model.seq
    if use.method == "lossless":
        return element_bytes * rows * columns if cell == "feed_forward.w2" else 0
    block = min(rows, restore_block_rows(columns, use.group_size)) * columns
    partials = 2 * FP32 * columns * outputs if block < rows * columns else 0
    return RESTORE_BYTES_PER_ELEMENT * block + partials


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
