"""Per-group stochastic quantisation in MindSpore graph operators (ActNN, level L1/L2).

A tensor is flattened, padded to whole groups of `group_size` elements, and each group
is stored as `bits`-bit integers with its minimum and scale (float16 each). Rounding is
stochastic (`floor(v + u)`, u uniform on the 2**24 points k / 2**24 of [0, 1)), so the
decompressed value is an unbiased estimate of the original (to 2**-24 of a level) and so is the
gradient computed from it. The minimum is rounded
down and the scale up before they are stored in float16, so every value stays inside
the representable range and no clipping biases the rounding.
"""

from __future__ import annotations

import math

import mindspore as ms
from mindspore import nn, ops

from .codec_shape import BLOCK_ELEMENTS

_F16_TINY = 6.2e-5              # smallest normal float16, relative to the tensor's largest magnitude
_F16_MARGIN = 2.0 ** -9         # > float16 rounding error (2**-11 relative)
_NOISE_LEVELS = 2 ** 24          # the rounding noise is uniform on k / 2**24, k = 0 .. 2**24 - 1


class GroupCodec(nn.Cell):
    """compress(x) -> (packed uint8, minimum f16, scale f16, norm f32); decompress(...) -> x's estimate."""

    def __init__(self, bits: int, group_size: int, seed: int = 0):
        super().__init__()
        if 8 % bits or group_size % (8 // bits):
            raise ValueError(f"{bits}-bit groups of {group_size} elements do not pack into whole bytes")
        self.bits, self.group_size = bits, group_size
        self.levels = float(2 ** bits - 1)
        self.per_byte = 8 // bits
        self.places = ms.Tensor([2 ** (bits * k) for k in range(self.per_byte)], ms.int32)
        self.uniform = ops.UniformInt(seed=seed, seed2=seed + 1)

    def compress(self, x, noise=None):
        """`noise` (tests): a float32 (groups, group_size) tensor of the rounding's noise in [0, 1), used instead of
        this codec's draws (the fused codec's agreement test feeds it the fused kernel's noise)."""
        elements = x.size
        groups = (elements + self.group_size - 1) // self.group_size
        flat = ops.reshape(ops.cast(x, ms.float32), (-1,))
        if groups * self.group_size > elements:
            flat = ops.concat((flat, ops.zeros((groups * self.group_size - elements,), ms.float32)))
        grouped = ops.reshape(flat, (groups, self.group_size))
        # float16 minimums and scales relative to the tensor's largest magnitude: small activations
        # (1e-4 and below) would otherwise fall under float16's normal range and lose precision.
        step = BLOCK_ELEMENTS // self.group_size
        norm = ops.amax(ops.abs(grouped[0:step]), (0, 1), False)
        for start in range(step, groups, step):  # block by block: |x| of one block at a time
            norm = ops.maximum(norm, ops.amax(ops.abs(ops.depend(grouped, norm)[start:start + step]), (0, 1), False))
        norm = ops.maximum(ops.reshape(norm, (1,)), 1e-30)
        if groups <= step:
            return self._compress_groups(grouped, norm, noise) + (norm,)
        packs, lows, scales = [], [], []
        for start in range(0, groups, step):
            # One block at a time, sliced only when the previous one is packed: a slice made earlier would
            # hold its float32 copy until then, and its temporaries are freed before the next one starts.
            block = (ops.depend(grouped, packs[-1]) if packs else grouped)[start:start + step]
            given = None if noise is None else noise[start:start + step]
            packed, low, scale = self._compress_groups(block, norm, given)
            packs.append(packed)
            lows.append(low)
            scales.append(scale)
        return ops.concat(packs), ops.concat(lows), ops.concat(scales), norm

    def _compress_groups(self, grouped, norm, noise=None):
        groups = grouped.shape[0]
        low = ops.min(grouped, axis=1, keepdims=True)[0] / norm
        high = ops.max(grouped, axis=1, keepdims=True)[0] / norm
        low16 = ops.cast(low - ops.abs(low) * _F16_MARGIN - _F16_TINY, ms.float16)
        low = ops.cast(low16, ms.float32)
        scale = ops.maximum((high - low) / self.levels * (1.0 + _F16_MARGIN) + _F16_TINY, _F16_TINY)
        scale16 = ops.cast(scale, ms.float16)
        scaled = (grouped - low * norm) / (ops.cast(scale16, ms.float32) * norm)
        # UniformInt takes its bounds as tensors: made from this block, they tie the draw to the block. A
        # generator with a constant shape and no tensor input is run by the CPU runtime at the start of the step,
        # every cell's noise of every layer at once; a shape read at run time (TensorShape) ties it too, but
        # makes the kernel graph dynamic, and its pool peak over several steps grew by a third.
        if noise is None:
            zero = ops.cast(low[0, 0] * 0.0, ms.int32)
            draws = self.uniform((groups, self.group_size), zero, zero + _NOISE_LEVELS) - zero
            noise = ops.cast(draws, ms.float32) * (1.0 / _NOISE_LEVELS)
        levels = ops.clip_by_value(ops.floor(scaled + noise), 0.0, self.levels)
        return self._pack(ops.cast(levels, ms.int32), groups), low16, scale16

    def _pack(self, levels, groups):
        if self.per_byte == 1:
            return ops.cast(levels, ms.uint8)
        parts = ops.reshape(levels, (groups, self.group_size // self.per_byte, self.per_byte))
        return ops.cast(ops.reduce_sum(parts * self.places, -1), ms.uint8)

    def decompress(self, packed, low16, scale16, norm, shape, dtype):
        groups = packed.shape[0]
        levels = ops.cast(packed, ms.int32)
        if self.per_byte > 1:
            digits = ops.expand_dims(levels, -1) // self.places
            levels = ops.reshape(ops.floor_mod(digits, 2 ** self.bits), (groups, self.group_size))
        values = (ops.cast(levels, ms.float32) * (ops.cast(scale16, ms.float32) * norm)
                  + ops.cast(low16, ms.float32) * norm)
        flat = ops.reshape(values, (-1,))
        elements = math.prod(shape)
        if groups * self.group_size > elements:
            flat = flat[:elements]
        return ops.cast(ops.reshape(flat, shape), dtype)
