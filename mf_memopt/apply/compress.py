"""Install the compressed cells a layer's compression actions name (`config.compress_actions`)."""

from __future__ import annotations

import zlib

from ..compress.choice import CodecChoice, choose_codec
from ..compress.family import Compression
from ..config.compress_actions import CompressAction
from . import cells


def codec_for(actions: list[CompressAction], device_target: str | None) -> CodecChoice | None:
    """The codec the quantised actions will use (`compress.choice`), or None when none is quantised."""
    if not any(action.use.method != "lossless" for action in actions):
        return None
    return choose_codec(device_target)


def install(actions: list[CompressAction], compression: Compression,
            recomputed: dict[int, set[str]] | None = None, codec: CodecChoice | None = None) -> list[str]:
    """Replace the cells (quantised ones first: a lossless or gated parent adopts its children as they are then)."""
    if not actions:
        return []
    for action in actions:
        if action.use.method == "lossless":
            continue
        if codec is None:
            raise ValueError("quantised compression needs a codec (apply.compress.codec_for)")
        bits = int(action.use.method[3:])
        action.codec = codec.name
        action.replacement = compression.quantised_cell(action.obj, codec.make(bits, action.use.group_size,
                                                                               _seed(action)), action.use.method)
        action.parent.insert_child_to_cell(action.name, action.replacement)
    notes = []
    for action in actions:
        if action.use.method == "lossless":
            continue
        if _recomputes(recomputed or {}, action.layer, compression.gate_cell):
            if compression.rebuilds_gate(action.path, action.parent):
                notes.append(f"layer {action.layer}: {compression.gate_cell} is recomputed, so the MLP keeps its gate "
                             f"as autodiff does; only {action.path}'s input is compressed")
            continue
        rebuild = compression.gate_rebuild(action.path, action.parent, action.grandparent)
        if rebuild is not None:
            owner, name, cell = rebuild
            owner.insert_child_to_cell(name, cell)
            action.gate_rebuilt = True
    for action in actions:
        if action.use.method == "lossless":
            owner, name = action.grandparent
            action.replacement = compression.lossless_cell(action.parent)
            owner.insert_child_to_cell(name, action.replacement)
    for action in actions:
        if action.use.offload is not None:
            for _, prim, _ in cells.walk_primitives(action.replacement):
                cells.offload_primitive(prim, action.use.offload)
    return notes


def _recomputes(recomputed: dict[int, set[str]], layer: int, cell: str) -> bool:
    return bool(cell) and any(path == cell or path.startswith(f"{cell}.") for path in recomputed.get(layer, ()))


def _seed(action: CompressAction) -> int:
    # A fixed stream per layer and cell: runs are reproducible, and no two cells share noise.
    return zlib.crc32(f"{action.layer}:{action.path}".encode()) % (2 ** 30)


def compress_line(layer: int, actions: list[CompressAction]) -> str | None:
    """`Set op_compress at layer 1: <cell>, method=int2`, every cell of the layer on one line."""
    if not actions:
        return None
    items = []
    for action in actions:
        item = f"{action.path}, method={action.use.method}"
        if action.use.offload is not None:
            item += f", offload={action.use.offload}"
        items.append(item)
    return f"Set op_compress at layer {layer}: {', '.join(items)}"
