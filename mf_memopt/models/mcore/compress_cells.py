"""The mcore compressed cell: MindFormers' `ColumnParallelLinear` / `RowParallelLinear` with a compressed input.

The cell adopts the parameters and primitives of the linear it replaces, under the same names, so
parameter names (and thus checkpoints) are unchanged and every pattern that matched the original
still matches. It returns `(output, bias)` as the original does, computing `x @ W.T` (+ bias) in the
compute dtype; the matmul runs in `QuantisedMatMul` instead of MindFormers' `Morph`, whose backward
would read the full input.

`GatedSwiGlu` takes the place of an MLP's `SwiGlu` when its `linear_fc2` is compressed: the MLP then
keeps only the gate and up halves, and SiLU's output and gradient are rebuilt in the backward.
"""

from __future__ import annotations

from mindspore import nn, ops

from ...compress.cells import GatedProduct, QuantisedMatMul
from ...compress.codec import GroupCodec


class CompressedParallelLinear(nn.Cell):
    """An mcore linear (weight stored as (out, in)) whose matmul input is kept compressed for the backward."""

    def __init__(self, linear, codec: GroupCodec, method: str):
        super().__init__(auto_prefix=False)
        self.method = method
        self.input_size, self.output_size = linear.input_size, linear.output_size
        self.compute_dtype, self.has_bias, self.skip_bias_add = linear.compute_dtype, linear.has_bias, \
            linear.skip_bias_add
        self.weight = linear.weight
        self.bias = linear.bias
        if linear.has_bias and not linear.skip_bias_add:
            self.add = linear.add
        self.cast, self.shape = linear.cast, linear.shape
        # kept so that patterns naming them still resolve; the reshapes below are this cell's own, since
        # MindFormers marks a ColumnParallelLinear's Reshape for recompute and the compressed copy must not be
        self.matmul, self.reshape = linear.matmul, linear.reshape
        self.flatten, self.unflatten = ops.Reshape(), ops.Reshape()
        self.compressed_matmul = QuantisedMatMul(codec, linear.compute_dtype, linear.input_size)

    def construct(self, input_, weight=None):
        weight = self.cast(self.weight if weight is None else weight, self.compute_dtype)
        out_shape = self.shape(input_)[:-1] + (self.output_size,)
        x = self.flatten(input_, (-1, self.input_size))
        ori_dtype = ops.dtype(x)
        x = self.cast(x, self.compute_dtype)
        packed, low, scale, norm = self.compressed_matmul.compress(x)
        x = self.compressed_matmul(x, weight, packed, low, scale, norm)
        bias = self.bias
        if self.has_bias and not self.skip_bias_add:
            x = self.add(x, self.cast(self.bias, self.compute_dtype))
            bias = None
        x = self.cast(x, ori_dtype)
        return self.unflatten(x, out_shape), bias


class GatedSwiGlu(nn.Cell):
    """MindFormers' `SwiGlu` (split, SiLU, mul) whose backward keeps only the two halves of its input
    (`GatedProduct`): SiLU's output and its gradient's sigmoid are rebuilt after the incoming gradient,
    by the same primitives, so losses and gradients are bit-identical."""

    def __init__(self, swiglu):
        super().__init__(auto_prefix=False)
        self.split, self.silu, self.mul = swiglu.split, swiglu.silu, swiglu.mul
        self.gated = GatedProduct(swiglu.silu, swiglu.mul)

    def construct(self, x):
        half = x.shape[-1] // 2
        gate, up = self.split(x, (half, half), -1)
        return self.gated(gate, up)
