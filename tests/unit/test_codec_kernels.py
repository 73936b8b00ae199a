"""The fused codec's C++ kernels, built with the project's flags and called as MindSpore calls them (no MindSpore).

What a user relies on: the generator is Philox4x32-10 (its published known answers), the noise is laid out as the
source documents (so the reference can be fed the same draws), the AVX-512 build and the portable build give
the same bytes, every restored element lies within one quantisation step of the input, and the mean of many
restores converges to the input (the rounding is unbiased). The agreement with the graph-operator codec is
tests/mindspore/test_fused_codec.py.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from codec_kernels import Kernels, layout_noise, philox

from mf_memopt.compress.build import FLAGS, build

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ (the fused codec's compiler)")

PORTABLE = tuple(flag for flag in FLAGS if flag != "-march=native")   # the compiler's default target: no AVX-512
METHODS = (8, 4, 2)
KNOWN = [  # Random123's kat_vectors: counter[4], key[2] -> output[4]
    ([0, 0, 0, 0, 0, 0], [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]),
    ([0xFFFFFFFF] * 6, [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]),
    ([0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344, 0xA4093822, 0x299F31D0],
     [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1])]


@pytest.fixture(scope="module")
def native(tmp_path_factory):
    return Kernels(build(directory=tmp_path_factory.mktemp("cache")).path)


@pytest.fixture(scope="module")
def portable(tmp_path_factory):
    return Kernels(build(PORTABLE, directory=tmp_path_factory.mktemp("cache")).path)


def test_the_generator_gives_philox_published_known_answers(native):
    rows = np.array([row for row, _ in KNOWN], np.uint32)
    expected = np.array([answer for _, answer in KNOWN], np.uint32)
    assert np.array_equal(native.philox(rows), expected)
    assert all(np.array_equal(philox(row[None, :4], (row[4], row[5]))[0], answer)   # and so does the NumPy one
               for row, answer in zip(rows, expected))


@pytest.mark.parametrize("first, count", [(0, 64), (0, 1000), (37, 300), (2 ** 33 + 5, 130)])
def test_the_noise_is_laid_out_as_the_source_documents(native, portable, first, count):
    seed, call = 0x1234_5678_9ABC, 2 ** 32 + 7
    expected = layout_noise(seed, call, first, count)
    assert np.array_equal(native.noise(seed, call, first, count), expected)
    assert np.array_equal(portable.noise(seed, call, first, count), expected)


def test_the_noise_is_uniform_on_the_midpoints_of_2_16_cells(native):
    draws = native.noise(5, 0, 0, 2 ** 20)
    cells = draws * 2 ** 17
    assert np.array_equal(cells, np.round(cells)) and np.all(cells % 2 == 1)   # (2k + 1) / 2^17
    counts = np.bincount(((cells - 1) / 2).astype(np.int64) >> 8, minlength=256)   # 256 bins of 256 cells
    expected = draws.size / 256
    assert abs(draws.mean() - 0.5) < 4 * np.sqrt(1 / 12 / draws.size)
    assert ((counts - expected) ** 2 / expected).sum() < 256 + 6 * np.sqrt(2 * 256)   # chi-square, 255 dof


def _tensor(rng, size, scale, dtype=np.float32):
    return ((rng.standard_normal(size) + rng.uniform(-2, 2)) * scale).astype(dtype)


@pytest.mark.parametrize("bits", METHODS)
def test_the_avx512_and_portable_builds_give_the_same_bytes(native, portable, bits):
    rng = np.random.default_rng(bits)
    for group in (256, 64, 8, 1000):
        for size in (group * 9, group * 9 - 5, 3):
            for dtype, scale in ((np.float32, 1e-20), (np.float32, 1.0), (np.float32, 1e25), (np.float16, 3.0)):
                x = _tensor(rng, size, scale, dtype)
                mine, theirs = native.compress(bits, x, group, 3, 11), portable.compress(bits, x, group, 3, 11)
                assert all(a.tobytes() == b.tobytes() for a, b in zip(mine, theirs)), (bits, group, size, dtype)
                for out in (np.float32, np.float16):
                    assert native.restore(bits, mine, out).tobytes() == portable.restore(bits, theirs, out).tobytes()


def _steps(parts, group, size):
    """Each element's quantisation step (its group's scale times the norm)."""
    return (parts[2].astype(np.float32).ravel() * parts[3][0]).repeat(group)[:size]


@pytest.mark.parametrize("bits", METHODS)
@pytest.mark.parametrize("scale", [1e-30, 1.0, 1e30])
def test_restores_lie_within_one_step_and_their_mean_converges_to_the_input(native, bits, scale):
    group, size, draws = 256, 256 * 7 + 13, 128            # an odd size: the last group is padded
    x = _tensor(np.random.default_rng(bits), size, scale)
    restored, errors = [], []
    for _ in range(draws):
        parts = native.compress(bits, x, group, 77 + bits)  # the next call: fresh noise each time
        whole = native.restore(bits, parts)
        step = _steps(parts, group, size)
        error = whole[:size].astype(np.float64) - x
        assert np.all(np.abs(error) <= step * 1.001), (bits, scale)
        assert np.all(np.abs(whole[size:]) <= step[-1] * 1.001)   # the padding restores to about 0
        restored.append(whole[:size])
        errors.append(error / step)                          # in steps
    errors = np.array(errors)
    assert np.abs(errors).max() > 0.1                        # it does quantise
    # unbiased: the residual of the mean of K draws falls as 1/sqrt(K); a bias would keep it up
    early, late = (np.sqrt(np.mean(errors[:count].mean(axis=0) ** 2)) for count in (8, draws))
    assert late < early / 3.0, (early, late)                 # sqrt(128 / 8) = 4 for an unbiased quantiser
    assert abs(errors.mean()) < 4 * errors.std() / np.sqrt(errors.size)


def test_a_biased_rounding_fails_the_convergence_check(native):
    """The convergence check above can fail: the kernel's levels rounded half up instead (deterministic, so biased)
    keep the residual of the mean where it is."""
    x = _tensor(np.random.default_rng(0), 256 * 4, 1.0)
    parts = native.compress(4, x, 256, 5)
    step, base = _steps(parts, 256, x.size), (parts[1].astype(np.float32).ravel() * parts[3][0]).repeat(256)
    errors = np.array([(np.floor((x - base) / step + 0.5) * step + base - x) / step for _ in range(128)])
    early, late = (np.sqrt(np.mean(errors[:count].mean(axis=0) ** 2)) for count in (8, 128))
    assert not late < early / 3.0


def test_each_call_draws_fresh_noise_and_each_seed_its_own(native):
    x = _tensor(np.random.default_rng(1), 4096, 1.0)
    seed = 2 ** 40 + 12345                                   # no other test counts this seed's calls
    first, second = native.compress(2, x, 256, seed)[0], native.compress(2, x, 256, seed)[0]
    assert not np.array_equal(first, second)
    assert np.array_equal(first, native.compress(2, x, 256, seed, call=0)[0])     # the counter started at 0
    assert np.array_equal(second, native.compress(2, x, 256, seed, call=1)[0])
    assert not np.array_equal(first, native.compress(2, x, 256, seed + 1, call=0)[0])


def test_arguments_that_do_not_fit_are_refused(native):
    x = np.ones(1000, np.float32)
    parts = [np.empty((4, 256), np.uint8), np.empty((4, 1), np.float16), np.empty((4, 1), np.float16),
             np.empty((1,), np.float32)]
    assert native.call("CompressInt8", x, np.array([1, -1], np.int64), *parts) == 0
    assert native.call("CompressInt8", x.astype(np.int64), np.array([1, -1], np.int64), *parts) == 1   # dtype
    assert native.call("CompressInt8", x[:500], np.array([1, -1], np.int64), *parts) == 1     # 2 groups, not 4
    assert native.call("RestoreInt8", *parts, np.empty(1000, np.float32)) == 1                # not 4 x 256
