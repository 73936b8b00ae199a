"""The marks of a compiled graph against the apply report, layer by layer.

- every offload, recompute and recompute_comm_op mark in the IR was set by the plan, with
  the same backward_prefetch, and every rule left at least one mark in the graph;
- every recomputed cell has its `recompute_` scope, and no other cell does;
- interaction rule 5: an offloaded node whose output a recomputed node consumes cannot be
  swapped; such edges are reported as conflicts;
- recompute marks that produced no recompute copy (`duplicated`) are reported: they are in
  the graph but save nothing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..compress.family import compression_of
from ..config.plan import Plan
from .compression import check_compression
from .ir import Graph, Node, read_ir

_NOT_CONSUMERS = {"UpdateState", "Load", "Return"}


@dataclass
class LayerCheck:
    layer: int
    name: str = ""                                         # how reports name it: the index, or `mtp.N`
    recompute: list[str] = field(default_factory=list)   # what the plan recomputes ("layer" = whole layer)
    copies: int = 0                                        # recompute copies in the backward
    offloaded: dict[str, int] = field(default_factory=dict)  # backward_prefetch -> operators in the IR
    comm: int = 0
    disagreements: list[str] = field(default_factory=list)
    rule2: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    compressed: list[str] = field(default_factory=list)   # cells whose backward reads only a compressed copy
    stage: int | None = None                               # a pipeline config's: the stage holding the layer
    rank: int | None = None                                # ... and the rank whose graph was read

    @property
    def label(self) -> str:
        return self.name or str(self.layer)


_FOLLOWER = "mtp.layers."


def _decoder(report: dict) -> dict:
    """The apply report's entries of the decoder layers (the MTP layers' are listed under `mtp.layers.N`)."""
    return {**report, **{key: [entry for entry in report.get(key, []) if not entry["path"].startswith(_FOLLOWER)]
                         for key in ("set", "preset")}}


def _followers(report: dict) -> tuple[dict, int]:
    """The MTP layers' entries as a report of their own (layer N, paths below it), and how many layers it has."""
    def own(entry: dict) -> dict:
        index, _, path = entry["path"][len(_FOLLOWER):].partition(".")
        return {**entry, "layer": int(index), "path": path}

    followed = {key: [own(entry) for entry in report.get(key, []) if entry["path"].startswith(_FOLLOWER)]
                for key in ("set", "preset")}
    count = 1 + max((entry["layer"] for entries in followed.values() for entry in entries), default=-1)
    return {**report, **followed, "compressed": []}, count


def check_graph(report: dict, ir_path: str | Path, plan: Plan, *, only: Collection[int] | None = None,
                followers: bool = True) -> tuple[list[LayerCheck], int]:
    """The checks of one compiled graph (its decoder layers, or `only` these, and with `followers` the MTP layers,
    named `mtp.N`), and how many nodes it has. With `only` (a pipeline stage's graph), a layer the graph has no
    operator of disagrees."""
    scopes = compression_of(plan.family).scopes
    graph = read_ir(ir_path, plan.family.ir_layer_scope)
    checks = compare(_decoder(report), graph, plan.num_layers, scopes, only=only)
    follower_report, count = _followers(report)
    if followers and count:
        graph_of_followers = read_ir(ir_path, plan.family.ir_follower_scope)
        checks += [replace(check, layer=plan.num_layers + check.layer, name=f"mtp.{check.layer}",
                           rule2=[item.replace(f"layer {check.layer}:", f"layer mtp.{check.layer}:", 1)
                                  for item in check.rule2])
                   for check in compare(follower_report, graph_of_followers, count, scopes,
                                        only=None if only is None else range(count))]
    return checks, len(graph.nodes)


