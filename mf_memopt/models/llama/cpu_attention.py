"""A CPU stand-in for MindFormers' FlashAttention cell, so flash-attention configs run on CPU.

`FlashAttentionScore` has no CPU kernel. With `use_flash_attention: True`, every Llama
layer holds `attention.flash_attention`; the default swap strategy (`swap: True` alone)
targets exactly that cell. On CPU the launcher replaces it, under the same name, by
`CPUFlashAttention`: the same inputs and outputs, computed with CPU kernels. Patterns
that name `flash_attention` still match, offload marks land on its operators, and the
numbers equal those of `use_flash_attention: False` (masked scores get -10000 added).
"""

from __future__ import annotations

from typing import Any

import mindspore as ms
from mindspore import nn
from mindspore.common import dtype as mstype
from mindspore.ops import operations as P

from ...document.tree import children, join

MASK_VALUE = -10000.0  # what MindFormers' non-flash Llama attention adds to masked scores


class CPUFlashAttention(nn.Cell):
    """softmax(q k^T * scale + mask * -10000) v, for the BNSD and BSH layouts; mask 1 = discard."""

    def __init__(self, head_num: int, scale_value: float, input_layout: str = "BNSD"):
        super().__init__()
        self.head_num = head_num
        self.scale_value = scale_value
        self.input_layout = input_layout
        self.bmm_qk = P.BatchMatMul(transpose_b=True)
        self.scale = P.Mul()
        self.mask_cast = P.Cast()
        self.mask_scale = P.Mul()
        self.mask_add = P.Add()
        self.softmax_cast = P.Cast()
        self.softmax = P.Softmax(-1)
        self.probs_cast = P.Cast()
        self.bmm_pv = P.BatchMatMul()
        self.reshape = P.Reshape()
        self.transpose = P.Transpose()
        self.tile = P.Tile()
        self.shape = P.Shape()

    def construct(self, query, key, value, attn_mask=None, alibi_mask=None, prefix=None, padding_mask=None,
                  actual_seq_qlen=None, actual_seq_kvlen=None):
        dtype = query.dtype
        if self.input_layout == "BSH":
            batch, seq, hidden = self.shape(query)
            dim = hidden // self.head_num
            query, key, value = self._heads(query, dim), self._heads(key, dim), self._heads(value, dim)
        groups = self.shape(query)[1] // self.shape(key)[1]
        key, value = self._repeat(key, groups), self._repeat(value, groups)
        scores = self.scale(self.bmm_qk(query, key), ms.Tensor(self.scale_value, dtype))
        if attn_mask is not None:
            mask = self.mask_scale(self.mask_cast(attn_mask, dtype), ms.Tensor(MASK_VALUE, dtype))
            scores = self.mask_add(mask, scores)
        if alibi_mask is not None:
            scores = scores + alibi_mask
        probs = self.probs_cast(self.softmax(self.softmax_cast(scores, mstype.float32)), dtype)
        output = self.bmm_pv(probs, value)
        if self.input_layout == "BSH":
            output = self.reshape(self.transpose(output, (0, 2, 1, 3)), (batch, seq, hidden))
        return output

    def _heads(self, x, dim: int):
        """(B, S, N*D) -> (B, N, S, D)."""
        batch, seq, _ = self.shape(x)
        return self.transpose(self.reshape(x, (batch, seq, -1, dim)), (0, 2, 1, 3))

    def _repeat(self, x, groups: int):
        if groups == 1:
            return x
        batch, heads, seq, dim = self.shape(x)
        x = self.tile(self.reshape(x, (batch, heads, 1, seq * dim)), (1, 1, groups, 1))
        return self.reshape(x, (batch, heads * groups, seq, dim))


def replace_flash_attention(model: Any) -> list[str]:
    """Replace every `flash_attention` child (MindFormers FlashAttention) by CPUFlashAttention."""
    replaced = []
    for path, cell in _cells_with_flash_attention(model):
        flash = cell._cells["flash_attention"]
        _check_supported(path, flash)
        scale = flash.flash_attention.attrs.get("scale_value", 1.0)
        cell.flash_attention = CPUFlashAttention(flash.head_num, scale, flash.input_layout)
        replaced.append(join(path, "flash_attention"))
    return replaced


def _cells_with_flash_attention(model: Any) -> list[tuple[str, Any]]:
    found, pending = [], [("", model)]
    while pending:
        path, cell = pending.pop()
        child = cell._cells.get("flash_attention")
        if child is not None and not isinstance(child, CPUFlashAttention):
            found.append((path, cell))
        pending += [(join(path, name), sub) for name, sub in children(cell) if name != "flash_attention"]
    return sorted(found, key=lambda item: item[0])


def _check_supported(path: str, flash: Any) -> None:
    problems = []
    if flash.input_layout not in ("BNSD", "BSH"):
        problems.append(f"input_layout {flash.input_layout}")
    if getattr(flash, "enable_dropout", False):
        problems.append("attention dropout")
    if getattr(flash, "sparse_mode", 0) not in (0, 1):
        problems.append(f"sparse_mode {flash.sparse_mode} (compressed masks)")
    if problems:
        raise ValueError(f"{path}.flash_attention cannot run on CPU with {', '.join(problems)}; "
                         "turn off use_attn_mask_compression / use_eod_attn_mask_compression and context "
                         "parallelism, or set use_flash_attention: False")
