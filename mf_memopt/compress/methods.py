"""The compression methods and their storage formulas (no MindSpore needed here).

ActNN-style quantisation (`int8`, `int4`, `int2`) stores each group of `group_size`
elements as `bits`-bit integers, packed 8 // bits to a byte, plus the group's minimum and
scale as two float16 numbers (32 bits per group), relative to one float32 per tensor. `lossless`
stores nothing extra: it rebuilds the input exactly from tensors the backward pass keeps anyway (see
docs/compression.md for the operators it applies to).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DEFAULT_GROUP_SIZE = 256
GROUP_HEADER_BITS = 32          # float16 minimum + float16 scale per group
TENSOR_HEADER_BYTES = 4         # one float32 per tensor: the minimums and scales are relative to its largest magnitude


@dataclass(frozen=True, slots=True)
class Method:
    name: str
    bits: int | None            # None: lossless

    @property
    def quantised(self) -> bool:
        return self.bits is not None


METHODS = {name: Method(name, bits) for name, bits in
           (("int8", 8), ("int4", 4), ("int2", 2), ("lossless", None))}


def bits_per_element(method: str, group_size: int = DEFAULT_GROUP_SIZE) -> float:
    """Stored bits per element, group headers included (int2, group 256: 2.125)."""
    bits = METHODS[method].bits
    if bits is None:
        return 0.0
    return bits + GROUP_HEADER_BITS / group_size


def stored_bytes(method: str, elements: int, group_size: int = DEFAULT_GROUP_SIZE) -> int:
    """Bytes kept for the backward pass by the compressed copy of a tensor of `elements` elements.

    Exact for the quantisers: the tensor is padded to whole groups, each packed into
    `group_size * bits / 8` bytes plus two float16 numbers, plus one float32 for the tensor.
    """
    bits = METHODS[method].bits
    if bits is None:
        return 0
    groups = math.ceil(elements / group_size)
    return groups * (group_size * bits // 8 + GROUP_HEADER_BITS // 8) + TENSOR_HEADER_BYTES
