"""MindFormers' training step (MFTrainOneStepCell) made to run on the CPU backend, with recompute intact.

Six things in MFTrainOneStepCell stop it from serving CPU training:

1. Its overflow check has only GPU and Ascend branches; on CPU it compiles NPUGetFloatStatusV2,
   which has no CPU kernel. Here the check is MindSpore's IsFinite path (all-reduced across
   data-parallel workers), which every backend runs.
2. It skips the optimizer on overflow with `if not overflow: optimizer(grads)`, a branch on a
   tensor. In graph mode that branch splits the step into control-flow subgraphs, and then the
   recompute copies no longer replace the kept activations: measured on the tiny Llama, full
   recompute raised the memory-pool peak from 77 to 95 MB with the branch and lowered it to
   35 MB without it (benchmarks/README.md, "Recompute under MindFormers' training step").
   Here the step has no branch: on overflow (or, with use_skip_data_by_global_norm, a global norm
   above the threshold) the gradients are replaced by zeros before the optimizer runs. The
   parameters then move only by the optimizer's own decay (AdamW's moments and weight decay)
   instead of not at all, and the step counter advances; the reported overflow flag is the same.

3. It updates a dynamic loss scale (`DynamicLossScaleUpdateCell`, also what MindFormers' template gives a
   YAML without `runner_wrapper`) before the optimizer. That assignment of the scale's Parameter makes
   MindSpore schedule every layer's recompute at the start of the backward, so the recomputed tensors
   of all layers are alive at once: on the step-form benchmark full recompute raised the pool peak from
   164 to 174 MiB. Here the scale is updated after the optimizer, from the same overflow flag (the
   gradients were unscaled with the scale read at the start, as in MindFormers): 143 and 55 MiB, as
   with a fixed scale (`benchmarks/README.md` (f2)).

4. For an mcore model it adds each step's separate losses (`print_separate_loss`, MindFormers' default)
   to their Parameters inside `grads_for_mcore`, before the optimizer. Those assignments wait for the
   loss, and the learning-rate schedule (control flow) after them, so the step is cut into a forward
   and a backward kernel graph and the forward's tensors stay alive to the end of the forward: full
   recompute of qwen3_tiny peaked at 47.9 MiB in the forward of its last layer (45.2 MiB with
   `mcore.backend.pure_morphs` alone). Here the separate losses are added after the optimizer, the
   Parameters hold the same values at the end of the step, and full recompute peaks at 33.5 MiB.

5. With `use_clip_grad: False` it returns None as the global norm. MindFormers compiles an mcore model's
   step in strict syntax (`MS_DEV_JIT_SYNTAX_LEVEL=0`), where a None output of a step with the learning-rate
   schedule's branches fails to compile on CPU ("Invalid abstract ... ValueNode<None>"). Here an mcore step
   without clip-grad returns the gradients' global norm, computed and not applied (the log says so).

6. An mcore MoE router adds to Parameters in its forward: to `expert_load` with an expert bias
   (`moe_router_enable_expert_bias`; TopkBiasBalanceCallback moves the bias by it after the step and zeroes it)
   and to `fi_accu` with `gbs_aux_loss` (later forwards read it until MFLossMonitor resets it after the step). A
   write in the forward puts the optimizer's read of its step counter, and with it the learning-rate schedule's
   branch, after the forward: the step is cut there into a forward and a backward kernel graph (the IR's
   graph_build files), and the forward's tensors the backward uses stay alive to the end of the forward. Memory-
   pool peaks of one step of configs/deepseek3_tiny.yaml: 100.16 MiB without recompute, 76.90 MiB with full
   recompute (23% less), 81.09 MiB with `mlp` recomputed. Here every such router (`CPUTopKRouter`,
   `models/mcore/moe_kernels.py`) writes nothing in the forward and hands what it would add to the step as that
   Parameter's gradient; the step takes those gradients with the weights' and adds them after the optimizer, so
   the Parameters hold MindFormers' values at the end of each step, where the callbacks read them, and the losses
   and trained parameters are bit-identical (tests/mindspore/test_router_additions.py). Peaks: 93.59, 65.15 (30%
   less) and 74.46 MiB; configs/qwen3_moe_tiny.yaml (gbs_aux_loss): 63.31 -> 63.30 MiB without recompute, 36.75 ->
   34.61 MiB with full recompute, 51.66 -> 51.64 MiB with `mlp`. The log says how many Parameters are added after
   the optimizer. Within a step only the forward reads them (`fi_accu`, which MindFormers too reads before adding
   to it), once: MindFormers resets gradient accumulation to 1 in stand-alone and data-parallel runs, the only ones
   CPU trains; its other readers are callbacks. Under any other training step the routers keep MindFormers' writes.

Everything else (loss scaling, clip-grad, schedule-driven learning rate, local norms, outputs)
is MindFormers' own code, inherited.
"""