def compare(report: dict, graph: Graph, num_layers: int, scopes: dict[str, str] | None = None, *,
            only: Collection[int] | None = None) -> list[LayerCheck]:
    """Layer by layer, the marks of the graph against the apply report; `scopes` are the family's compressed cells
    (`Compression.scopes`); `only`: the layers to check (a pipeline stage's), else all."""
    expected, planned = _expected(report), _expected({"set": report["set"]})
    consumers = graph.users()
    everything = {(node.graph, node.ref): node for node in graph.nodes}
    checks = []
    for layer in range(num_layers):
        if only is not None and layer not in only:
            continue
        check = LayerCheck(layer=layer)
        nodes = graph.forward(layer)
        if only is not None and not nodes:
            check.disagreements.append("the graph has no operator of this layer")
        want = expected[layer]
        check.recompute = ["layer" if path == "" else path for path in sorted(want["recompute_cell"])]
        check.recompute += sorted(path for path, on in planned[layer]["recompute"].items() if on)
        copies = [node for node in graph.nodes if node.layer == layer and node.duplicated]
        check.copies = len(copies)
        producers = {(node.graph, node.ref): node for node in nodes}
        comm = {**_implied_comm(nodes, want["recompute_cell"]), **want["recompute_comm_op"]}
        witnessed: dict[str, set[str]] = {}
        for name, wanted, read in (
                ("offload", want["offload"], lambda node: node.prefetch if node.offload else None),
                ("recompute", want["recompute"], lambda node: node.flag("recompute")),
                ("recompute_comm_op", comm, lambda node: node.flag("recompute_comm_op"))):
            witnessed[name] = _check_attribute(check, nodes, producers, wanted, name, read, everything)
        _check_rules_left_marks(check, witnessed, report, layer)
        _check_cells(check, nodes, want["recompute_cell"])
        _check_effect(check, copies, planned[layer])
        _check_rule2(check, nodes, consumers)
        for node in nodes:
            if node.offload:
                check.offloaded[str(node.prefetch)] = check.offloaded.get(str(node.prefetch), 0) + 1
        check.comm = sum(1 for node in nodes if node.flag("recompute_comm_op"))
        entries = [entry for entry in report.get("compressed", []) if entry["layer"] == layer]
        if entries:
            found, wrong, notes = check_compression(layer, entries, [node for node in graph.nodes
                                                                     if node.layer == layer], graph, scopes or {})
            check.compressed, check.disagreements, check.notes = found, check.disagreements + wrong, check.notes + notes
        checks.append(check)
    return checks


def _expected(report: dict) -> dict[int, dict[str, dict]]:
    expected: dict[int, dict[str, dict]] = defaultdict(lambda: defaultdict(dict))
    for entry in [*report.get("preset", []), *report["set"]]:     # the plan's setting wins over a preset mark
        ((setting, value),) = entry["set"].items()
        expected[entry["layer"]][setting][entry["path"]] = value
    return expected


def _implied_comm(nodes: list[Node], cells: dict[str, dict]) -> dict[str, bool]:
    """Cell.recompute(mp_comm_recompute=v) sets recompute_comm_op=v on every primitive of the cell."""
    implied = {}
    for cell, options in cells.items():
        if "mp_comm_recompute" in options:
            implied.update({node.path: options["mp_comm_recompute"] for node in nodes
                            if node.path and _under(node.cell_path, cell)})
    return implied


def _check_attribute(check: LayerCheck, nodes: list[Node], producers: dict, wanted: dict, name: str,
                     read, everything: dict) -> set[str]:
    """Check every `name` mark in the layer; return the planned paths whose mark is in the graph."""
    witnessed = set()
    for node in nodes:
        found = read(node)
        if found is None:
            continue
        if wanted.get(node.path) == found:
            witnessed.add(node.path)
            continue
        stand_in = _stand_in_of(node.path, wanted, found)
        if stand_in is not None:
            witnessed.add(stand_in)
            continue
        sources = _fused_from(node, producers, wanted, found, everything)
        if sources:
            witnessed.update(sources)
            check.notes.append(f"{node.path} carries the {name} mark of {' or '.join(sources)}: MindSpore fused "
                               "the two operators while compiling")
        elif node.path not in wanted and (merged := _merged_into(node, wanted, found)):
            witnessed.update(merged)
            check.notes.append(f"{node.path} is named after another cell's primitive (MindSpore merged equal "
                               f"primitives); the plan set {name}={found} on {node.cell_path}'s own "
                               f"({', '.join(merged)})")
        elif node.path in wanted:
            check.disagreements.append(f"{node.path}: {name}={found} in the graph, the plan set {wanted[node.path]}")
        else:
            check.disagreements.append(f"{node.path or node.op}: {name}={found} in the graph, not set by the plan")
    return witnessed


def _stand_in_of(path: str | None, wanted: dict, found) -> str | None:
    """The planned operator a node lies inside, when it gave the node its mark: a CPU stand-in is a cell in the place
    of a primitive, and a mark the plan sets on that primitive goes to every operator inside it
    (`models/mcore/stand_in.StandIn`). A real primitive has nothing inside it."""
    if not path:
        return None
    return next((planned for planned, value in wanted.items() if value == found and path.startswith(planned + ".")),
                None)


def _merged_into(node: Node, wanted: dict, found) -> list[str]:
    """The planned primitives of the node's own cell with the node's mark, when the node bears an instance name no
    primitive of its cell has: once a plan gives several primitives the same attributes, MindSpore keeps one object
    for equal primitives and names every node after it (an op_swap of DeepSeek-V3's attention: the rotary and
    attention stand-ins' Muls all named after q_layernorm's `mul_gamma`)."""
    own = [path for path in wanted if path.rsplit(".", 1)[0] == node.cell_path]
    if not own or any(path.rsplit(".", 1)[-1] == node.instance for path in own):
        return []
    return sorted(path for path in own if wanted[path] == found)


