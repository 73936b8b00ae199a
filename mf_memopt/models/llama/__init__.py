"""MindFormers' legacy Llama (`LlamaConfig` / `LlamaForCausalLM`), and the legacy models that share its keys.

Its layer is `model.layers.N` (`LLamaDecodeLayer`): `attention_norm`, `attention` (wq, wk, wv, wo,
and `flash_attention` with use_flash_attention), `ffn_norm`, `feed_forward` (w1, w3, w2, `mul`,
and the SiLU at `w1.activation.silu`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ...config.errors import ConfigIssue
from ...config.source import Source
from ..family import AutoCells, Defaults, ModelFamily, ModelKeys

if TYPE_CHECKING:
    from ...config.plan import Plan
from . import checks

_MODEL = ("model", "model_config")
_DEFAULT_SWAP = r".*\.flash_attention"
_DEFAULT_COMM = r".*\.norm"
# Hints for the patterns mf_memopt applies by default, when the model does not have their target.
_PATTERN_HINTS = {
    _DEFAULT_SWAP: "the default swap strategy swaps attention.flash_attention, which exists only with "
                   "model.model_config.use_flash_attention: True; or list what to swap in op_swap",
    _DEFAULT_COMM: "the default comm pattern names RmsNorm's fused `norm` operator, which exists only with "
                   "model.model_config.fused_rms_norm: True (not on CPU); name the operators instead, "
                   "e.g. 'attention_norm\\.mul2'",
}


class LlamaFamily(ModelFamily):
    name = "llama"
    schema = "model_llama"
    keys = ModelKeys(num_layers=(*_MODEL, "num_layers"), interleave=(*_MODEL, "pp_interleave_num"),
                     offset=(*_MODEL, "offset"), seq_length=(*_MODEL, "seq_length"),
                     vocab_size=(*_MODEL, "vocab_size"), hidden_size=(*_MODEL, "hidden_size"),
                     extra_layers=(*_MODEL, "mtp_depth"))
    defaults = Defaults(select=(r"feed_forward\.mul", r"feed_forward\.w1\.activation\.silu"), comm=(_DEFAULT_COMM,),
                        swap=_DEFAULT_SWAP, compress_dense=r"feed_forward\.w2")
    auto_cells = AutoCells(select=("feed_forward", "attention"), swap=("attention", "feed_forward"),
                           attention_prefix="attention.")
    ir_layer_scope = re.compile(r"layers-CellList/(\d+)-[^/]+/?(.*)$")
    # A recomputed cell's output is kept, not recomputed: the matmuls that produce the attention and
    # MLP outputs run again only under full recompute of the layer.
    cell_outputs = frozenset({"attention.wo.matmul", "feed_forward.w2.matmul"})
    cpu_measured_on = {"mindspore": "2.9.0", "mindformers": "1.9.0"}   # the allocation logs of cpu_memory.py

    def model_issues(self, source: Source) -> list[ConfigIssue]:
        return checks.model_issues(source)

    def model_notes(self, source: Source, plan: Plan) -> list[ConfigIssue]:
        return checks.model_notes(source, plan)

    def swap_scope_issues(self, source: Source) -> list[ConfigIssue]:
        return checks.swap_scope_issues(source)

    def pattern_hint(self, pattern: str) -> str | None:
        return _PATTERN_HINTS.get(pattern)


LLAMA = LlamaFamily()
