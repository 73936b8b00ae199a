"""Read MindSpore's text IR (`*validate*.ir`, MindSpore 2.9) far enough to see what took effect.

One node per line, its scope on a following `# Fullname with scope: (...)` line:

  %92(x) = PrimFunc_MatMul(%90, %91, ...) {instance name: matmul} primitive_attrs: {offload: Bool(1),
      backward_prefetch: I64(20)} cnode_attrs: {checkpoint: Bool(1)} ...
      # Fullname with scope: (Default/.../<the decoder layer N>/<cell>-<Class>/<cell>-<Class>/MatMul-op0)

Which part of a scope is the decoder layer is the model family's (`ModelFamily.ir_layer_scope`).

Cells recomputed with Cell.recompute get a `recompute_` scope prefix; the copies the
recompute pass inserts into the backward carry `duplicated: Bool(1)`.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

_NODE = re.compile(r"^\s+(%\d+)\([^)]*\) = ([\w.:]+)\((.*)$")
_ATTRS = re.compile(r"(primitive_attrs|cnode_attrs): \{([^{}]*)\}")
_INSTANCE = re.compile(r"\{instance name: ([^}]*)\}")
_SCOPE = re.compile(r"^\s+# Fullname with scope: \((.*)\)\s*$")
_GRAPH = re.compile(r"^subgraph @(\S+)\(")
_REF = re.compile(r"%\d+")
_PREFETCH = re.compile(r"I64\((\d+)\)")
_MARKERS = (" {instance name:", " primitive_attrs:", " cnode_attrs:", " cnode_primal_attrs:")


@dataclass
class Node:
    ref: str
    op: str
    graph: str
    inputs: list[str]
    instance: str | None
    prim_attrs: dict[str, str]
    cnode_attrs: dict[str, str]
    scope: str = ""
    layer_scope: re.Pattern[str] | None = None   # group 1: the layer index, group 2: the scope below it

    def _layer_match(self) -> re.Match[str] | None:
        return self.layer_scope.search(self.scope) if self.layer_scope is not None else None

    @property
    def layer(self) -> int | None:
        match = self._layer_match()
        return int(match.group(1)) if match else None

    @property
    def cell_path(self) -> str:
        """The cell below the decoder layer, dotted; "" for the layer itself."""
        match = self._layer_match()
        if not match:
            return ""
        parts = match.group(2).split("/")[:-1]
        return ".".join(part.rsplit("-", 1)[0] for part in parts)

    @property
    def path(self) -> str | None:
        """The primitive's path below the layer (`<cell>.<instance>`), when the IR names it."""
        if self.instance is None:
            return None
        return f"{self.cell_path}.{self.instance}" if self.cell_path else self.instance

    @property
    def backward(self) -> bool:
        return self.scope.startswith("Gradients/")

    @property
    def duplicated(self) -> bool:
        return self.cnode_attrs.get("duplicated") == "Bool(1)"

    @property
    def in_recompute_scope(self) -> bool:
        return self.scope.startswith("recompute_")

    @property
    def recomputed(self) -> bool:
        """A forward node the recompute pass will recompute (not a cell's kept output)."""
        if self.duplicated or self.backward:
            return False
        flag = self.cnode_attrs.get("recompute", self.prim_attrs.get("recompute"))
        return flag == "Bool(1)" or (self.in_recompute_scope and flag != "Bool(0)")

    @property
    def offload(self) -> bool:
        return self.prim_attrs.get("offload") == "Bool(1)"

    @property
    def prefetch(self) -> int | str | None:
        value = self.prim_attrs.get("backward_prefetch")
        if value is None:
            return None
        number = _PREFETCH.fullmatch(value)
        return int(number.group(1)) if number else value.strip('"')

    def flag(self, name: str) -> bool | None:
        value = self.prim_attrs.get(name)
        return None if value is None else value == "Bool(1)"


@dataclass
class Graph:
    nodes: list[Node] = field(default_factory=list)

    def users(self) -> dict[tuple[str, str], list[Node]]:
        result: dict[tuple[str, str], list[Node]] = defaultdict(list)
        for node in self.nodes:
            for ref in node.inputs:
                result[(node.graph, ref)].append(node)
        return result

    def forward(self, layer: int) -> list[Node]:
        return [node for node in self.nodes if node.layer == layer and not node.backward and not node.duplicated]


def read_ir(path: str | Path, layer_scope: re.Pattern[str]) -> Graph:
    """The nodes of an IR file; `layer_scope` finds the decoder layer in a scope (the family's)."""
    graph, current, last = Graph(), "", None
    with open(path, encoding="utf-8", errors="replace") as lines:
        for line in lines:
            if (header := _GRAPH.match(line)) is not None:
                current = header.group(1)
            elif (node := _node(line, current, layer_scope)) is not None:
                graph.nodes.append(node)
                last = node
            elif last is not None and not last.scope and (scope := _SCOPE.match(line)) is not None:
                last.scope = scope.group(1)
    return graph


def _node(line: str, graph: str, layer_scope: re.Pattern[str]) -> Node | None:
    match = _NODE.match(line)
    if match is None:
        return None
    ref, op, rest = match.groups()
    cut = min([index for marker in _MARKERS if (index := rest.find(marker)) != -1], default=len(rest))
    blocks = {kind: _attrs(body) for kind, body in _ATTRS.findall(rest[cut:])}
    instance = _INSTANCE.search(rest[cut:])
    return Node(ref=ref, op=op, graph=graph, inputs=_REF.findall(rest[:cut]),
                instance=instance.group(1) if instance else None,
                prim_attrs=blocks.get("primitive_attrs", {}), cnode_attrs=blocks.get("cnode_attrs", {}),
                layer_scope=layer_scope)


def _attrs(body: str) -> dict[str, str]:
    items = re.split(r",\s*(?=[A-Za-z_]\w*: )", body.strip())
    return dict(item.split(": ", 1) for item in items if ": " in item)


def find_validate_ir(directory: str | Path) -> Path:
    files = sorted(Path(directory).rglob("*validate*.ir"), key=lambda path: path.stat().st_mtime)
    if not files:
        raise FileNotFoundError(f"no *validate*.ir under {directory}: the graph was not compiled")
    return files[-1]