from __future__ import annotations

from mindformers.tools.register import MindFormerModuleType, MindFormerRegister
from mindformers.wrapper import MFTrainOneStepCell
from mindspore import ParameterTuple, ops
from mindspore.common import dtype as mstype
from mindspore.nn.wrap.loss_scale import _ascend_grad_overflow, _grad_scale
from mindspore.ops import composite as C
from mindspore.ops import functional as F

CPU_WRAPPER = "CPUTrainOneStepCell"
REPLACES = "MFTrainOneStepCell"

_zero_if = ops.MultitypeFuncGraph("zero_if")


@_zero_if.register("Tensor", "Tensor")
def _zero_tensor_if(skip, grad):
    return ops.select(ops.broadcast_to(skip, grad.shape), ops.zeros_like(grad), grad)


_add_after = ops.MultitypeFuncGraph("add_after")


@_add_after.register("Tensor", "Tensor")
def _add_tensor(variable, value):
    return F.assign_add(variable, value)


def deferred_additions(network) -> list:
    """The Parameters whose additions during the forward the cells of `network` hand to the step (6.): every cell
    with a `defer_parameter_additions()` stops its own and names them."""
    found = []
    for _, cell in network.cells_and_names():
        defer = getattr(cell, "defer_parameter_additions", None)
        if callable(defer):
            found.extend(defer())
    return found