def _fused_from(node: Node, producers: dict, wanted: dict, found, everything: dict) -> list[str]:
    """The planned primitives one of which a fused node took its mark from (one, unless the IR cannot say which;
    empty when none): same operator name, fed by its cell, or else of a cell enclosing it.

    `Linear` reshapes its output with the same primitive it reshapes its input with; the
    compiler fuses that output reshape with the next reshape of the parent cell, which then
    shows the parent's scope but the Linear primitive's attributes.
    """
    for ref in node.inputs:
        producer = producers.get((node.graph, ref))
        if producer is None:
            continue
        candidate = f"{producer.cell_path}.{node.instance}" if producer.cell_path else node.instance
        if candidate != node.path and wanted.get(candidate) == found:
            return [candidate]
    # An mcore linear computes its matmul inside a Morph, which a recomputed layer's IR scopes outside the layer
    # (`recompute_Default/MatMul`): the reshape fused after it is then known only by its own cell. Its mark is
    # that of a linear's same-named primitive directly below that cell (MLA's up projections, under full recompute).
    if any((producer := everything.get((node.graph, ref))) is not None and producer.layer is None
           and producer.op.endswith("MatMul") for ref in node.inputs):
        prefix = f"{node.cell_path}." if node.cell_path else ""
        below = sorted(path for path, value in wanted.items() if value == found and path.startswith(prefix)
                       and path.endswith(f".{node.instance}") and path.count(".") == prefix.count(".") + 1)
        if below:
            return below                    # which of them the IR does not say
    # A chain of reshapes (a cell's, then the compressed linear's own flatten, then its codec's) compiles to
    # one node with the innermost scope and the first one's attributes: the same-named primitive of an
    # enclosing cell (mcore's MLP and ColumnParallelLinear mark their Reshape for recompute).
    parts = node.cell_path.split(".") if node.cell_path else []
    for depth in range(len(parts) - 1, -1, -1):
        candidate = ".".join([*parts[:depth], node.instance])
        if candidate != node.path and wanted.get(candidate) == found:
            return [candidate]
    return []


def _check_rules_left_marks(check: LayerCheck, witnessed: dict[str, set[str]], report: dict, layer: int) -> None:
    by_rule: dict[tuple[str, str], list[str]] = defaultdict(list)
    for entry in report["set"]:
        if entry["layer"] == layer and entry["target"] == "primitive":
            by_rule[(entry["rule"], next(iter(entry["set"])))].append(entry["path"])
    for (rule, setting), paths in by_rule.items():
        if not witnessed[setting].intersection(paths):
            check.disagreements.append(f"{rule}: none of its {len(paths)} operators carries {setting} in the graph")


def _check_cells(check: LayerCheck, nodes: list[Node], cells: dict[str, dict]) -> None:
    scoped = {node.cell_path for node in nodes if node.in_recompute_scope}
    for cell in cells:
        if not any(_under(path, cell) for path in scoped):
            check.disagreements.append(f"{cell or 'the layer'}: recomputed by the plan, no recompute_ scope in the "
                                       "graph")
    stray = sorted(path for path in scoped if not any(_under(path, cell) for cell in cells))
    if stray:
        check.disagreements.append(f"recompute_ scope on {', '.join(stray)}, which the plan does not recompute")


def _check_effect(check: LayerCheck, copies: list[Node], want: dict) -> None:
    for cell in want["recompute_cell"]:
        if not any(_under(node.cell_path, cell) for node in copies):
            check.notes.append(f"{cell or 'the layer'} is marked for recompute, but the graph has no recompute "
                               "copy of it: it saves no memory here")
    copied = {node.path for node in copies}
    for path, on in want["recompute"].items():
        inside_cell = any(_under(path, cell) for cell in want["recompute_cell"])
        if on and path not in copied and not inside_cell:
            check.notes.append(f"{path} is marked for recompute, but the graph has no recompute copy of it "
                               "(its consumers keep their own inputs): it saves no memory here")


def _check_rule2(check: LayerCheck, nodes: list[Node], consumers: dict) -> None:
    for node in nodes:
        if not node.offload:
            continue
        if node.recomputed:
            check.disagreements.append(f"{node.path}: both offloaded and recomputed (rule 1 was not enforced)")
            continue
        users = [user for user in consumers.get((node.graph, node.ref), []) if user.op not in _NOT_CONSUMERS]
        recomputing = sorted({_label(user) for user in users if user.recomputed or user.duplicated})
        if recomputing:
            check.rule2.append(f"layer {check.layer}: the offload of {node.path} does not take effect: its output "
                               f"is consumed by recomputed {', '.join(recomputing)} (rule 2)")


def _label(node: Node) -> str:
    operator = node.op.removeprefix("PrimFunc_")
    return node.path or (f"{node.cell_path} ({operator})" if node.cell_path else operator)


def _under(path: str, cell: str) -> bool:
    return cell == "" or path == cell or path.startswith(cell + ".")
