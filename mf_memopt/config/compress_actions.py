"""From one layer's compression plan and its cells to the replacements to install (nothing is replaced here).

`compress_actions` resolves every pattern and checks every target first (errors and warnings
go to `issues`), on the built layer (then `apply` installs the replacements) or on the family's
recorded layer (`validate`).

Rules decided here, on the real cells, with the model family's compression targets
(`compress.family`):

* quantised methods replace the cells the family can quantise by its compressed cells;
* `lossless` applies where the family can rebuild the input exactly; elsewhere no lossless
  transform saves memory, and the operator is left uncompressed with a warning naming the
  key and line;
* partial users: cells that read the same input free it only if all keep a compressed copy;
  naming one compresses all, with a warning.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..compress.family import Compression
from ..document import tree as cells
from ..document.errors import ConfigIssue
from .match import Where, cells_only, matches_or_issue
from .plan import CompressUse


@dataclass(slots=True)
class CompressAction:
    layer: int
    path: str                      # relative to the layer
    use: CompressUse
    obj: Any = field(repr=False)   # the Linear cell
    parent: Any = field(repr=False)
    name: str = ""
    partner_of: str | None = None  # set when added by the partial-user rule
    replacement: Any = field(default=None, repr=False)
    gate_rebuilt: bool = False     # the MLP around it keeps only what its backward cannot rebuild (`apply.compress`)
    grandparent: tuple[Any, str] | None = field(default=None, repr=False)   # (cell holding parent, its name)
    codec: str | None = None       # "fused" or "reference": the codec a quantised cell runs (`compress.choice`)

    def to_dict(self) -> dict:
        result = {"layer": self.layer, "path": self.path, "method": self.use.method, "rule": self.use.origin.key,
                  "line": self.use.origin.line, "replaced_by": cells.type_name(self.replacement)
                  if self.replacement is not None else None}
        if self.use.method != "lossless":
            result["group_size"] = self.use.group_size
        if self.codec is not None:
            result["codec"] = self.codec
        if self.use.offload is not None:
            result["offload"] = self.use.offload
        if self.partner_of:
            result["added_because_it_shares_its_input_with"] = self.partner_of
        if self.gate_rebuilt:
            result["gate_rebuilt"] = True
        return result


def compress_actions(uses: tuple[CompressUse, ...], index: int, layer: Any, compression: Compression, file: str,
                     issues: list[ConfigIssue]) -> list[CompressAction]:
    actions: dict[int, CompressAction] = {}
    for use in uses:
        for path, parent, name, cell, grandparent in _targets(layer, index, use, compression, file, issues):
            earlier = actions.get(id(cell))
            if earlier is not None and earlier.use.method != use.method:
                issues.append(_issue(file, use, f"in layer {index}, {path} is compressed by op_name "
                                     f"`{earlier.use.pattern}` ({earlier.use.method}) and by `{use.pattern}` "
                                     f"({use.method})", "give each cell one method"))
            if _supported(compression, cell, parent, use, path, index, file, issues):
                actions.setdefault(id(cell), CompressAction(layer=index, path=path, use=use, obj=cell, parent=parent,
                                                            name=name, grandparent=grandparent))
    _add_partners(compression, actions, index, file, issues)
    return sorted(actions.values(), key=lambda action: action.path)


def _targets(layer, index, use, compression: Compression, file, issues):
    where = Where(file, use.origin)
    matches = matches_or_issue(layer, index, use.pattern, where, issues)
    for match in cells_only(matches, index, use.pattern, compression.example, where, issues):
        parent_path, _, name = match.path.rpartition(".")
        owner_path, _, parent_name = parent_path.rpartition(".")
        grandparent = (_cell_at(layer, owner_path), parent_name) if parent_path else None
        yield match.path, _cell_at(layer, parent_path), name, match.obj, grandparent


def _cell_at(layer: Any, path: str) -> Any:
    cell = layer
    for name in filter(None, path.split(".")):
        cell = dict(cells.children(cell))[name]
    return cell


def _supported(compression: Compression, cell, parent, use, path, index, file, issues) -> bool:
    if use.method == "lossless":
        if compression.lossless_ok(path, cell, parent):
            return True
        issues.append(_issue(file, use, f"in layer {index}, " + compression.lossless_note.format(path=path),
                             "use int8 (or int4, int2) for it, or remove it", severity="warning"))
        return False
    if compression.quantisable(cell):
        return True
    issues.append(_issue(file, use, f"in layer {index}, {path} is a {cells.type_name(cell)}; op_compress "
                         "compresses the input that a linear cell (without experts) keeps for its weight gradient",
                         compression.cells_hint))
    return False


def _add_partners(compression: Compression, actions: dict[int, CompressAction], index: int, file: str,
                  issues: list[ConfigIssue]) -> None:
    for action in list(actions.values()):
        if action.use.method == "lossless":
            continue
        siblings = dict(cells.children(action.parent))
        for partner in compression.partners(action.path, action.parent):
            cell = siblings.get(partner)
            if cell is None or id(cell) in actions or not compression.quantisable(cell):
                continue
            parent_path = action.path.rpartition(".")[0]
            path = f"{parent_path}.{partner}" if parent_path else partner
            issues.append(_issue(file, action.use, f"in layer {index}, {action.path} shares its input with {path}; "
                                 "the input is freed only if every backward reader keeps a compressed copy, so "
                                 f"{path} is compressed too ({action.use.method})",
                                 f"name them all, e.g. '{compression.pair_pattern(action.name, partner)}', to silence "
                                 "this", severity="warning"))
            actions[id(cell)] = CompressAction(layer=index, path=path, use=action.use, obj=cell, parent=action.parent,
                                               name=partner, partner_of=action.path)


def _issue(file: str, use: CompressUse, message: str, hint: str | None, severity: str = "error") -> ConfigIssue:
    return ConfigIssue(file=file, line=use.origin.line, path=use.origin.key, message=message, hint=hint,
                       severity=severity)
