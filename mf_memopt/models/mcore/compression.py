"""What an mcore layer can compress.

The quantised and lossless cells of `op_compress` / `compress_dense` replace the legacy Llama's
`Linear` and MLP; the mcore linears (`ColumnParallelLinear`, `RowParallelLinear`, computing inside a
`Morph`) have no replacement cell yet, so every pattern that names one is refused at validation
with this family's hint, and nothing is half-applied.
"""

from __future__ import annotations

from typing import Any

from ..compression import Compression


class McoreCompression(Compression):
    targets = ()
    example = "mlp\\.linear_fc2"
    cells_hint = ("mcore linears (mlp.linear_fc1, mlp.linear_fc2, ...) have no compressed replacement yet; "
                  "remove compress_config for this model")
    lossless_note = ("the lossless rebuild replaces a legacy Llama MLP; {path} is an mcore cell, which it does not "
                     "replace; it is left uncompressed")

    def quantisable(self, cell: Any) -> bool:
        return False

    def lossless_ok(self, path: str, cell: Any, parent: Any) -> bool:
        return False

    def partners(self, path: str, parent: Any) -> tuple[str, ...]:
        return ()

    def pair_pattern(self, name: str, partner: str) -> str:
        return f"mlp\\.({name}|{partner})"


COMPRESSION = McoreCompression()
