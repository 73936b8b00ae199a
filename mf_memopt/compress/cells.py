"""Matmul cells whose backward pass reads only a compressed copy of a saved input.

A family's replacement cells (`models/<family>/compress_cells.py`) put these in place of the
matmul of the cells they replace.

Two MindSpore graph-mode traps shape these cells:

* a custom `bprop` may not read a Parameter, so the weight is an input of the cell;
* the backward must decompress only after the incoming gradient exists
  (`ops.depend(..., dout)`); otherwise the runtime schedules (or CSE merges) the
  decompression into the forward pass and the full-precision copy stays alive.
"""

from __future__ import annotations

from mindspore import nn, ops
from mindspore.ops import operations as P
from mindspore.ops.auto_generate import SiLUGrad

from .codec import GroupCodec
from .codec_shape import restore_block_rows
from .fused import FusedCodec


class QuantisedMatMul(nn.Cell):
    """y = x @ w.T whose backward reads only (packed, low, scale), the compressed copy of x.

    The compressed copy is an input of the cell, not an output: a custom bprop receives the
    cell's whole output, and an output tuple (y, copy) kept for the backward keeps y alive
    too (measured: 2 MiB more per layer of llama_medium). The copy is cut from autodiff with
    stop_gradient, so the quantiser's own operators get no backward.
    """

    def __init__(self, codec: GroupCodec | FusedCodec, dtype, in_channels: int):
        super().__init__()
        self.codec, self.dtype = codec, dtype
        self.matmul = P.MatMul(transpose_b=True)
        self.grad_input = P.MatMul()
        self.grad_weight = P.MatMul(transpose_a=True)
        self.block_rows = restore_block_rows(in_channels, codec.group_size)

    def compress(self, x):
        packed, low, scale, norm = self.codec.compress(x)
        return ops.stop_gradient(packed), ops.stop_gradient(low), ops.stop_gradient(scale), ops.stop_gradient(norm)

    def construct(self, x, weight, packed, low, scale, norm):
        # The product waits for the compressed copy, which only the backward reads: otherwise the runtime
        # may run the compression late, at the end of the forward pass, beside the loss's tensors.
        return self.matmul(ops.depend(x, packed), weight)

    def bprop(self, x, weight, packed, low, scale, norm, out, dout):
        # x is not read: that is the point. Each block of rows is restored only after the incoming
        # gradient (and the previous block's product) exists, and the weight gradient is summed
        # over the blocks, so the backward holds one restored block at a time.
        rows, columns, size = dout.shape[0], weight.shape[1], self.codec.group_size
        grad_weight = None
        for start in range(0, rows, self.block_rows):
            stop = start + self.block_rows if start + self.block_rows < rows else rows
            first, last = start * columns // size, (stop * columns + size - 1) // size
            late = dout if grad_weight is None else grad_weight
            # Sliced after `late` exists: a slice made earlier would be a second copy of its rows until then.
            restored = self.codec.decompress(ops.depend(packed, late)[first:last], ops.depend(low, late)[first:last],
                                             ops.depend(scale, late)[first:last], norm, (stop - start, columns),
                                             self.dtype)
            part = self.grad_weight(dout[start:stop], restored)
            grad_weight = part if grad_weight is None else grad_weight + part
        return (self.grad_input(dout, weight), grad_weight, ops.zeros_like(packed), ops.zeros_like(low),
                ops.zeros_like(scale), ops.zeros_like(norm))


class GatedDownMatMul(nn.Cell):
    """y = (up * SiLU(pre)) @ w.T whose backward keeps only `pre` and `up` and rebuilds the rest.

    The gate's own gradient needs `pre` (SiLU's input) and the product's needs `up`, so keeping
    them costs nothing extra. SiLU's output and the product (the matmul's input) are rebuilt after
    the incoming gradient exists, by the same primitives; SiLU's gradient is the SiLUGrad primitive
    autodiff uses, also run only then (scheduled by itself, its sigmoid ran in the forward pass).
    Losses and gradients are bit-identical to autodiff's.
    """

    def __init__(self, silu, mul, dtype):
        super().__init__()
        self.silu, self.mul, self.dtype = silu, mul, dtype
        self.silu_grad = SiLUGrad()
        self.cast = P.Cast()
        self.matmul = P.MatMul(transpose_b=True)
        self.grad_input = P.MatMul()
        self.grad_weight = P.MatMul(transpose_a=True)

    def construct(self, pre, up, weight):
        product = self.cast(self.mul(up, self.silu(pre)), self.dtype)
        rows = ops.reshape(product, (-1, product.shape[-1]))
        return ops.reshape(self.matmul(rows, weight), product.shape[:-1] + (weight.shape[0],))

    def bprop(self, pre, up, weight, out, dout):
        pre_late, up_late = ops.depend(pre, dout), ops.depend(up, dout)
        gate = self.silu(pre_late)
        product = self.cast(self.mul(up_late, gate), self.dtype)
        rows = ops.reshape(dout, (-1, dout.shape[-1]))
        grad_weight = self.grad_weight(rows, ops.reshape(product, (-1, product.shape[-1])))
        grad_product = ops.reshape(ops.cast(self.grad_input(rows, weight), ops.dtype(up)), up.shape)
        grad_up = grad_product * gate
        return _late_silu_grad(self.silu_grad, grad_product, up_late, pre_late, grad_up), grad_up, grad_weight


class GatedProduct(nn.Cell):
    """up * SiLU(pre) whose backward keeps only `pre` and `up`, as `GatedDownMatMul` does (without the matmul)."""

    def __init__(self, silu, mul):
        super().__init__()
        self.silu, self.mul = silu, mul
        self.silu_grad = SiLUGrad()

    def construct(self, pre, up):
        return self.mul(up, self.silu(pre))

    def bprop(self, pre, up, out, dout):
        pre_late, up_late = ops.depend(pre, dout), ops.depend(up, dout)
        grad_up = dout * self.silu(pre_late)
        return _late_silu_grad(self.silu_grad, dout, up_late, pre_late, grad_up), grad_up


def _late_silu_grad(silu_grad, grad_product, up, pre, grad_up):
    """SiLU's gradient, started only once `grad_up` exists: the rebuilt gate is freed by then, so the gate and
    SiLUGrad's own temporaries are never alive together."""
    return silu_grad(ops.depend(grad_product, grad_up) * up, ops.depend(pre, grad_up))
