"""Replacement cells whose backward pass reads only a compressed copy of a saved input.

Two MindSpore graph-mode traps shape these cells:

* a custom `bprop` may not read a Parameter, so the weight is an input of the cell;
* the backward must decompress only after the incoming gradient exists
  (`ops.depend(..., dout)`); otherwise the runtime schedules (or CSE merges) the
  decompression into the forward pass and the full-precision copy stays alive.

The cells adopt the parameters, primitives and child cells of the cell they replace,
under the same names, so parameter names (and thus checkpoints) are unchanged and every
pattern that matched the original still matches.
"""

from __future__ import annotations

import mindspore as ms
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
        return self.matmul(x, weight)

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
            restored = self.codec.decompress(ops.depend(packed[first:last], late), ops.depend(low[first:last], late),
                                             ops.depend(scale[first:last], late), norm, (stop - start, columns),
                                             self.dtype)
            part = self.grad_weight(dout[start:stop], restored)
            grad_weight = part if grad_weight is None else grad_weight + part
        return (self.grad_input(dout, weight), grad_weight, ops.zeros_like(packed), ops.zeros_like(low),
                ops.zeros_like(scale), ops.zeros_like(norm))


class CompressedLinear(nn.Cell):
    """MindFormers' `Linear` (no experts) with its matmul input kept compressed for the backward."""

    def __init__(self, linear, codec: GroupCodec, method: str):
        super().__init__(auto_prefix=False)
        self.method = method
        self.in_channels, self.out_channels = linear.in_channels, linear.out_channels
        self.dtype, self.has_bias = linear.dtype, linear.has_bias
        self.weight = linear.weight
        if linear.has_bias:
            self.bias = linear.bias
            self.bias_add = linear.bias_add
        self.activation_flag = linear.activation_flag
        if linear.activation_flag:
            self.activation = linear.activation
        self.cast, self.reshape, self.shape = linear.cast, linear.reshape, linear.shape
        self.matmul = linear.matmul  # kept so that patterns naming it still resolve
        self.compressed_matmul = QuantisedMatMul(codec, linear.dtype, linear.in_channels)

    def construct(self, x):
        out_shape = self.shape(x)[:-1] + (self.out_channels,)
        x = self.reshape(x, (-1, self.in_channels))
        ori_dtype = ops.dtype(x)
        weight = self.cast(self.weight, self.dtype)
        x = self.cast(x, self.dtype)
        packed, low, scale, norm = self.compressed_matmul.compress(x)
        x = self.compressed_matmul(x, weight, packed, low, scale, norm)
        if self.has_bias:
            x = self.bias_add(x, self.cast(self.bias, self.dtype))
        if self.activation_flag:
            x = self.activation(x)
        x = ops.cast(x, ori_dtype)
        return self.reshape(x, out_shape)


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


class LosslessFeedForward(nn.Cell):
    """MindFormers' `LlamaFeedForward` (w1, w3, w2, no concat, no fused SwiGLU) whose w2 keeps no input.

    w2 reads `w3(x) * w1(x)`, and the backward of that product keeps both factors; the
    product is rebuilt from them in w2's backward instead of being kept.
    """

    def __init__(self, feed_forward):
        super().__init__(auto_prefix=False)
        self.dtype = feed_forward.dtype
        self.cast, self.mul, self.reshape = feed_forward.cast, feed_forward.mul, feed_forward.reshape
        self.w1, self.w2, self.w3 = feed_forward.w1, feed_forward.w2, feed_forward.w3
        self.w2_lossless = DerivedInputMatMul(feed_forward.mul, feed_forward.w2.dtype)
        self.in_channels, self.out_channels = feed_forward.w2.in_channels, feed_forward.w2.out_channels

    def construct(self, x):
        x = self.cast(x, self.dtype)
        gate = self.w1(x)
        hidden = self.w3(x)
        out_shape = ops.shape(hidden)[:-1] + (self.out_channels,)
        hidden = self.reshape(hidden, (-1, self.in_channels))
        gate = self.reshape(gate, (-1, self.in_channels))
        weight = self.w2.cast(self.w2.weight, self.w2.dtype)
        output = self.w2_lossless(hidden, gate, weight)
        output = ops.cast(output, ops.dtype(hidden))
        return self.reshape(output, out_shape)
