"""What compression does to the tensors a layer keeps: each compressed input shrinks to its stored bytes.

A Linear cell's weight gradient reads its input; `op_compress` keeps that input as a
compressed copy (see mf_memopt/compress). The full-precision tensor is freed only when
every backward reader reads a compressed copy. The family names its compressible cells
(`compress.family.Target`): each one frees the inventory tensor of its `frees` role,
matched by role (never by the tensor's display text, which changes with the dtypes):

* a cell with a lossless rebuild stores nothing under `lossless` (its input is rebuilt from
  tensors the backward keeps anyway); a quantiser stores `stored_bytes(method, elements)`;
* cells that read the same input are compressed together, each keeping its own copy;
* other cells are not modelled (a note says so).

The backward of a compressed cell holds more than the uncompressed one for a moment: one
restored float32 block of rows (at most 2^18 elements) and, when the input spans several
blocks, the incoming gradient's row slices (all made as the backward starts); a lossless
rebuild holds its whole input; a rebuilt gate its SiLU output. The largest of these in a
layer is added to that layer's backward working set (`backward_extra`): the peak of the CPU
runtime is reached at the end of the forward pass or in the backward of the last layer,
which hold almost the same tensors. Not counted, since the allocation log never shows them
at that peak (tiny Llama, int2 and int8 on its MLP, batch 2 and 3): the conversion
temporaries of a block (each step frees its input: the peak falls while the gate is rebuilt
or SiLU's gradient runs, beside a finished block) and the partial weight gradients (the
first is made after the weight's float32 copy is freed by the input gradient, its one reader).

Work: quantising costs about 12 element-wise operations per element in the forward pass
and 6 in the backward (decompression); lossless costs one multiplication per element. Its
time is not modelled from them: each compressed input's bytes are recorded per method
(`LayerEffect.codec`) and priced by a throughput measured on the device
(`transfer.Hardware.codec_gbps`). The ascend runtime's working set counts `backward_extra`
too (`memory.py`): the same codec, and the same restore blocks, run there.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ..compress.codec_shape import restore_block_rows
from ..compress.methods import stored_bytes
from ..config.plan import CompressUse, LayerPlan
from ..document.patterns import compile_pattern
from .effects import LayerEffect, TensorFate
from .inventory import FP32

if TYPE_CHECKING:
    from ..compress.family import Compression, Target

QUANTISE_OPS, DEQUANTISE_OPS = 12, 6


def compress_effect(plan: LayerPlan, effect: LayerEffect, compression: Compression, element_bytes: int = FP32,
                    model=None) -> LayerEffect:
    if not plan.op_compress:
        return effect
    by_cell = _cells(plan.op_compress, compression)
    tensors, notes, work, codec = [], list(effect.notes), 0, []
    rebuilt = {role for target in compression.targets if target.cell in by_cell for role in target.also_frees}
    for item in effect.tensors:
        if item.fate == "kept" and item.saved.role in rebuilt:
            continue    # rebuilt in the backward by the cells that replace the MLP
        users = [target for target in compression.targets
                 if item.saved.role is not None and target.frees == item.saved.role and target.cell in by_cell]
        if not users or item.fate != "kept":
            tensors.append(item)
            continue
        elements = item.saved.nbytes // element_bytes // item.saved.copies
        stored = sum(stored_bytes(by_cell[target.cell].method, elements, by_cell[target.cell].group_size)
                     for target in users)
        work += sum(elements * (QUANTISE_OPS + DEQUANTISE_OPS) if by_cell[target.cell].method != "lossless"
                    else elements for target in users)
        codec += [(by_cell[target.cell].method, elements * element_bytes) for target in users]
        label = ", ".join(f"{target.cell} {by_cell[target.cell].method}" for target in users)
        tensors.append(TensorFate(saved=replace(item.saved, what=f"{item.saved.what}, compressed ({label})",
                                                nbytes=stored), fate="kept", rule=by_cell[users[0].cell].origin.key))
    modelled = {target.cell for target in compression.targets}
    unmodelled = sorted(set(_named_cells(plan.op_compress, compression)) - modelled)
    if unmodelled:
        notes.append(f"compression of {', '.join(unmodelled)} is not modelled: counted as saving nothing")
    if work:
        notes.append(f"compression work: about {work / 1e6:.1f} M element operations per layer and step")
    extra = max((_backward_extra(compression.target(cell), use, model, element_bytes) for cell, use in by_cell.items()),
                default=0) if model is not None else 0
    return replace(effect, tensors=tuple(tensors), notes=tuple(notes), backward_extra=extra,
                   codec=effect.codec + tuple(codec))


def _backward_extra(target: Target, use: CompressUse, model, element_bytes: int) -> int:
    """Bytes the backward of one compressed cell holds beyond what the uncompressed backward holds."""
    width = {"hidden": model.hidden, "ffn": model.ffn, "gate and up": 2 * model.ffn,
             "queries": model.heads * model.head_dim, "key or value": model.kv_heads * model.head_dim,
             "query, key and value": (model.heads + 2 * model.kv_heads)
             * model.head_dim}
    columns, outputs = width[target.input_width], width[target.output_width]
    rows = model.batch * model.seq
    gate = model.compute_bytes * rows * columns if target.also_frees else 0     # the rebuilt gate (compute dtype)
    if use.method == "lossless":
        return element_bytes * rows * columns + gate if target.lossless else 0
    block = min(rows, restore_block_rows(columns, use.group_size)) * columns
    slices = model.compute_bytes * rows * outputs if block < rows * columns else 0   # the incoming gradient's rows
    return FP32 * block + slices + gate


def _cells(uses: tuple[CompressUse, ...], compression: Compression) -> dict[str, CompressUse]:
    """The modelled cells each use compresses, with the shared-input rule; lossless only where it applies."""
    result: dict[str, CompressUse] = {}
    for use in uses:
        for target in compression.targets:
            if _matches(use.pattern, target.cell) and (use.method != "lossless" or target.lossless):
                result.setdefault(target.cell, use)
    for target in compression.targets:
        for partner in target.shares_input_with:
            if target.cell in result and partner not in result:
                result[partner] = result[target.cell]
    return result


def _named_cells(uses: tuple[CompressUse, ...], compression: Compression) -> list[str]:
    return [use.pattern.replace("\\.", ".") for use in uses
            if not any(_matches(use.pattern, target.cell) for target in compression.targets)]


def _matches(pattern: str, path: str) -> bool:
    compiled, parts = compile_pattern(pattern), path.split(".")
    return len(compiled.segments) == len(parts) and all(
        compiled.segment_matches(index, part) for index, part in enumerate(parts))
