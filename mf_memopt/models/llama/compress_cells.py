"""The legacy Llama's compressed cells: MindFormers' `Linear` and `LlamaFeedForward` with compressed inputs.

The cells adopt the parameters, primitives and child cells of the cell they replace,
under the same names, so parameter names (and thus checkpoints) are unchanged and every
pattern that matched the original still matches.
"""

from __future__ import annotations

from mindspore import nn, ops

from ...compress.cells import GatedDownMatMul, GatedProduct, QuantisedMatMul
from ...compress.codec import GroupCodec


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


class LosslessFeedForward(nn.Cell):
    """MindFormers' `LlamaFeedForward` (w1, w3, w2, no concat, no fused SwiGLU) that keeps only w1's
    pre-activation and w3's output: w2's input, SiLU's output and SiLU's gradient are rebuilt from them
    in the backward (`GatedDownMatMul`). w1 runs without its activation, which the rebuild applies.
    The two are passed on as w1 and w3 return them: a reshape between would let the compiler keep
    the float32 matmul outputs instead of their compute-dtype casts (measured with float16 compute).
    """

    def __init__(self, feed_forward):
        super().__init__(auto_prefix=False)
        self.dtype = feed_forward.dtype
        self.cast, self.mul, self.reshape = feed_forward.cast, feed_forward.mul, feed_forward.reshape
        self.w1, self.w2, self.w3 = feed_forward.w1, feed_forward.w2, feed_forward.w3
        self.w1.activation_flag = False
        self.w2_lossless = GatedDownMatMul(feed_forward.w1.activation.silu, feed_forward.mul, feed_forward.w2.dtype)

    def construct(self, x):
        x = self.cast(x, self.dtype)
        pre = self.w1(x)
        hidden = self.w3(x)
        weight = self.w2.cast(self.w2.weight, self.w2.dtype)
        return ops.cast(self.w2_lossless(pre, hidden, weight), ops.dtype(hidden))


class GatedFeedForward(nn.Cell):
    """MindFormers' `LlamaFeedForward` whose w2 keeps its input compressed: the MLP then keeps only w1's
    pre-activation and w3's output, and SiLU's output and gradient are rebuilt in the backward
    (`GatedProduct`). w1 runs without its activation, which `GatedProduct` applies.
    """

    def __init__(self, feed_forward):
        super().__init__(auto_prefix=False)
        self.dtype, self.cast, self.mul = feed_forward.dtype, feed_forward.cast, feed_forward.mul
        self.w1, self.w2, self.w3 = feed_forward.w1, feed_forward.w2, feed_forward.w3
        self.w1.activation_flag = False
        self.gated = GatedProduct(feed_forward.w1.activation.silu, feed_forward.mul)

    def construct(self, x):
        x = self.cast(x, self.dtype)
        return self.w2(self.gated(self.w1(x), self.w3(x)))