class CPUTrainOneStepCell(MFTrainOneStepCell):
    """MFTrainOneStepCell with an IsFinite overflow check and no branch around the optimizer."""

    def __init__(self, network, optimizer, *args, **kwargs):
        super().__init__(network, optimizer, *args, **kwargs)
        deferred = [] if self.use_legacy else deferred_additions(self.network)
        self.defers_additions = bool(deferred)
        self.weight_count = len(self.weights)
        self.deferred = ParameterTuple(deferred)
        self.grad_parameters = ParameterTuple([*self.weights, *deferred]) if deferred else self.weights
        if deferred:
            from ..apply.logs import LOGGER

            names = sorted({parameter.name.rsplit(".", 1)[-1] for parameter in deferred})
            LOGGER.info(f"{len(deferred)} Parameter(s) MindFormers' MoE routers add to during the forward "
                        f"({', '.join(names)}) are added after the optimizer instead, with the same values at the "
                        "end of each step, so that recompute keeps saving memory")

    def get_overflow_status(self, status, compute_output):
        return self._get_distributed_overflow_status_on_infnan_mode(_ascend_grad_overflow, compute_output)

    def construct(self, *inputs):
        scaling_sens = self.scale_sense
        losses = None
        additions = ()
        if self.use_legacy:
            loss, grads, grad_scale_factor = self.grads_for_legacy(scaling_sens, *inputs)
        else:
            loss, grads, grad_scale_factor, losses = self._mcore_grads(scaling_sens, *inputs)
            if self.defers_additions:
                grads, additions = grads[:self.weight_count], grads[self.weight_count:]
        grads = self.hyper_map(F.partial(_grad_scale, scaling_sens * grad_scale_factor), grads)
        if self.local_norm:
            local_norm, size = self.localnorm(grads)
            local_norm = self.concat(local_norm)
        grads = self.grad_reducer(grads)
        overflow = self.get_overflow_status(None, grads)
        global_norm = None
        if self.use_clip_grad:
            grads, global_norm = self.clip_grad_norm(grads)
        elif not self.use_legacy:
            _, global_norm = self.clip_grad_norm(grads)      # reported, not applied (5.)
        learning_rate = self._current_lr()
        if self.use_graceful_exit:
            grads = self.graceful_exit.exit_by_request(grads, self.init_param, self.exit_param)
        skip = overflow
        if self.use_skip_data_by_global_norm:
            skip = ops.logical_or(skip, global_norm >= self.global_norm_spike_threshold)
        grads = self.hyper_map(F.partial(_zero_if, skip), grads)
        updated = self.optimizer(grads)
        # The dynamic loss scale is updated after the parameters, from the same overflow flag: updated before
        # them (MindFormers' order) its Parameter assignment makes MindSpore run every layer's recompute at
        # the start of the backward, and full recompute then raised the pool peak (174 MiB against 164 MiB
        # without recompute on the step-form benchmark) instead of lowering it (55 MiB).
        overflow = F.depend(self.process_loss_scale(F.depend(overflow, updated)), updated)
        if self.print_separate_loss:
            loss = F.depend(loss, self._add_separate_losses(losses))
        if self.defers_additions:
            # what the MoE routers would have added during the forward, handed over as those Parameters' gradients
            # (6.): added after the parameters, as the loss scale and the separate losses
            loss = F.depend(loss, self.hyper_map(_add_after, self.deferred, F.depend(additions, updated)))
        loss = F.depend(loss, updated)
        if self.local_norm:
            return loss, overflow, scaling_sens, learning_rate, global_norm, local_norm, size
        return loss, overflow, scaling_sens, learning_rate, global_norm

    def _mcore_grads(self, scaling_sens, *inputs):
        """MindFormers' `grads_for_mcore` with the separate losses returned (lm, mtp, aux, indexer), not added."""
        if self.calculate_per_token_loss:
            numerator0, denominator0, numerator1, _, aux_loss, indexer_loss = self.network(*inputs)
            lm_loss = numerator0 / denominator0
            mtp_loss = numerator1 / denominator0
            aux_loss = aux_loss / denominator0
            indexer_loss = indexer_loss / denominator0
            loss = lm_loss + aux_loss + indexer_loss
            loss = loss + mtp_loss
            filled = self.cast(C.ones_like(numerator0) * F.cast(scaling_sens, F.dtype(numerator0)), mstype.float32)
            filled_zero = self.cast(self.zero_t * F.cast(scaling_sens, F.dtype(denominator0)), mstype.float32)
            grads = self.grad(self.network, self.grad_parameters)(*inputs, (filled, filled_zero, filled, filled_zero,
                                                                            filled, filled))
            grad_scale_factor = denominator0
        else:
            lm_loss, mtp_loss, aux_loss, indexer_loss = self.network(*inputs)
            loss = lm_loss + aux_loss + indexer_loss
            loss = loss + mtp_loss
            filled = C.ones_like(loss) * F.cast(scaling_sens, F.dtype(loss))
            grads = self.grad(self.network, self.grad_parameters)(*inputs, (filled, filled, filled, filled))
            grad_scale_factor = self.grad_scale_factor
        return loss, grads, grad_scale_factor, (lm_loss, mtp_loss, aux_loss, indexer_loss)

    def _add_separate_losses(self, losses):
        """What `grads_for_mcore` adds to the separate-loss Parameters, added after the optimizer."""
        lm_loss, mtp_loss, aux_loss, indexer_loss = losses
        done = F.assign_add(self.indexer_loss_parameter, indexer_loss / self.total_num_layers)
        done = F.depend(F.assign_add(self.aux_loss_parameter, aux_loss / self.aux_loss_scale
                                     if self.aux_loss_scale > 0 else 0), done)
        done = F.depend(F.assign_add(self.mtp_loss_parameter, mtp_loss), done)
        return F.depend(F.assign_add(self.lm_loss_parameter, lm_loss), done)

    def _current_lr(self):
        learning_rate = self.learning_rate
        if self.optimizer.dynamic_lr:
            if self.use_grouped_lr:
                learning_rate = self.default_lr(self.optimizer.global_step).reshape(())
                self.default_lr_parameter = learning_rate
                for group_id, current_lr in enumerate(self.grouped_lr):
                    self.grouped_lr_parameter[group_id] = current_lr(self.optimizer.global_step).reshape(())
            elif self.optimizer.is_group_lr:
                learning_rate = self.learning_rate[-1](self.optimizer.global_step).reshape(())
            else:
                learning_rate = self.learning_rate(self.optimizer.global_step).reshape(())
        return learning_rate


MindFormerRegister.register_cls(CPUTrainOneStepCell, MindFormerModuleType.WRAPPER)
