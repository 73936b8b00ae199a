"""What the legacy Llama can compress (no MindSpore here; the cells are in `compress_cells.py`).

* quantised methods replace a MindFormers `Linear` (no experts) by `CompressedLinear`;
* `lossless` applies to `w2` of a Llama MLP: its input `SiLU(w1) * w3` is rebuilt from the two
  factors, which the product's own backward keeps anyway; elsewhere no lossless transform saves
  memory;
* `w1` and `w3` read the same input (ffn_norm's output), which is freed only if both keep a
  compressed copy; so do `wq`, `wk` and `wv` (attention_norm's output). `wo` reads the attention's
  output (without flash attention: FlashAttention's own backward reads its output too).
"""

from __future__ import annotations

from typing import Any

from ...compress.family import Compression, Target
from ...document.tree import children, primitives, type_name
from ...estimate.inventory import ATTENTION_INPUT, ATTENTION_OUTPUT, MLP_DOWN_INPUT, MLP_GATE, MLP_GATE_EARLY, MLP_INPUT

_MLP = "feed_forward"
RECORDED_ATTRIBUTES = ("expert_flag", "use_gmm", "transpose_b", "ffn_concat", "use_fused_swiglu")  # read above
_SHARED_INPUT = {"w1": ("w3",), "w3": ("w1",)}
_ATTENTION = "attention"
_SHARED_ATTENTION_INPUT = {"wq": ("wk", "wv"), "wk": ("wq", "wv"), "wv": ("wq", "wk")}


def is_plain_linear(cell: Any) -> bool:
    return (type_name(cell) == "Linear" and not getattr(cell, "expert_flag", True)
            and not getattr(cell, "use_gmm", True) and getattr(cell, "transpose_b", False))


def is_llama_mlp(cell: Any) -> bool:
    return ({"w1", "w2", "w3"} <= dict(children(cell)).keys() and not getattr(cell, "ffn_concat", True)
            and not getattr(cell, "use_fused_swiglu", True) and type_name(cell).endswith("FeedForward"))


def gates_with_silu(mlp: Any) -> bool:
    """A Llama MLP whose w1 applies MindFormers' SiLU primitive (`LlamaSiLU`) inside the Linear: the gate the
    rebuilds apply themselves. Read through the cell tree, so a recorded layer answers as the built one does."""
    w1 = dict(children(mlp)).get("w1")
    activation = dict(children(w1)).get("activation") if w1 is not None else None
    if activation is None or type_name(activation) != "LlamaSiLU" or not getattr(w1, "activation_flag", True):
        return False
    return (type_name(dict(primitives(activation)).get("silu")) == "SiLU"
            and not getattr(activation, "self_define", False))


def is_llama_attention(cell: Any) -> bool:
    return {"wq", "wk", "wv"} <= dict(children(cell)).keys() and type_name(cell).endswith("Attention")


class LlamaCompression(Compression):
    targets = (
        Target(cell="feed_forward.w2", frees=MLP_DOWN_INPUT, input_width="ffn", output_width="hidden", lossless=True,
               also_frees=(MLP_GATE, MLP_GATE_EARLY)),
        Target(cell="feed_forward.w1", frees=MLP_INPUT, input_width="hidden", output_width="ffn",
               shares_input_with=("feed_forward.w3",)),
        Target(cell="feed_forward.w3", frees=MLP_INPUT, input_width="hidden", output_width="ffn",
               shares_input_with=("feed_forward.w1",)),
        Target(cell="attention.wq", frees=ATTENTION_INPUT, input_width="hidden", output_width="queries",
               shares_input_with=("attention.wk", "attention.wv")),
        Target(cell="attention.wk", frees=ATTENTION_INPUT, input_width="hidden", output_width="key or value",
               shares_input_with=("attention.wq", "attention.wv")),
        Target(cell="attention.wv", frees=ATTENTION_INPUT, input_width="hidden", output_width="key or value",
               shares_input_with=("attention.wq", "attention.wk")),
        Target(cell="attention.w_qkv", frees=ATTENTION_INPUT, input_width="hidden",
               output_width="query, key and value"),
        Target(cell="attention.wo", frees=ATTENTION_OUTPUT, input_width="queries", output_width="hidden"),
    )
    example = "feed_forward\\.w2"
    cells_hint = "name Linear cells such as feed_forward\\.w2 or attention\\.wo"
    lossless_note = ("no lossless transform saves memory for {path}: its input can be rebuilt exactly only where it "
                     "is the product of two tensors the backward keeps anyway, which is true of feed_forward.w2 of a "
                     "Llama MLP alone (see docs/compression.md); it is left uncompressed")
    scopes = {"CompressedLinear": "{path}.compressed_matmul", "LosslessFeedForward": "{parent}.w2_lossless"}
    gate_cell = "feed_forward.w1.activation"

    def quantisable(self, cell: Any) -> bool:
        return is_plain_linear(cell)

    def lossless_ok(self, path: str, cell: Any, parent: Any) -> bool:
        return parent is not cell and self.rebuilds_gate(path, parent)   # the lossless MLP rebuilds the gate too

    def rebuilds_gate(self, path: str, parent: Any) -> bool:
        return path.rpartition(".")[2] == "w2" and is_llama_mlp(parent) and gates_with_silu(parent)

    def gate_rebuild(self, path: str, parent: Any, grandparent: tuple[Any, str] | None) -> tuple[Any, str, Any] | None:
        if grandparent is None or not self.rebuilds_gate(path, parent):
            return None
        from .compress_cells import GatedFeedForward

        owner, name = grandparent
        return owner, name, GatedFeedForward(parent)

    def partners(self, path: str, parent: Any) -> tuple[str, ...]:
        name = path.rpartition(".")[2]
        if is_llama_mlp(parent):
            return _SHARED_INPUT.get(name, ())
        if is_llama_attention(parent):
            return _SHARED_ATTENTION_INPUT.get(name, ())
        return ()

    def pair_pattern(self, name: str, partner: str) -> str:
        if name in _SHARED_ATTENTION_INPUT:
            return f"{_ATTENTION}\\.({'|'.join(sorted((name, *_SHARED_ATTENTION_INPUT[name])))})"
        first, second = sorted((name, partner))
        return f"{_MLP}\\.({first}|{second})"

    def quantised_cell(self, cell: Any, codec: Any, method: str) -> Any:
        from .compress_cells import CompressedLinear

        return CompressedLinear(cell, codec, method)

    def lossless_cell(self, parent: Any) -> Any:
        from .compress_cells import LosslessFeedForward

        return LosslessFeedForward(parent)


COMPRESSION = LlamaCompression()
