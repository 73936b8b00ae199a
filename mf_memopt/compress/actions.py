"""From one layer's compression plan and its real cells to the replacements to install.

Nothing is replaced here: `compress_actions` resolves every pattern and checks every
target first (errors and warnings go to `issues`), so that `apply_plan` replaces
nothing unless the whole plan is valid. `install` then swaps the cells in.

Rules decided here, on the real cells:

* quantised methods replace a MindFormers `Linear` (no experts) by `CompressedLinear`;
* `lossless` applies to `w2` of a Llama MLP (its input is rebuilt from the factors the
  product's backward keeps); elsewhere no lossless transform saves memory, and the
  operator is left uncompressed with a warning naming the key and line;
* partial users: `w1` and `w3` read the same input, which is freed only if both keep a
  compressed copy; naming one compresses both, with a warning.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any

from .. import cells
from ..errors import ConfigIssue
from ..match import resolve
from ..plan import CompressUse

SHARED_INPUT = {"w1": ("w3",), "w3": ("w1",)}     # Llama MLP: both read ffn_norm's output
LOSSLESS_NOTE = ("no lossless transform saves memory for {path}: its input can be rebuilt exactly only where it is "
                 "the product of two tensors the backward keeps anyway, which is true of feed_forward.w2 of a Llama "
                 "MLP alone (see docs/compression.md); it is left uncompressed")


@dataclass(slots=True)
class CompressAction:
    layer: int
    path: str                      # relative to the layer: feed_forward.w2
    use: CompressUse
    obj: Any = field(repr=False)   # the Linear cell
    parent: Any = field(repr=False)
    name: str = ""
    partner_of: str | None = None  # set when added by the partial-user rule
    replacement: Any = field(default=None, repr=False)
    grandparent: tuple[Any, str] | None = field(default=None, repr=False)   # (cell holding parent, its name)

    def to_dict(self) -> dict:
        result = {"layer": self.layer, "path": self.path, "method": self.use.method, "rule": self.use.origin.key,
                  "line": self.use.origin.line, "replaced_by": cells.type_name(self.replacement)
                  if self.replacement is not None else None}
        if self.use.method != "lossless":
            result["group_size"] = self.use.group_size
        if self.use.offload is not None:
            result["offload"] = self.use.offload
        if self.partner_of:
            result["added_because_it_shares_its_input_with"] = self.partner_of
        return result


def compress_actions(uses: tuple[CompressUse, ...], index: int, layer: Any, file: str,
                     issues: list[ConfigIssue]) -> list[CompressAction]:
    actions: dict[int, CompressAction] = {}
    for use in uses:
        for path, parent, name, cell, grandparent in _targets(layer, index, use, file, issues):
            earlier = actions.get(id(cell))
            if earlier is not None and earlier.use.method != use.method:
                issues.append(_issue(file, use, f"in layer {index}, {path} is compressed by op_name "
                                     f"`{earlier.use.pattern}` ({earlier.use.method}) and by `{use.pattern}` "
                                     f"({use.method})", "give each cell one method"))
            if _supported(cell, parent, name, use, path, index, file, issues):
                actions.setdefault(id(cell), CompressAction(layer=index, path=path, use=use, obj=cell, parent=parent,
                                                            name=name, grandparent=grandparent))
    _add_partners(actions, index, file, issues)
    return sorted(actions.values(), key=lambda action: action.path)


def _targets(layer, index, use, file, issues):
    matches, miss = resolve(layer, use.pattern)
    if miss is not None:
        issues.append(_issue(file, use, f"pattern `{use.pattern}` matches nothing in layer {index}: "
                             f"{miss.describe()}", miss.hint()))
    for match in matches:
        if match.target != "cell":
            issues.append(_issue(file, use, f"pattern `{use.pattern}` names the operator {match.path} in layer "
                                 f"{index}; op_compress names Linear cells, whose saved input it compresses",
                                 "name the cell, e.g. 'feed_forward\\.w2'"))
            continue
        parent_path, _, name = match.path.rpartition(".")
        owner_path, _, parent_name = parent_path.rpartition(".")
        grandparent = (_cell_at(layer, owner_path), parent_name) if parent_path else None
        yield match.path, _cell_at(layer, parent_path), name, match.obj, grandparent


def _cell_at(layer: Any, path: str) -> Any:
    cell = layer
    for name in filter(None, path.split(".")):
        cell = dict(cells.children(cell))[name]
    return cell


def _supported(cell, parent, name, use, path, index, file, issues) -> bool:
    if use.method == "lossless":
        if name == "w2" and is_llama_mlp(parent) and parent is not cell:
            return True
        issues.append(_issue(file, use, f"in layer {index}, " + LOSSLESS_NOTE.format(path=path),
                             "use int8 (or int4, int2) for it, or remove it", severity="warning"))
        return False
    if is_plain_linear(cell):
        return True
    issues.append(_issue(file, use, f"in layer {index}, {path} is a {cells.type_name(cell)}; op_compress "
                         "compresses the input that a Linear cell (without experts) keeps for its weight gradient",
                         "name Linear cells such as feed_forward\\.w2 or attention\\.wo"))
    return False


def is_plain_linear(cell: Any) -> bool:
    return (cells.type_name(cell) == "Linear" and not getattr(cell, "expert_flag", True)
            and not getattr(cell, "use_gmm", True) and getattr(cell, "transpose_b", False))


def is_llama_mlp(cell: Any) -> bool:
    names = {name for name, _ in cells.children(cell)}
    return ({"w1", "w2", "w3"} <= names and not getattr(cell, "ffn_concat", True)
            and not getattr(cell, "use_fused_swiglu", True) and cells.type_name(cell).endswith("FeedForward"))


def _add_partners(actions: dict[int, CompressAction], index: int, file: str, issues: list[ConfigIssue]) -> None:
    for action in list(actions.values()):
        if action.use.method == "lossless" or not is_llama_mlp(action.parent):
            continue
        siblings = dict(cells.children(action.parent))
        for partner in SHARED_INPUT.get(action.name, ()):
            cell = siblings.get(partner)
            if cell is None or id(cell) in actions or not is_plain_linear(cell):
                continue
            parent_path = action.path.rpartition(".")[0]
            path = f"{parent_path}.{partner}" if parent_path else partner
            issues.append(_issue(file, action.use, f"in layer {index}, {action.path} shares its input with {path}; "
                                 "the input is freed only if every backward reader keeps a compressed copy, so "
                                 f"{path} is compressed too ({action.use.method})",
                                 f"name both, e.g. '{_pair_pattern(action.name, partner)}', to silence this",
                                 severity="warning"))
            actions[id(cell)] = CompressAction(layer=index, path=path, use=action.use, obj=cell, parent=action.parent,
                                               name=partner, partner_of=action.path)


def _pair_pattern(name: str, partner: str) -> str:
    first, second = sorted((name, partner))
    return f"feed_forward\\.({first}|{second})"


def _issue(file: str, use: CompressUse, message: str, hint: str | None, severity: str = "error") -> ConfigIssue:
    return ConfigIssue(file=file, line=use.origin.line, path=use.origin.key, message=message, hint=hint,
                       severity=severity)


def install(actions: list[CompressAction]) -> None:
    """Replace the cells (quantised Linears first: the lossless MLP adopts its w1 and w3 as they are then)."""
    from .cells import CompressedLinear, LosslessFeedForward
    from .codec import GroupCodec

    for action in actions:
        if action.use.method == "lossless":
            continue
        bits = int(action.use.method[3:])
        codec = GroupCodec(bits, action.use.group_size, seed=_seed(action))
        action.replacement = CompressedLinear(action.obj, codec, action.use.method)
        action.parent.insert_child_to_cell(action.name, action.replacement)
    for action in actions:
        if action.use.method == "lossless":
            owner, name = action.grandparent
            action.replacement = LosslessFeedForward(action.parent)
            owner.insert_child_to_cell(name, action.replacement)
    for action in actions:
        if action.use.offload is not None:
            for _, prim, _ in cells.walk_primitives(action.replacement):
                cells.offload_primitive(prim, action.use.offload)


def _seed(action: CompressAction) -> int:
    # A fixed stream per layer and cell: runs are reproducible, and no two cells share noise.
    return zlib.crc32(f"{action.layer}:{action.path}".encode()) % (2 ** 30)


def compress_line(layer: int, actions: list[CompressAction]) -> str | None:
    """`Set op_compress at layer 1: feed_forward.w2, method=int2`, every cell of the layer on one line."""
    if not actions:
        return None
    items = []
    for action in actions:
        item = f"{action.path}, method={action.use.method}"
        if action.use.offload is not None:
            item += f", offload={action.use.offload}"
        items.append(item)
    return f"Set op_compress at layer {layer}: {', '.join(items)}"
