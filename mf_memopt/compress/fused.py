"""The fused codec: `GroupCodec`'s interface and stored format, one C++ kernel per direction (`kernels/codec.cpp`).

Each kernel is a MindSpore `ops.Custom(..., func_type="aot")` operator from the library `build.library()`
compiles. Compression reads the tensor twice (its groups' ranges and largest magnitude, then the levels) and
writes the compressed copy; restoring reads the copy and writes the tensor. The stochastic rounding's noise is
drawn inside the kernel by a counter-based generator (Philox4x32-10), keyed by the cell's seed, the call number
and the element, so no tensor of draws is made.
"""

from __future__ import annotations

import math
from functools import partial

import mindspore as ms
from mindspore import nn, ops


class FusedCodec(nn.Cell):
    """compress(x) -> (packed uint8, minimum f16, scale f16, norm f32); decompress(...) -> x's estimate."""

    name = "fused"

    def __init__(self, library: str, bits: int, group_size: int, seed: int = 0):
        super().__init__()
        if 8 % bits or group_size % (8 // bits):
            raise ValueError(f"{bits}-bit groups of {group_size} elements do not pack into whole bytes")
        self.bits, self.group_size, self.seed = bits, group_size, seed
        self.per_byte = 8 // bits
        self.compress_kernel = ops.Custom(f"{library}:CompressInt{bits}",
                                          out_shape=partial(_compressed_shapes, group_size, self.per_byte),
                                          out_dtype=lambda x, key: (ms.uint8, ms.float16, ms.float16, ms.float32),
                                          func_type="aot")
        self.restore32 = ops.Custom(f"{library}:RestoreInt{bits}", out_shape=partial(_restored_shape, self.per_byte),
                                    out_dtype=ms.float32, func_type="aot")
        self.restore16 = ops.Custom(f"{library}:RestoreInt{bits}", out_shape=partial(_restored_shape, self.per_byte),
                                    out_dtype=ms.float16, func_type="aot")
        # PyNative caches an operator's inferred outputs by its attributes, which name the same function for all of
        # these: the attributes that decide the outputs tell them apart.
        self.compress_kernel.add_prim_attr("group_size", group_size)
        for kernel, dtype in ((self.restore32, "float32"), (self.restore16, "float16")):
            kernel.add_prim_attr("group_size", group_size)
            kernel.add_prim_attr("restored_dtype", dtype)
        self.key = ms.Tensor([seed, -1], ms.int64)      # -1: the kernel counts this seed's calls

    def compress(self, x, key=None):
        """`key` (tests): an int64 tensor (seed, call) to draw a given call's noise."""
        if x.dtype not in (ms.float32, ms.float16):
            x = ops.cast(x, ms.float32)
        return self.compress_kernel(x, self.key if key is None else key)

    def decompress(self, packed, low16, scale16, norm, shape, dtype):
        flat = self.restore16(packed, low16, scale16, norm) if dtype == ms.float16 else \
            self.restore32(packed, low16, scale16, norm)
        elements = math.prod(shape)
        if packed.shape[0] * self.group_size > elements:
            flat = flat[:elements]
        flat = ops.reshape(flat, shape)
        return flat if dtype in (ms.float16, ms.float32) else ops.cast(flat, dtype)


def _compressed_shapes(group_size, per_byte, x, key):
    groups = (math.prod(x) + group_size - 1) // group_size
    return (groups, group_size // per_byte), (groups, 1), (groups, 1), (1,)


def _restored_shape(per_byte, packed, low, scale, norm):
    return (packed[0] * packed[1] * per_byte,)
