"""CPU stand-ins for what an mcore MoE layer needs and MindSpore 2.9's CPU backend lacks.

    owner cell                      attribute         primitive                     stand-in
    TopKRouter (mlp.router)         topk, afb_topk,   TopkExt                       CPUTopk
                                    tc_topk
    FFNGroupedGEMM (mlp.experts)    morphed_forward   Morph (token dispatcher,      CPUDenseExperts
                                                      GroupedMatmul, Swiglu)
    FFNGroupedGEMM (mlp.experts)    swiglu            Swiglu                        CPUSwiglu
    TopKRouter with an expert       assign_add,       AssignAdd (expert_load,       CPUDeferredAssignAdd
    bias or gbs_aux_loss            assignadd         fi_accu)                      (see below)
    (becomes a CPUTopKRouter)       add_accu          AddExt (reads fi_accu)        CPUReadOnlyAdd

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

A router with an expert bias adds each step's expert load to `expert_load` in its forward
(`assign_add`), one with `gbs_aux_loss` its expert counts to `fi_accu` (`assignadd`). Such a router
becomes a `CPUTopKRouter` when the model is built on CPU (the same cell, parameters and marks, and
MindFormers' behaviour; its stand-ins hold MindFormers' operators and are in place before the plan,
so the apply report and `verify` name the cells that run), and the CPU training step
(`runtime/cpu_wrapper.py`, 6.) takes the additions over, because a Parameter written in the forward
cut the CPU step into a forward and a backward kernel graph and full recompute of the tiny
DeepSeek-V3 saved 23% of the pool peak instead of 30%. The router's `assign_add` and `assignadd`
then write nothing (`CPUDeferredAssignAdd`); the router computes what they would add with
MindFormers' own operators from the expert indices it returns, and `HandToStep` gives that as the
Parameter's gradient in the aux loss's backward; the step adds the gradient after the optimizer. The
aux loss's gradient is a constant, so MindSpore runs that backward as early as it can, at the start
of the backward: the value's last operator is kept rather than recomputed (a float per expert), or
fetching it pulled every recomputed layer's forward there (92.12 MiB with full recompute instead of
65.15). `fi_accu` is also read by the aux loss (`add_accu`, `CPUReadOnlyAdd`): that read passes no
gradient to it, so the step's gradient for `fi_accu` is the addition alone; `fi_accu` is not
trained, so no trained Parameter's gradient changes. Outputs, gradients and additions are
bit-identical to MindFormers' router (tests/mindspore/test_router_additions.py).
"""

from __future__ import annotations

from typing import Any

from mindformers.parallel_core.training_graph.transformer.moe.router import TopKRouter
from mindspore import nn, ops
from mindspore.common import dtype as mstype
from mindspore.ops import operations as P
from mindspore.ops.auto_generate import MeanExt, SiLU

from .stand_in import StandIn


class CPUTopk(StandIn):
    """`TopkExt()(x, k, dim=-1, largest=True, sorted=True) -> (values, int64 indices)` along the last axis."""

    def __init__(self):
        super().__init__()
        self.topk, self.cast = P.TopK(sorted=True), P.Cast()

    def construct(self, x, k, dim=-1, largest=True, sorted=True):  # noqa: A002 (the primitive's own names)
        values, indices = self.topk(x, k)
        return values, self.cast(indices, mstype.int64)


class CPUSwiglu(StandIn):
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


class CPUDenseExperts(StandIn):
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


class CPUDeferredAssignAdd(nn.Cell):
    """The router's `AssignAdd()(variable, value)` (MindFormers' own operator, marks and all): it writes, until the
    CPU step takes the addition over (`deferred`); then it writes nothing (MindFormers discards the result)."""

    def __init__(self, add: Any):
        super().__init__()
        self.add = add
        self.deferred = False

    def construct(self, variable, value):
        if self.deferred:
            return value
        return self.add(variable, value)


class CPUReadOnlyAdd(nn.Cell):
    """The gbs router's `add_accu(fi_accu, dp_mean_fi)` (MindFormers' own operator, marks and all) with no gradient
    to `fi_accu`, so that the only gradient a step can take for `fi_accu` is what the router hands it. `fi_accu` is
    not trained: no step takes its gradient otherwise, and no trained Parameter's gradient changes."""

    def __init__(self, add: Any):
        super().__init__()
        self.add = add

    def construct(self, accumulated, value):
        return self.add(ops.stop_gradient(accumulated), value)


