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

from .codec import GroupCodec
from .codec_shape import restore_block_rows


class QuantisedMatMul(nn.Cell):
    """y = x @ w.T whose backward reads only (packed, low, scale), the compressed copy of x.

    The compressed copy is an input of the cell, not an output: a custom bprop receives the
    cell's whole output, and an output tuple (y, copy) kept for the backward keeps y alive
    too (measured: 2 MiB more per layer of llama_medium). The copy is cut from autodiff with
    stop_gradient, so the quantiser's own operators get no backward.
    """

    def __init__(self, codec: GroupCodec, dtype, in_channels: int):
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


class DerivedInputMatMul(nn.Cell):
    """y = (a * b) @ w.T where the backward rebuilds a * b from a and b, which it keeps anyway.

    The product's own gradient needs a and b, so keeping them costs nothing extra; the
    product itself (the matmul's input) is not kept. Same operators as the autodiff
    gradients of Mul and MatMul: losses and gradients are bit-identical.
    """

    def __init__(self, mul, dtype):
        super().__init__()
        self.mul, self.dtype = mul, dtype
        self.cast = P.Cast()
        self.matmul = P.MatMul(transpose_b=True)
        self.grad_input = P.MatMul()
        self.grad_weight = P.MatMul(transpose_a=True)

    def construct(self, a, b, weight):
        return self.matmul(self.cast(self.mul(a, b), self.dtype), weight)

    def bprop(self, a, b, weight, out, dout):
        a_late = ops.depend(a, dout)
        b_late = ops.depend(b, dout)
        product = self.cast(self.mul(a_late, b_late), self.dtype)
        grad_product = ops.cast(self.grad_input(dout, weight), ops.dtype(a))
        return grad_product * b, grad_product * a, self.grad_weight(dout, product)
