"""The quantiser behind int8/int4/int2 compression: unbiased, fresh noise on every call, its own noise per cell.

Stochastic rounding makes the decompressed tensor an unbiased estimate of the original, which is
what keeps the weight gradients unbiased. Checked statistically: the mean of K decompressions
converges to the input as 1/sqrt(K) (a bias would stop it), and the average error over all
elements and draws is within a few standard errors of zero.
"""

from __future__ import annotations

import numpy as np
import pytest


SHAPE = (64, 256)


@pytest.fixture(scope="module")
def ms():
    import mindspore

    mindspore.set_context(mode=mindspore.PYNATIVE_MODE, device_target="CPU")
    return mindspore


def _round_trip(ms, codec, x):
    parts = codec.compress(x)
    return codec.decompress(*parts, x.shape, ms.float32).asnumpy(), parts[0].asnumpy()


def _draws(ms, bits: int, count: int, x, seed: int = 7) -> np.ndarray:
    from mf_memopt.compress.codec import GroupCodec

    codec = GroupCodec(bits, 256, seed=seed)
    return np.stack([_round_trip(ms, codec, x)[0] for _ in range(count)])


@pytest.mark.parametrize("bits", [8, 4, 2])
def test_the_mean_of_many_decompressions_converges_to_the_input(ms, bits):
    values = np.random.default_rng(bits).standard_normal(SHAPE).astype(np.float32)
    x = ms.Tensor(values)
    draws = _draws(ms, bits, 128, x)
    errors = draws - values
    step = np.abs(errors).max()
    assert step > 0                                      # it does quantise
    # every decompression lies within one quantisation step of the input (no clipping)
    group_range = values.reshape(-1, 256).ptp(axis=1).max()
    assert step <= group_range / (2 ** bits - 1) * 1.01
    # unbiased: the residual of the mean of K draws falls as 1/sqrt(K); a bias would keep it up
    early, late = np.sqrt(np.mean(errors[:8].mean(axis=0) ** 2)), np.sqrt(np.mean(errors.mean(axis=0) ** 2))
    assert late < early / 3.0, (early, late)              # sqrt(128 / 8) = 4 for an unbiased quantiser
    # and the average error over all elements and draws is within 4 standard errors of zero
    standard_error = errors.std() / np.sqrt(errors.size)
    assert abs(errors.mean()) < 4 * standard_error, (errors.mean(), standard_error)


def test_a_biased_rounding_would_fail_the_convergence_check():
    """The check above can fail: rounding half up (deterministic, biased) keeps the mean's residual where it is."""
    rng = np.random.default_rng(0)
    values = rng.standard_normal(SHAPE)
    scale = values.ptp() / 3
    draws = np.stack([np.floor(values / scale + 0.5) * scale for _ in range(128)])
    errors = draws - values
    early, late = np.sqrt(np.mean(errors[:8].mean(axis=0) ** 2)), np.sqrt(np.mean(errors.mean(axis=0) ** 2))
    assert not late < early / 3.0


def test_noise_is_fresh_on_every_call_and_each_cell_has_its_own(ms):
    from mf_memopt.compress.codec import GroupCodec

    x = ms.Tensor(np.random.default_rng(3).standard_normal(SHAPE).astype(np.float32))
    codec = GroupCodec(2, 256, seed=11)
    first, second = _round_trip(ms, codec, x)[1], _round_trip(ms, codec, x)[1]
    assert not np.array_equal(first, second)                       # a new draw every step
    other = _round_trip(ms, GroupCodec(2, 256, seed=12), x)[1]
    assert not np.array_equal(first, other)                        # another cell, other noise
    again = _round_trip(ms, GroupCodec(2, 256, seed=11), x)[1]
    assert np.array_equal(first, again)                            # the same cell's stream is reproducible


def test_every_compressed_cell_of_a_plan_gets_its_own_noise_stream():
    from types import SimpleNamespace

    from mf_memopt.apply.compress import _seed

    actions = [SimpleNamespace(layer=layer, path=path) for layer in range(8)
               for path in ("attention.wq", "attention.wk", "feed_forward.w1", "feed_forward.w2")]
    seeds = {_seed(action) for action in actions}
    assert len(seeds) == len(actions)