class HandToStep(nn.Cell):
    """`(loss, value, variable) -> loss`, whose backward gives `value` as the gradient of `variable`: how what a router
    adds to a Parameter during the forward reaches the training step, which takes the Parameters' gradients too and
    adds them after the optimizer (`CPUTopKRouter`). The loss and its gradient pass unchanged."""

    def construct(self, loss, value, variable):
        return loss

    def bprop(self, loss, value, variable, out, dout):
        return dout, ops.zeros_like(value), value


class CPUTopKRouter(TopKRouter):
    """MindFormers' TopKRouter whose Parameter additions in the forward the CPU training step can take over.

    Until `defer_parameter_additions()` it is MindFormers' router. After it, its `assign_add` (the expert load, with
    an expert bias) and `assignadd` (`fi_accu`, with gbs_aux_loss) write nothing, and the router hands what they
    would have added to the step through the aux loss's backward (`HandToStep`): the same numbers, computed by
    the same operators from the same expert indices (MindFormers' `_update_expert_load`, and its
    `_expert_load_balancing` up to `dp_mean_fi`)."""

    deferring = False

    def prepare_deferral(self) -> None:
        """Install the stand-ins (at build, before the plan: the apply report and `verify` see the final cells)."""
        for name in self._additions():
            setattr(self, name, CPUDeferredAssignAdd(self._primitives.pop(name)))
        if self.moe_router_load_balancing_type == "gbs_aux_loss":
            self.add_accu = CPUReadOnlyAdd(self._primitives.pop("add_accu"))
        self.hand_to_step = HandToStep()
        if self.moe_router_enable_expert_bias:
            self.load_mean = MeanExt()          # afb_reduce_mean's twin, kept (not recomputed) for the backward
            self.load_mean.recompute(False)

    def defer_parameter_additions(self) -> list:
        """Stop the router's own additions; the Parameters the step must add their gradients to, in order."""
        additions = self._additions()
        for name in additions:
            getattr(self, name).deferred = True
        self.deferring = bool(additions)
        return [getattr(self, parameter) for parameter in additions.values()]

    def _additions(self) -> dict[str, str]:
        """{the adding operator: the Parameter it adds to}."""
        found = {}
        if self.moe_router_enable_expert_bias:
            found["assign_add"] = "expert_load"
        if self.moe_router_load_balancing_type == "gbs_aux_loss":
            found["assignadd"] = "fi_accu"
        return found

    def construct(self, inputs):
        expert_index, router_coeff, router_aux_loss = TopKRouter.construct(self, inputs)
        if self.deferring:
            if self.moe_router_enable_expert_bias:
                router_aux_loss = self.hand_to_step(router_aux_loss, self._expert_load_added(expert_index),
                                                    self.expert_load)
            if self.moe_router_load_balancing_type == "gbs_aux_loss":
                router_aux_loss = self.hand_to_step(router_aux_loss, self._fi_accu_added(expert_index), self.fi_accu)
        return expert_index, router_coeff, router_aux_loss

    def _expert_load_added(self, expert_index):
        """MindFormers' `_update_expert_load` up to its AssignAdd: what it adds to `expert_load`."""
        expert_index = self.reshape(expert_index, (expert_index.shape[0], -1))
        expert_mask = self.onehot_2d(expert_index, self.expert_dim, self.on_value, self.off_value)
        expert_mask = self.cast(expert_mask, mstype.float32)
        expert_load_data = self.reduce_mean(expert_mask, 1)
        return self.load_mean(expert_load_data, 0)

    def _fi_accu_added(self, top_indices):
        """MindFormers' `_expert_load_balancing` up to `dp_mean_fi`: what it adds to `fi_accu`."""
        top_indices = self.reshape(top_indices, (self.dp, -1, top_indices.shape[2]))
        top_indices = self.reshape(top_indices, (top_indices.shape[0], -1))
        mask = self.onehot_aux(top_indices, self.expert_dim, self.on_value, self.off_value)
        mask = self.cast(mask, mstype.float32)
        fi = self.reduce_mean_aux_3d(mask, 1)
        return self.reduce_mean_dp(fi.reshape(self.dp, -1), 0)


def deferrable_routers(network: Any) -> list[str]:
    """Make every MindFormers TopKRouter that adds to a Parameter in its forward a `CPUTopKRouter` (the same cell and
    parameters, MindFormers' operators and marks; it behaves as MindFormers' until the CPU step calls
    `defer_parameter_additions`); their paths."""
    found = []
    for path, cell in network.cells_and_names():
        if type(cell) is TopKRouter and (cell.moe_router_enable_expert_bias
                                         or cell.moe_router_load_balancing_type == "gbs_aux_loss"):
            cell.__class__ = CPUTopKRouter
            cell.prepare_deferral()
            found.append(path)
    return found
