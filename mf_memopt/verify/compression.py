"""`verify` for compression: the compressed cells are in the compiled graph, and keep no full-precision input.

For each cell the apply report lists as compressed, the IR must hold its custom-bprop cell
(where the family's replacement cell puts it: `Compression.scopes`). Its
first MatMul is the forward product; its input `x` is the full-precision tensor. The
backward reads only the compressed copy when no other MatMul of the cell (the weight
gradient) reads `x`. Other backward readers of `x` (a sibling's gradient, a norm) keep
it alive: they are reported as notes, since the compression then saves nothing.
"""

from __future__ import annotations

from .ir import Graph, Node


def check_compression(layer: int, entries: list[dict], nodes: list[Node], graph: Graph,
                      scopes: dict[str, str]) -> tuple[list, list, list]:
    """(compressed paths found, disagreements, notes) for one layer; `scopes`: replacement class -> its cell."""
    found, disagreements, notes = [], [], []
    users = None
    for entry in entries:
        scope = scopes[entry["replaced_by"]].format(path=entry["path"], parent=entry["path"].rpartition(".")[0])
        matmuls = [node for node in nodes if node.cell_path == scope and node.op.endswith("MatMul")]
        if not matmuls:
            disagreements.append(f"{entry['path']}: compressed by the plan ({entry['method']}), but the graph has no "
                                 f"{scope} cell")
            continue
        forward, *backward = matmuls
        source = forward.inputs[0]
        readers = [node for node in backward if source in node.inputs]
        if readers or not backward:
            disagreements.append(f"{entry['path']}: its weight gradient reads the full-precision input, not the "
                                 "compressed copy")
            continue
        found.append(f"{entry['path']} ({entry['method']})")
        users = users if users is not None else graph.users()
        others = sorted({_label(node) for node in users.get((forward.graph, source), [])
                         if node.backward and node.layer == layer})
        if others:
            notes.append(f"{entry['path']}: its full-precision input is also read by the backward of "
                         f"{', '.join(others)}, which keeps it alive")
    return found, disagreements, notes


def _label(node: Node) -> str:
    return node.path or node.cell_path or node.op
