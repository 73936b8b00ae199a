"""MindFormers' legacy Llama (`LlamaConfig` / `LlamaForCausalLM`), and the legacy models that share its keys.

Its layer is `model.layers.N` (`LLamaDecodeLayer`): `attention_norm`, `attention` (wq, wk, wv, wo,
and `flash_attention` with use_flash_attention), `ffn_norm`, `feed_forward` (w1, w3, w2, `mul`,
and the SiLU at `w1.activation.silu`).
"""

from __future__ import annotations

import re

from ...family import AutoCells, Defaults, FamilyParts, ModelFamily, ModelKeys, Part
from .checks import DEFAULT_COMM, DEFAULT_SWAP

_MODEL = ("model", "model_config")

LLAMA = ModelFamily(
    name="llama",
    schema="model_llama",
    keys=ModelKeys(num_layers=(*_MODEL, "num_layers"), interleave=(*_MODEL, "pp_interleave_num"),
                   offset=(*_MODEL, "offset"), seq_length=(*_MODEL, "seq_length"),
                   vocab_size=(*_MODEL, "vocab_size"), hidden_size=(*_MODEL, "hidden_size"),
                   extra_layers=(*_MODEL, "mtp_depth")),
    defaults=Defaults(select=(r"feed_forward\.mul", r"feed_forward\.w1\.activation\.silu"), comm=(DEFAULT_COMM,),
                      swap=DEFAULT_SWAP, compress_dense=r"feed_forward\.w2"),
    auto_cells=AutoCells(select=("feed_forward", "attention"), swap=("attention", "feed_forward"),
                         attention_prefix="attention.",
                         compress=(("feed_forward", r"feed_forward\.(w1|w2|w3)"),),
                         lossless=("feed_forward", r"feed_forward\.w2")),
    ir_layer_scope=re.compile(r"layers-CellList/(\d+)-[^/]+/?(.*)$"),
    # A recomputed cell's output is kept, not recomputed: the matmuls that produce the attention and
    # MLP outputs run again only under full recompute of the layer.
    cell_outputs=frozenset({"attention.wo.matmul", "feed_forward.w2.matmul"}),
    parts=FamilyParts(rules=Part("mf_memopt.models.llama.checks", "RULES"),
                      backend=Part("mf_memopt.models.llama.parts", "BACKEND"),
                      estimator=Part("mf_memopt.models.llama.parts", "ESTIMATOR"),
                      compression=Part("mf_memopt.models.llama.compression", "COMPRESSION")),
)
