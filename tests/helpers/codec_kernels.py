"""The fused codec's kernels called directly (ctypes and NumPy, no MindSpore), and Philox4x32-10 in NumPy.

The kernels have MindSpore's aot signature, `int F(int nparam, void **params, int *ndims, int64_t **shapes,
const char **dtypes, void *stream, void *extra)`, a plain C function: here it is called as MindSpore calls it.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

DTYPES = {np.dtype(np.float32): b"float32", np.dtype(np.float16): b"float16", np.dtype(np.uint8): b"uint8",
          np.dtype(np.int64): b"int64", np.dtype(np.uint32): b"uint32"}


class Kernels:
    def __init__(self, path: Path):
        self.library = ctypes.CDLL(str(path))

    def call(self, name: str, *arrays: np.ndarray) -> int:
        count = len(arrays)
        shapes = [(ctypes.c_int64 * max(1, array.ndim))(*array.shape) for array in arrays]
        return getattr(self.library, name)(
            count, (ctypes.c_void_p * count)(*[array.ctypes.data for array in arrays]),
            (ctypes.c_int * count)(*[array.ndim for array in arrays]),
            (ctypes.POINTER(ctypes.c_int64) * count)(*[ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
                                                       for shape in shapes]),
            (ctypes.c_char_p * count)(*[DTYPES[array.dtype] for array in arrays]), None, None)

    def compress(self, bits: int, x: np.ndarray, group: int, seed: int, call: int = -1) -> list[np.ndarray]:
        groups = -(-x.size // group)
        parts = [np.empty((groups, group * bits // 8), np.uint8), np.empty((groups, 1), np.float16),
                 np.empty((groups, 1), np.float16), np.empty((1,), np.float32)]
        assert self.call(f"CompressInt{bits}", x, np.array([seed, call], np.int64), *parts) == 0
        return parts

    def restore(self, bits: int, parts: list[np.ndarray], dtype=np.float32) -> np.ndarray:
        out = np.empty(parts[0].shape[0] * parts[0].shape[1] * 8 // bits, dtype)
        assert self.call(f"RestoreInt{bits}", *parts, out) == 0
        return out

    def noise(self, seed: int, call: int, first: int, count: int) -> np.ndarray:
        out = np.empty(count, np.float32)
        assert self.call("CodecNoise", np.array([seed, call, first], np.int64), out) == 0
        return out

    def philox(self, rows: np.ndarray) -> np.ndarray:
        out = np.empty((len(rows), 4), np.uint32)
        assert self.call("CodecPhilox", rows.astype(np.uint32), out) == 0
        return out


def philox(counters: np.ndarray, key: tuple[int, int]) -> np.ndarray:
    """Philox4x32-10 of each row of `counters` (n, 4) under `key`, from the published algorithm, in NumPy."""
    x = [counters[:, index].astype(np.uint64) for index in range(4)]
    k0, k1 = np.uint64(key[0]), np.uint64(key[1])
    mask = np.uint64(0xFFFFFFFF)
    for _ in range(10):
        p0, p1 = np.uint64(0xD2511F53) * x[0], np.uint64(0xCD9E8D57) * x[2]
        x = [(p1 >> np.uint64(32)) ^ x[1] ^ k0, p1 & mask, (p0 >> np.uint64(32)) ^ x[3] ^ k1, p0 & mask]
        k0, k1 = (k0 + np.uint64(0x9E3779B9)) & mask, (k1 + np.uint64(0xBB67AE85)) & mask
    return np.stack(x, axis=1).astype(np.uint32)


def layout_noise(seed: int, call: int, first: int, count: int) -> np.ndarray:
    """The noise of elements [first, first + count) as kernels/codec.cpp documents its layout: chunks of 64 elements
    from 8 blocks; element i of chunk c reads lane l = i % 16 of vector v = i // 16, i.e. word 2 (v // 2) + l // 8
    of block 8c + l % 8, its low 16 bits for even v and high for odd; u = (2k + 1) / 2^17."""
    elements = np.arange(first, first + count, dtype=np.uint64)
    chunk, index = elements // 64, (elements % 64).astype(np.int64)
    vector, lane = index // 16, index % 16
    blocks = chunk * 8 + (lane % 8).astype(np.uint64)
    counters = np.stack([blocks & 0xFFFFFFFF, blocks >> np.uint64(32), np.full_like(blocks, call & 0xFFFFFFFF),
                         np.full_like(blocks, call >> 32)], axis=1)
    words = philox(counters, (seed & 0xFFFFFFFF, seed >> 32))
    word = words[np.arange(count), 2 * (vector // 2) + lane // 8].astype(np.uint64)
    k = (word >> (16 * (vector % 2)).astype(np.uint64)) & np.uint64(0xFFFF)
    return ((2 * k + 1).astype(np.float64) / 2 ** 17).astype(np.float32)
