"""What an mcore layer can compress (no MindSpore here; the cells are in `compress_cells.py`).

* quantised methods replace an mcore `ColumnParallelLinear` or `RowParallelLinear` (its weight
  stored as (out, in), not skipped) by `CompressedParallelLinear`, which computes its matmul outside
  the `Morph` MindFormers wraps it in and keeps its input compressed for the backward;
* the MLP's `linear_fc1` reads the normalised input (gate and up are one fused matmul, so no sibling
  shares its input) and `linear_fc2` reads SwiGlu's product; the attention's `linear_qkv` reads the
  first norm's output and `linear_proj` the attention's output: compressing one frees that tensor;
* compressing `linear_fc2` also replaces the MLP's `SwiGlu` by `GatedSwiGlu`, which keeps only the gate
  and up halves (SiLU's output and its gradient's early sigmoid are rebuilt in the backward);
* `lossless` does not apply: the legacy rebuild replaces a Llama MLP with separate w1 and w3, and an
  mcore MLP computes its product inside SwiGlu.
"""

from __future__ import annotations

from typing import Any

from ...compress.family import Compression, Target
from ...document.tree import children, primitives, type_name
from ...estimate.inventory import ATTENTION_INPUT, ATTENTION_OUTPUT, MLP_DOWN_INPUT, MLP_GATE, MLP_GATE_EARLY, MLP_INPUT

RECORDED_ATTRIBUTES = ("transpose_b", "skip_weight_param_allocation")   # read by is_parallel_linear (a
# RowParallelLinear has no skip_weight_param_allocation: it always owns its weight)
_LINEARS = ("ColumnParallelLinear", "RowParallelLinear")


def is_parallel_linear(cell: Any) -> bool:
    return (type_name(cell) in _LINEARS and getattr(cell, "transpose_b", False)
            and not getattr(cell, "skip_weight_param_allocation", False))


class McoreCompression(Compression):
    targets = (
        Target(cell="mlp.linear_fc2", frees=MLP_DOWN_INPUT, input_width="ffn", output_width="hidden",
               also_frees=(MLP_GATE, MLP_GATE_EARLY)),
        Target(cell="mlp.linear_fc1", frees=MLP_INPUT, input_width="hidden", output_width="gate and up"),
        Target(cell="self_attention.linear_qkv", frees=ATTENTION_INPUT, input_width="hidden",
               output_width="query, key and value"),
        Target(cell="self_attention.linear_proj", frees=ATTENTION_OUTPUT, input_width="queries",
               output_width="hidden"),
    )
    example = "mlp\\.linear_fc2"
    cells_hint = "name mcore linears such as mlp\\.linear_fc2, mlp\\.linear_fc1 or self_attention\\.linear_proj"
    lossless_note = ("no lossless transform saves memory for {path}: the rebuild replaces a legacy Llama MLP with "
                     "separate w1 and w3, and an mcore MLP computes its product inside SwiGlu (see "
                     "docs/compression.md); it is left uncompressed")
    scopes = {"CompressedParallelLinear": "{path}.compressed_matmul"}
    gate_cell = "mlp.activation_func"

    def quantisable(self, cell: Any) -> bool:
        return is_parallel_linear(cell)

    def lossless_ok(self, path: str, cell: Any, parent: Any) -> bool:
        return False

    def partners(self, path: str, parent: Any) -> tuple[str, ...]:
        return ()

    def rebuilds_gate(self, path: str, parent: Any) -> bool:
        if path != "mlp.linear_fc2":
            return False
        activation = dict(children(parent)).get("activation_func")
        prims = dict(primitives(activation)) if activation is not None else {}
        return (type_name(activation) == "SwiGlu" and type_name(prims.get("silu")) == "SiLU"
                and {"split", "mul"} <= set(prims))

    def gate_rebuild(self, path: str, parent: Any, grandparent: tuple[Any, str] | None) -> tuple[Any, str, Any] | None:
        if not self.rebuilds_gate(path, parent):
            return None
        from .compress_cells import GatedSwiGlu

        return parent, "activation_func", GatedSwiGlu(dict(children(parent))["activation_func"])

    def pair_pattern(self, name: str, partner: str) -> str:
        return f"mlp\\.({name}|{partner})"

    def quantised_cell(self, cell: Any, codec: Any, method: str) -> Any:
        from .compress_cells import CompressedParallelLinear

        return CompressedParallelLinear(cell, codec, method)


COMPRESSION = McoreCompression()
