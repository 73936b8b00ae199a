"""What a family can compress: its compressible cells, what each one's weight gradient reads, and how.

`op_compress` replaces a Linear-like cell by one whose backward reads only a compressed copy of
its input. A family names those cells by their path in a decoder layer (`Target`); the
estimator matches each target's freed tensor by its role in the layer's inventory, and
`apply` asks the family for the replacement cells. A family fills the contract in by subclassing `Compression` in
its own package (its `compression` part); every stage reaches it through `compression_of(family)`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ..family import ModelFamily


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """A compressible cell of a decoder layer."""

    cell: str                       # path relative to the layer
    frees: str                      # role of the saved tensor its weight gradient reads (`estimate.inventory`)
    input_width: str                # "hidden", "ffn" or "queries" (heads x head_dim): the width of its input
    output_width: str               # also "key or value" (kv_heads x head_dim), "gate and up" (2 x ffn) or
                                    # "query, key and value" (fused projections)
    lossless: bool = False          # its input can be rebuilt exactly from tensors the backward keeps anyway
    shares_input_with: tuple[str, ...] = ()   # cells reading the same tensor: it is freed only if all compress it
    also_frees: tuple[str, ...] = ()   # roles of tensors the family's rebuild around this cell keeps no more (any
                                       # method): they are rebuilt in the backward instead


@runtime_checkable
class Compression(Protocol):
    """A family's compression targets and replacement cells (a family's `compression` part); a family subclasses it
    for the defaults."""

    targets: tuple[Target, ...] = ()
    example: str = ""               # a pattern naming a compressible cell, for hints
    cells_hint: str = ""            # which cells op_compress names in this family
    lossless_note: str = ""         # why lossless does not apply to {path}
    scopes: dict[str, str] = {}     # replacement class name -> its custom-bprop cell's path ({path}, {parent})
    gate_cell: str = ""             # the activation a gate rebuild bypasses: left alone when the plan recomputes it

    def target(self, path: str) -> Target | None:
        return next((target for target in self.targets if target.cell == path), None)

    def quantisable(self, cell: Any) -> bool:
        """Whether a quantised replacement exists for this cell."""
        raise NotImplementedError

    def lossless_ok(self, path: str, cell: Any, parent: Any) -> bool:
        """Whether the lossless rebuild applies to this cell, the child of `parent`."""
        raise NotImplementedError

    def partners(self, path: str, parent: Any) -> tuple[str, ...]:
        """Sibling cell names that read the same input as the cell at `path`, when `parent` is the family's MLP."""
        raise NotImplementedError

    def pair_pattern(self, name: str, partner: str) -> str:
        """A pattern naming both cells, for the hint that silences the partner warning."""
        raise NotImplementedError

    def quantised_cell(self, cell: Any, codec: Any, method: str) -> Any:
        raise NotImplementedError

    def lossless_cell(self, parent: Any) -> Any:
        raise NotImplementedError

    def rebuilds_gate(self, path: str, parent: Any) -> bool:
        """Whether compressing the cell at `path`, a child of `parent`, makes the family rebuild the MLP's gate."""
        return False

    def gate_rebuild(self, path: str, parent: Any, grandparent: tuple[Any, str] | None) -> tuple[Any, str, Any] | None:
        """Where to insert which cell so that the MLP around the compressed down projection at `path` (a child of
        `parent`) keeps only what its backward cannot rebuild exactly: (owner, child name, new cell), or None when
        the family has no such rebuild, or not for this cell. Building the cell commits to it."""
        return None


def compression_of(family: ModelFamily) -> Compression:
    """The family's compression targets and replacement cells."""
    compression: Compression = family.part("compression", Compression)
    return compression
