"""The fused codec (C++ kernels as MindSpore Custom operators) against the graph-operator reference codec.

Given the same noise (the fused kernel's own draws, fed to the reference), the two store the same bytes and
restore the same values, for every method, group sizes that do and do not fill the vector loops, odd sizes (the
last group padded), tensors larger than the reference's blocks, float16 in and out, and tiny and huge magnitudes.
Through MindSpore, the fused codec's restores are unbiased and within one step, as tests/mindspore/test_codec.py
checks the reference's; in a compiled graph every step draws fresh noise.
"""

from __future__ import annotations

import numpy as np
import pytest

CASES = [(group, shape, scale, dtype) for group in (256, 64, 1000) for shape in ((37, 300), (3,), (1100, 300))
         for scale, dtype in ((1e-30, np.float32), (1.0, np.float32), (1e30, np.float32), (2.0, np.float16))]


@pytest.fixture(scope="module")
def ms():
    import mindspore

    mindspore.set_context(mode=mindspore.PYNATIVE_MODE, device_target="CPU")
    return mindspore


@pytest.fixture(scope="module")
def library():
    from mf_memopt.compress.build import library

    return str(library().path)


def _noise(ms, library, seed, call, groups, group):
    from mindspore import ops

    kernel = ops.Custom(f"{library}:CodecNoise", out_shape=(groups, group), out_dtype=ms.float32, func_type="aot")
    kernel.add_prim_attr("noise_shape", (groups, group))      # PyNative caches inferred shapes by attributes
    return kernel(ms.Tensor([seed, call, 0], ms.int64))


def _same(first, second):
    return all(a.asnumpy().tobytes() == b.asnumpy().tobytes() for a, b in zip(first, second))


@pytest.mark.parametrize("bits", [8, 4, 2])
def test_the_fused_and_reference_codecs_agree_bit_for_bit_given_the_same_noise(ms, library, bits):
    from mf_memopt.compress.codec import GroupCodec
    from mf_memopt.compress.fused import FusedCodec

    rng = np.random.default_rng(bits)
    for group, shape, scale, dtype in CASES:
        x = ms.Tensor(((rng.standard_normal(shape) + rng.uniform(-2, 2)) * scale).astype(dtype))
        groups = -(-int(np.prod(shape)) // group)
        fused, reference = FusedCodec(library, bits, group, seed=9), GroupCodec(bits, group)
        call = int(rng.integers(0, 2 ** 40))
        mine = fused.compress(x, ms.Tensor([9, call], ms.int64))
        theirs = reference.compress(x, noise=_noise(ms, library, 9, call, groups, group))
        case = (bits, group, shape, scale, dtype.__name__)
        assert _same(mine, theirs), case
        for out in (ms.float32, ms.float16):
            assert _same([fused.decompress(*mine, shape, out)], [reference.decompress(*theirs, shape, out)]), case
    # and the comparison can fail: another call's noise gives other levels
    other = reference.compress(x, noise=_noise(ms, library, 9, call + 1, groups, group))
    assert not np.array_equal(mine[0].asnumpy(), other[0].asnumpy())


@pytest.mark.parametrize("bits", [8, 4, 2])
def test_fused_restores_are_unbiased_and_within_one_step(ms, library, bits):
    from mf_memopt.compress.fused import FusedCodec

    values = np.random.default_rng(bits).standard_normal((64, 256)).astype(np.float32)
    codec, x = FusedCodec(library, bits, 256, seed=7), ms.Tensor(values)
    errors = np.stack([codec.decompress(*codec.compress(x), x.shape, ms.float32).asnumpy() - values
                       for _ in range(128)])
    step = np.abs(errors).max()
    assert step > 0
    group_range = np.ptp(values.reshape(-1, 256), axis=1).max()
    assert step <= group_range / (2 ** bits - 1) * 1.01
    early, late = np.sqrt(np.mean(errors[:8].mean(axis=0) ** 2)), np.sqrt(np.mean(errors.mean(axis=0) ** 2))
    assert late < early / 3.0, (early, late)
    assert abs(errors.mean()) < 4 * errors.std() / np.sqrt(errors.size)


def test_in_a_compiled_graph_every_call_draws_fresh_noise(ms, library):
    """The kernel counts its calls: the same compiled cell, run twice on the same input, stores other levels; the
    graph's results are the PyNative results of the same calls (a new codec's first two)."""
    from mindspore import nn

    from mf_memopt.compress.fused import FusedCodec

    class Compress(nn.Cell):
        def __init__(self, codec):
            super().__init__()
            self.codec = codec

        def construct(self, x):
            return self.codec.compress(x)[0]

    x = ms.Tensor(np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32))
    cell = Compress(FusedCodec(library, 2, 256, seed=2 ** 41 + 3))
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        first, second = cell(x).asnumpy(), cell(x).asnumpy()
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    assert not np.array_equal(first, second)
    again = FusedCodec(library, 2, 256, seed=2 ** 41 + 3)
    assert np.array_equal(first, again.compress(x, ms.Tensor([2 ** 41 + 3, 0], ms.int64))[0].asnumpy())
    assert np.array_equal(second, again.compress(x, ms.Tensor([2 ** 41 + 3, 1], ms.int64))[0].asnumpy())
