"""CPU stand-ins for what an mcore MoE layer needs and MindSpore 2.9's CPU backend lacks.

    owner cell                      attribute         primitive                     stand-in
    TopKRouter (mlp.router)         topk, afb_topk,   TopkExt                       CPUTopk
                                    tc_topk
    FFNGroupedGEMM (mlp.experts)    morphed_forward   Morph (token dispatcher,      CPUDenseExperts
                                                      GroupedMatmul, Swiglu)
    FFNGroupedGEMM (mlp.experts)    swiglu            Swiglu                        CPUSwiglu

The experts' Morph holds MindFormers' whole token dispatcher (SortExt, CumsumExt, AlltoAllV,
IndexSelect) and two GroupedMatmul calls; none of them runs on CPU. `CPUDenseExperts` takes the
same arguments (tokens, the router's probabilities and expert indices, both weights) and computes
what the dispatcher and the grouped matmuls compute, densely: every expert's FFN over every token,
then each token's output as the sum over its top-k experts of probability x expert output. A token
an expert does not serve gets weight 0, so its outputs and the weight gradients are those of the
sparse computation (up to summation order); its memory is not: the stand-in keeps the activations of
all E experts for every token where the sparse layer keeps top-k, and the CPU estimate prices that.

The experts' Swiglu is marked for recompute by MindFormers itself; `CPUDenseExperts` calls the
owner's `swiglu` stand-in, not a copy, so that mark and any pattern naming `mlp.experts.swiglu`
act on the operator that runs.
"""

from __future__ import annotations

from typing import Any

from mindspore import nn, ops
from mindspore.common import dtype as mstype
from mindspore.ops import operations as P
from mindspore.ops.auto_generate import SiLU


class CPUTopk(nn.Cell):
    """`TopkExt()(x, k, dim=-1, largest=True, sorted=True) -> (values, int64 indices)` along the last axis."""

    def __init__(self):
        super().__init__()
        self.topk, self.cast = P.TopK(sorted=True), P.Cast()

    def construct(self, x, k, dim=-1, largest=True, sorted=True):  # noqa: A002 (the primitive's own names)
        values, indices = self.topk(x, k)
        return values, self.cast(indices, mstype.int64)


class CPUSwiglu(nn.Cell):
    """`Swiglu()(x, dim) -> silu(a) * b`, a and b the first and second halves of x along the last axis."""

    def __init__(self):
        super().__init__()
        self.split, self.silu, self.mul = P.Split(-1, 2), SiLU(), P.Mul()

    def construct(self, x, dim=-1):
        a, b = self.split(x)
        return self.mul(self.silu(a), b)

    def carry_recompute(self) -> None:
        """Carry a recompute mark of the Swiglu primitive: its operators are marked, not the cell, so that its
        output is rebuilt in the backward as the primitive's would be. A recomputed cell's output is a checkpoint
        MindSpore keeps, even inside a recomputed layer: with the cell marked, every layer under full recompute kept
        its Swiglu output, E/k times a sparse layer's (allocation logs of the MoE sweep's m03)."""
        for primitive in (self.split, self.silu, self.mul):
            primitive.recompute()


class CPUDenseExperts(nn.Cell):
    """The experts' `morphed_forward(tokens, probs, routing_map, w1, w2, num_tokens_per_expert)`.

    tokens (1, N, h), probs and routing_map (1, N, k), w1 (E*h, 2F), w2 (E*F, h) -> (1, N, h):
    out[n] = sum_j probs[n, j] * FFN_{routing_map[n, j]}(tokens[n]), FFN_e(x) = swiglu(x @ w1_e) @ w2_e.

    Two matmuls over all experts at once: x @ [w1_0 | ... | w1_E-1] gives every expert's gate and up, and
    since FFN_e's last step is linear, each token's weight for expert e (its probability where e is among its
    top k, else 0) scales the Swiglu output before the second matmul, whose (E*F, h) weight is w2 as stored.
    MindFormers multiplies the probabilities after the second matmul: the same sum, in another order."""

    def __init__(self, owner: Any, num_experts: int, hidden_size: int, ffn_hidden_size: int):
        super().__init__()
        self.num_experts, self.hidden_size, self.ffn_hidden_size = num_experts, hidden_size, ffn_hidden_size
        # the owner's Swiglu stand-in, called here but not registered under this cell (see the module docstring)
        object.__setattr__(self, "_owner", owner)
        self.reshape, self.cast, self.transpose = P.Reshape(), P.Cast(), P.Transpose()
        self.fc1, self.fc2 = P.MatMul(), P.MatMul()
        self.one_hot, self.mul_probs, self.sum_topk = P.OneHot(), P.Mul(), P.ReduceSum(keep_dims=False)
        self.weigh = P.Mul()

    def construct(self, tokens, probs, routing_map, w1, w2, num_tokens_per_expert=None):
        experts, hidden, ffn = self.num_experts, self.hidden_size, self.ffn_hidden_size
        x = self.reshape(tokens, (-1, hidden))                                               # (N, h)
        w1 = self.reshape(self.transpose(self.reshape(w1, (experts, hidden, 2 * ffn)), (1, 0, 2)),
                          (hidden, experts * 2 * ffn))
        gate_up = self.reshape(self.fc1(x, w1), (-1, experts, 2 * ffn))                      # (N, E, 2F)
        activated = self._owner.swiglu(gate_up, -1)                                          # (N, E, F)
        top_k = routing_map.shape[-1]
        chosen = self.one_hot(self.reshape(routing_map, (-1, top_k)), experts,
                              ops.scalar_to_tensor(1.0, tokens.dtype), ops.scalar_to_tensor(0.0, tokens.dtype))
        weights = self.sum_topk(self.mul_probs(chosen, self.reshape(self.cast(probs, tokens.dtype),
                                                                     (-1, top_k, 1))), 1)    # (N, E)
        weighted = self.weigh(activated, self.reshape(weights, (-1, experts, 1)))
        out = self.fc2(self.reshape(weighted, (-1, experts * ffn)), w2)                      # (N, h)
        return self.reshape(out, tokens.shape)


def moe_stand_in(owner: Any, name: str, primitive: Any, path: str) -> nn.Cell | None:
    """The stand-in for one primitive of an MoE layer, or None when it is not one of them; raises ValueError
    naming the cell for a setting the stand-ins do not implement."""
    kind, owner_kind = type(primitive).__name__, type(owner).__name__
    if kind == "TopkExt":
        return CPUTopk()
    if kind == "Swiglu":
        return CPUSwiglu()
    if kind == "Morph" and name == "morphed_forward" and owner_kind == "FFNGroupedGEMM":
        config = owner.config
        refused = (("a token dispatcher other than alltoall", owner.moe_token_dispatcher_type != "alltoall"),
                   ("expert load printing or relocation",
                    bool(config.print_expert_load or config.enable_expert_relocation)),
                   ("expert parallelism", int(config.expert_model_parallel_size) > 1))
        for what, asked in refused:
            if asked:
                raise ValueError(f"{path}: {what} has no CPU stand-in for the MoE experts")
        return CPUDenseExperts(owner, int(owner.num_local_experts), int(owner.hidden_size),
                               int(owner.moe_ffn_hidden_size))
    return None
