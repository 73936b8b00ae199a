"""The gate rebuild beside a compressed down projection: the same values and gradients as autodiff, to the bit.

`GatedProduct` (and `GatedSwiGlu`, MindFormers' mcore SwiGlu around it) keeps only SiLU's input and
the up projection for its backward, and rebuilds SiLU's output and gradient there. Compiled in graph
mode, as the launcher runs them, against the cells they replace: MindFormers' `SwiGlu` and the Llama
MLP's `up * SiLU(gate)`, differentiated by MindSpore's autodiff.
"""

from __future__ import annotations

import numpy as np
import pytest



@pytest.fixture(scope="module")
def ms():
    import mindspore

    mindspore.set_context(mode=mindspore.GRAPH_MODE, device_target="CPU")
    return mindspore


def _values_and_gradients(ms, cell, *inputs):
    from mindspore import nn, ops

    weights = ms.Tensor(np.arange(cell(*inputs).size).reshape(cell(*inputs).shape) * 1e-3, inputs[0].dtype)

    class Loss(nn.Cell):   # a weighted sum, so that every element's gradient differs
        def __init__(self):
            super().__init__()
            self.cell = cell

        def construct(self, *args):
            return (self.cell(*args) * weights).sum()

    grads = ops.GradOperation(get_all=True)(Loss())(*inputs)
    return cell(*inputs).asnumpy(), [grad.asnumpy() for grad in grads]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_the_gated_product_equals_autodiff_bit_for_bit(ms, dtype):
    from mindspore import nn
    from mindspore.ops import operations as P
    from mindspore.ops.auto_generate import SiLU

    from mf_memopt.compress.cells import GatedProduct

    silu, mul = SiLU(), P.Mul()

    class Plain(nn.Cell):     # the Llama MLP's product: mul(hidden, SiLU(gate))
        def construct(self, pre, up):
            return mul(up, silu(pre))

    rng = np.random.default_rng(0)
    pre, up = (ms.Tensor(rng.standard_normal((64, 96)).astype(dtype) * 3) for _ in range(2))
    theirs = _values_and_gradients(ms, Plain(), pre, up)
    mine = _values_and_gradients(ms, GatedProduct(silu, mul), pre, up)
    assert np.array_equal(mine[0], theirs[0])
    assert all(np.array_equal(a, b) for a, b in zip(mine[1], theirs[1]))
    assert np.abs(mine[1][0]).max() > 0 and np.abs(mine[1][1]).max() > 0


def test_the_gated_swiglu_equals_mindformers_swiglu_bit_for_bit(ms):
    from mindformers.parallel_core.training_graph.activation import SwiGlu

    from mf_memopt.models.mcore.compress_cells import GatedSwiGlu

    rng = np.random.default_rng(1)
    x = ms.Tensor(rng.standard_normal((32, 2, 48, 2)).astype("float32") * 3)   # (seq, batch, ffn, gate|up)
    theirs = _values_and_gradients(ms, SwiGlu(), x)
    mine = _values_and_gradients(ms, GatedSwiGlu(SwiGlu()), x)
    assert np.array_equal(mine[0], theirs[0]) and np.array_equal(mine[1][0], theirs[1][0])
