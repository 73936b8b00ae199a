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
from dataclasses import replace
from typing import TYPE_CHECKING

from ...config.errors import ConfigIssue
from ...config.source import Source
from ..family import AutoCells, Defaults, ModelFamily, ModelKeys

if TYPE_CHECKING:
    from ...config.plan import Plan
from .keys import MODEL, architecture, mcore_view, model_value

# MindFormers' own default patterns for mcore models (parallel_core/training_graph/transformer/utils.py)
DEFAULT_SELECT = (r"mlp\.shared_experts\.mul", r"mlp\.shared_experts\.activation_func\.silu", r"mlp\.mul",
                  r"mlp\.activation_func\.silu")
DEFAULT_COMM = r".*\.norm"
# MindFormers' default swap pattern is `.*\.flash_attention`, which names nothing in an mcore layer (the primitive
# is one level deeper). mf_memopt's default strategy swaps what it means: the flash attention's output.
DEFAULT_SWAP = r"self_attention\.core_attention\.flash_attention"
_MOE_HINT = ("an MoE layer's mlp is MindFormers' MoELayer (router, experts): name mlp.experts, mlp.router or mlp "
             "(the experts' activation is mlp.experts.swiglu)")
_PATTERN_HINTS = {
    r"mlp\.mul": "MindFormers' default pattern mlp\\.mul names MLPInterleaved's `mul`, which a SwiGlu MLP never "
                 "runs (SwiGlu multiplies in its own mlp.activation_func.mul); " + _MOE_HINT,
    r"mlp\.activation_func\.silu": "the default pattern names a dense MLP's SiLU; " + _MOE_HINT,
    r"mlp\.shared_experts\.mul": "the default shared-experts patterns name cells only MoE models with shared "
                                 "experts have",
    r"mlp\.shared_experts\.activation_func\.silu": "the default shared-experts patterns name cells only MoE models "
                                                   "with shared experts have",
    DEFAULT_COMM: "the default comm pattern names a `norm` operator: an mcore layer's FusedRMSNorm cells hold one "
                  "(input_layernorm.norm, ...)",
}


# an MoE layer: the experts alone (their activations are most of the block's), the whole block, the attention
_MOE_AUTO_CELLS = AutoCells(select=("mlp", "self_attention", r"mlp\.experts"), swap=("self_attention", "mlp"),
                            attention_prefix="self_attention.")


class McoreFamily(ModelFamily):
    name = "mcore"
    schema = "model_mcore"
    # MindFormers turns vocab_emb_dp off for every mcore model (parallel_core/transformer_config.py,
    # TransformerConfig.__post_init__: "vocab_emb_dp is not supported in MCore"): the embedding and the output
    # head are split by model_parallel
    vocab_emb_dp = False
    keys = ModelKeys(num_layers=(*MODEL, "num_hidden_layers"), interleave=(*MODEL, "pp_interleave_num"),
                     offset=(*MODEL, "offset"), seq_length=(*MODEL, "seq_length"),
                     vocab_size=(*MODEL, "vocab_size"), hidden_size=(*MODEL, "hidden_size"))
    defaults = Defaults(select=DEFAULT_SELECT, comm=(DEFAULT_COMM,), swap=DEFAULT_SWAP,
                        compress_dense=r"mlp\.linear_fc2")
    auto_cells = AutoCells(select=("mlp", "self_attention"), swap=("self_attention", "mlp"),
                           attention_prefix="self_attention.")
    # the decoder's layers; an MTP block's layers are `mtp-.../layers-CellList/N-...`, checked as followers
    ir_layer_scope = re.compile(r"decoder-[^/]+/layers-CellList/(\d+)-[^/]+/?(.*)$")
    ir_follower_scope = re.compile(r"mtp-[^/]+/layers-CellList/(\d+)-[^/]+/?(.*)$")
    cell_outputs = frozenset({"self_attention.linear_proj.matmul", "mlp.linear_fc2.matmul"})
    primitive_recompute = True       # `mlp.activation_func.silu` alone frees the SiLU output (mcore sweep traces)
    cpu_measured_on = {"mindspore": "2.9.0", "mindformers": "1.9.0"}
    dataset_columns = ("input_ids", "labels")    # the model does not shift: labels[t] is the token after t

    def view(self, source: Source) -> tuple[Source, list[ConfigIssue]]:
        return mcore_view(source)

    def auto_cells_for(self, source: Source) -> AutoCells:
        """An MoE model's cells: the MoE block, the attention, the experts, and the shared experts where it has
        them. Not offered: the router (recomputing it saves nothing: its input is kept for the experts, measured
        on the tiny Qwen3-MoE) and the projections of a multi-latent attention (their outputs are not kept for
        the backward, so recomputing one saves nothing; the attention cell as a whole is offered)."""
        view = mcore_view(source)[0]
        arch, _ = architecture(view)
        if arch is None or not arch.moe:
            return self.auto_cells
        if (model_value(view, "n_shared_experts") or 0) > 0:
            return replace(_MOE_AUTO_CELLS, select=(*_MOE_AUTO_CELLS.select, r"mlp\.shared_experts"))
        return _MOE_AUTO_CELLS

    def model_issues(self, source: Source) -> list[ConfigIssue]:
        from .checks import model_issues

        return model_issues(source)

    def model_notes(self, source: Source, plan: Plan) -> list[ConfigIssue]:
        from .checks import model_notes

        return model_notes(source, plan)

    def swap_scope_issues(self, source: Source) -> list[ConfigIssue]:
        from .checks import swap_scope_issues

        return swap_scope_issues(source)

    def cpu_spec_issues(self, source: Source, model) -> list[ConfigIssue]:
        from .spec import cpu_spec_issues

        return cpu_spec_issues(source, model)

    def follower_layers(self, network) -> list:
        """The multi-token-prediction layers (`model.mtp.layers`): MindFormers' `LayerSetting` gives each the last
        decoder layer's id, so its stage, recompute and swap are that layer's, with patterns matched from the MTP
        layer's own children (`enorm`, `hnorm`, `eh_proj`, `transformer_layer`, `final_layernorm`)."""
        model = getattr(network, "model", None)
        mtp = getattr(model, "mtp", None) if model is not None else None
        layers = getattr(mtp, "layers", None) if mtp is not None else None
        return [layer for _, layer in layers._cells.items() if layer is not None] if layers is not None else []

    def unshare(self, layers: list) -> list[str]:
        from .backend import unshare_primitives

        return unshare_primitives(layers)

    def pattern_hint(self, pattern: str) -> str | None:
        return _PATTERN_HINTS.get(pattern)

    def default_note(self, pattern: str) -> str | None:
        if pattern == r"mlp\.mul":
            return ("names MLPInterleaved's `mul`, which a SwiGlu MLP never runs (SwiGlu multiplies in "
                    "mlp.activation_func.mul): it recomputes nothing")
        return None


MCORE = McoreFamily()
