"""MindFormers 1.9's own ("mcore") dense models: Qwen3 and TeleChat3 (`use_legacy: False`).

A decoder layer is `model.decoder.layers.N` (`TransformerLayer`): `input_layernorm`,
`self_attention` (`linear_qkv` with q, k and v fused, `q_layernorm` and `k_layernorm` in Qwen3,
`apply_rotary_pos_emb`, `core_attention` holding the `flash_attention` primitive, `linear_proj`),
`pre_mlp_layernorm` and `mlp` (`linear_fc1` with gate and up fused, `activation_func` (SwiGlu:
`silu` and `mul`) and `linear_fc2`). Keys are Hugging Face style (`keys.py`). The MoE models of
the same generation (Qwen3-MoE, DeepSeek-V3, TeleChat3-MoE) share the keys and the layout; their
MLP is not modelled here, and the estimate says so.
"""

from __future__ import annotations

import re

from ...family import Defaults, FamilyParts, ModelFamily, ModelKeys, Part
from .checks import AUTO_CELLS, DEFAULT_COMM, DEFAULT_SELECT, DEFAULT_SWAP
from .keys import MODEL

MCORE = ModelFamily(
    name="mcore",
    schema="model_mcore",
    # MindFormers turns vocab_emb_dp off for every mcore model (parallel_core/transformer_config.py,
    # TransformerConfig.__post_init__: "vocab_emb_dp is not supported in MCore"): the embedding and the output
    # head are split by model_parallel
    vocab_emb_dp=False,
    keys=ModelKeys(num_layers=(*MODEL, "num_hidden_layers"), interleave=(*MODEL, "pp_interleave_num"),
                   offset=(*MODEL, "offset"), seq_length=(*MODEL, "seq_length"),
                   vocab_size=(*MODEL, "vocab_size"), hidden_size=(*MODEL, "hidden_size")),
    defaults=Defaults(select=DEFAULT_SELECT, comm=(DEFAULT_COMM,), swap=DEFAULT_SWAP,
                      compress_dense=r"mlp\.linear_fc2"),
    auto_cells=AUTO_CELLS,
    # the decoder's layers; an MTP block's layers are `mtp-.../layers-CellList/N-...`, checked as followers
    ir_layer_scope=re.compile(r"decoder-[^/]+/layers-CellList/(\d+)-[^/]+/?(.*)$"),
    ir_follower_scope=re.compile(r"mtp-[^/]+/layers-CellList/(\d+)-[^/]+/?(.*)$"),
    cell_outputs=frozenset({"self_attention.linear_proj.matmul", "mlp.linear_fc2.matmul"}),
    primitive_recompute=True,       # `mlp.activation_func.silu` alone frees the SiLU output (mcore sweep traces)
    dataset_columns=("input_ids", "labels"),    # the model does not shift: labels[t] is the token after t
    parts=FamilyParts(rules=Part("mf_memopt.models.mcore.checks", "RULES"),
                      backend=Part("mf_memopt.models.mcore.parts", "BACKEND"),
                      estimator=Part("mf_memopt.models.mcore.parts", "ESTIMATOR"),
                      compression=Part("mf_memopt.models.mcore.compression", "COMPRESSION")),
)
