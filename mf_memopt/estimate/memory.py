"""Peak device memory of one pipeline stage in a training step.

Ascend (device memory, analytic), the larger of two moments:
    start of the backward = parameters (their shard with the parallel optimizer, and the gathered weights)
         + gradients (accumulated gradients under micro-batches) + optimizer states (none with optimizer.swap)
         + weight copies + in_flight x (kept activations of the stage's layers + model-level activations)
         + swapped activations still on the device at the forward/backward turn
         + the backward working set (a recomputed layer rebuilt, gradient temporaries, the loss)
    optimizer step (with accumulation) = parameters + accumulated gradients + the gradients being applied
         + optimizer states
  in_flight: micro-batches a 1F1B stage holds at its peak, min(micro_batch_num, pp - stage);
  interleaved: ((pp - stage - 1) * 2 + (chunks - 1) * pp + 1) chunk-sized units
  (Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
  Megatron-LM", SC'21, section 2.2).


CPU (the MindSpore memory-pool peak of the CPU launcher): the largest of the moments of the step
that the model's family names (`estimate.family.Estimator.cpu_checkpoints`), each the bytes alive then.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .effects import LayerEffect
from .inventory import FP32, dims
from .spec import ModelSpec, OptimizerSpec, ParallelSpec
from .transfer import LayerTransfer

STATIC = ("parameters", "gradients", "optimizer states", "accumulated gradients",
          "gathered weights (parallel optimizer)", "gradients being applied", "gradients so far", "optimizer outputs",
          "weight copies",
          "updated parameters (AdamW outputs)",
          "decayed vocabulary parameters (AdamW, computed early)", "optimizer working set", "update being finished",
          "clip-grad's last sum", "graph constants (scalar and shape inputs, a 512-byte block each)",
          "tied matrix's copy for AdamW's decay (TensorMove)")
ACTIVATIONS = ("activations kept", "swapped, still on device", "model-level tensors")


@dataclass(frozen=True, slots=True, kw_only=True)
class StagePeak:
    """One moment of a training step (`kind`, of decoder layer `layer` when it is a layer's) and what is alive."""

    kind: str                           # "end of the forward (loss)", "backward", ...
    components: dict[str, int]          # bytes; they add up to the peak
    layer: int | None = None            # the decoder layer a per-layer moment belongs to

    @property
    def key(self) -> tuple[str, int | None]:
        return self.kind, self.layer

    @property
    def checkpoint(self) -> str:
        """The moment as the reports print it: `backward of layer 3`."""
        return self.kind if self.layer is None else f"{self.kind} of layer {self.layer}"

    @property
    def peak(self) -> int:
        return sum(self.components.values())

    def part(self, kind: str) -> int:
        """Bytes of the `static`, `activations` or `working` (everything else) components."""
        names = {"static": STATIC, "activations": ACTIVATIONS}
        if kind == "working":
            return sum(value for name, value in self.components.items() if name not in STATIC + ACTIVATIONS)
        return sum(value for name, value in self.components.items() if name in names[kind])


def in_flight(stage: int, parallel: ParallelSpec, chunks: int) -> float:
    """Micro-batches of activations a stage holds at its peak, in units of the whole stage: the forward units
    MindSpore's pipeline scheduler runs on the stage before its first backward, plus the one whose backward comes
    first (C++ frontend, `pipeline_transformer/pipeline_scheduler.cc` and `seqpipe_scheduler.cc`).

    * 1F1B: min(m, pp - stage) micro-batches.
    * Interleaved 1F1B with v chunks (`InterleavedScheduler::Reorder`, its `bias` and `offset_ = m % pp`):
      (pp - stage - 1) x 2 + (v - 1) x (pp + m % pp) + 1 chunk-sized units, at most m x v.
    * seqpipe (`SeqpipeScheduler`: each micro-batch split into S = seq_split_num sequence chunks; its warm-up in
      `ExtractDataStruct`): (pp - stage - 1) x b + (v - 1) x c0 x S + S units of one chunk and one sequence chunk, at
      most m x v x S, where b is 1 without interleave and 2 with it, and c0 the micro-batches of its first cycle
      (`ComputeCycleList`: m when m < pp, else pp plus its share of the m % pp left over, spread over the m // pp
      cycles). With S = 1 and m a multiple of pp it is the interleaved count. A unit is counted as 1 / (v x S) of the
      stage's activations (see `seqpipe_note` for what that leaves out).
    """
    pp, m = parallel.pipeline, parallel.micro_batches
    if pp == 1:
        return 1.0
    if parallel.scheduler == "seqpipe":
        split = parallel.seq_split
        cycles, left = divmod(m, pp)
        first = m if m < pp else pp + -(-left // cycles)
        bias = 1 if chunks == 1 else 2
        units = (pp - stage - 1) * bias + (chunks - 1) * first * split + split
        return min(m * chunks * split, units) / (chunks * split)
    if chunks == 1:
        return float(min(m, pp - stage))
    units = (pp - stage - 1) * 2 + (chunks - 1) * (pp + m % pp) + 1
    return min(m * chunks, units) / chunks


def seqpipe_note(parallel: ParallelSpec) -> str | None:
    """What the estimate leaves out under seq pipe (seq_split_num > 1), said once in the report."""
    if parallel.scheduler != "seqpipe" or parallel.seq_split == 1 or parallel.pipeline == 1:
        return None
    return (f"seq pipe (seq_split_num {parallel.seq_split}): the micro-batches in flight are MindSpore's seqpipe "
            "scheduler's, each sequence chunk counted as 1/seq_split_num of a micro-batch; its attention keeps the "
            "whole sequence's keys and values (MindFormers' key/value caches), which are counted at that share too, "
            "and the caches themselves are not counted")


@dataclass(frozen=True, slots=True)
class StageParams:
    """The parameters (elements) one device of a stage holds, by how they are split: matrices tensor parallelism
    splits, matrices every tensor-parallel rank holds whole (the embedding and output head with vocab_emb_dp), the
    routed experts (split by expert parallelism), and the norms (whole)."""

    split: int
    whole: int = 0
    experts: int = 0
    norms: int = 0

    @property
    def total(self) -> int:
        return self.split + self.whole + self.experts + self.norms

    def plus(self, other: StageParams, times: int = 1) -> StageParams:
        """These parameters and `times` times `other`'s, kind by kind."""
        return StageParams(split=self.split + times * other.split, whole=self.whole + times * other.whole,
                           experts=self.experts + times * other.experts, norms=self.norms + times * other.norms)

    def local(self, parallel: ParallelSpec) -> int:
        """What the device keeps between steps: with the parallel optimizer each sharded kind divided by its group
        (`shard_groups`); the norms stay whole (see `shard_groups`)."""
        split, whole, experts = shard_groups(parallel)
        return self.split // split + self.whole // whole + self.experts // experts + self.norms


def shard_groups(parallel: ParallelSpec) -> tuple[int, int, int]:
    """The parallel optimizer's group for tensor-split matrices, whole matrices and routed experts: the devices that
    hold the same slice of the parameter (MindSpore, `mindspore/context.py`, `parallel_optimizer_config`: "the
    data parallel group of each parameter"), capped by `optimizer_weight_shard_size` when it divides the group
    ("cannot be divided ... will not take effect"). A tensor-split matrix repeats over data parallel, a whole one
    over data x tensor parallel, a routed expert (held by `expert` of the data x tensor devices) over the rest.
    Parameters under `parallel_optimizer_threshold` KiB stay whole; the threshold is not read: the norms are taken
    as under it (a 7168-wide float32 norm is 28 KiB, MindSpore's default threshold 64 KiB) and every matrix as
    over it."""
    if not parallel.optimizer_shard:
        return 1, 1, 1
    size = parallel.optimizer_shard_size

    def capped(group: int) -> int:
        return size if 0 < size < group and group % size == 0 else group

    devices = parallel.data * parallel.tensor
    return capped(parallel.data), capped(devices), capped(max(1, devices // parallel.expert))


def stage_parameters(model: ModelSpec, parallel: ParallelSpec, layers: Sequence[int], first: bool, last: bool) -> int:
    """The parameters one device of a stage holds before any parallel-optimizer sharding (`stage_params`)."""
    return stage_params(model, parallel, layers, first, last).total


def stage_params(model: ModelSpec, parallel: ParallelSpec, layers: Sequence[int], first: bool,
                 last: bool) -> StageParams:
    """The parameters one device of a stage holds: its decoder layers (`layers`, by index: dense first layers and
    MoE layers differ), the embedding on the first stage, the final norm, the output head and the MTP layers on
    the last. Tensor parallelism splits the matrices, expert parallelism the routed experts; norms are whole."""
    t = parallel.tensor
    split = experts = norms = whole = 0

    def add(params: int, norm: int, expert: int) -> None:
        nonlocal split, experts, norms
        split += (params - norm - expert) // t
        experts += expert // parallel.expert
        norms += norm

    vocab = model.vocab * model.hidden // (1 if parallel.vocab_emb_dp else t)
    embeddings = 0
    for spec in map(model.layer_model, layers):
        add(spec.layer_params, spec.norm_params, spec.expert_params)
    if first:
        embeddings += vocab
    if last:
        norms += model.hidden
        embeddings += 0 if model.tie_embeddings and first else vocab
        for _ in range(model.mtp_layers):
            add(model.mtp_params, model.mtp_norm_params, model.expert_params)
        if model.mtp_layers and not first and not model.tie_embeddings:
            embeddings += vocab     # the MTP layers embed the shifted tokens with the first stage's embedding
    if parallel.vocab_emb_dp and t > 1:
        whole = embeddings          # every tensor-parallel rank holds the embedding and the head whole
    else:
        split += embeddings
    return StageParams(split=split, whole=whole, experts=experts, norms=norms)


def accumulates(parallel: ParallelSpec) -> bool:
    """The step accumulates gradients over micro-batches (pipeline stages or gradient accumulation)."""
    return parallel.micro_batches > 1 or parallel.grad_accumulation > 1


def ascend_peak(model: ModelSpec, parallel: ParallelSpec, optimizer: OptimizerSpec, *, params: StageParams,
                effects: list[LayerEffect], transfers: list[LayerTransfer], factor: float, first: bool,
                last: bool) -> StagePeak:
    """The larger of the stage's moments (`ascend_moments`)."""
    return max(ascend_moments(model, parallel, optimizer, params=params, effects=effects, transfers=transfers,
                              factor=factor, first=first, last=last), key=lambda moment: moment.peak)


def ascend_moments(model: ModelSpec, parallel: ParallelSpec, optimizer: OptimizerSpec, *, params: StageParams,
                   effects: list[LayerEffect], transfers: list[LayerTransfer], factor: float, first: bool,
                   last: bool) -> list[StagePeak]:
    """The stage's candidate peaks: the start of the backward (`_backward_moment`) and, when gradients are
    accumulated, the optimizer step (`_optimizer_moment`)."""
    backward = _backward_moment(model, parallel, optimizer, params=params, effects=effects, transfers=transfers,
                                factor=factor, first=first, last=last)
    if not accumulates(parallel):
        return [backward]
    return [backward, _optimizer_moment(model, parallel, optimizer, params)]


def _resident(model: ModelSpec, parallel: ParallelSpec, optimizer: OptimizerSpec,
              params: StageParams) -> dict[str, int]:
    """What lives on the device the whole step: the parameters (their shard with the parallel optimizer), the
    accumulated gradients (MindFormers' `MFPipelineWithLossScaleCell.accu_grads`, a zero clone of the parameters:
    whole unless `gradient_accumulation_shard` or `optimizer_level` level2/level3 split them like the weights) and
    the optimizer states (on the host with `optimizer.swap`)."""
    local = params.local(parallel)
    resident = {"parameters": local * model.param_bytes}
    if accumulates(parallel):
        split = parallel.accumulation_shard or parallel.optimizer_level in ("level2", "level3")
        kept = local if split and parallel.optimizer_shard else params.total
        resident["accumulated gradients"] = kept * model.param_bytes
    else:
        resident["gradients"] = params.total * model.param_bytes     # every gradient of the step, at its end
    resident["optimizer states"] = 0 if optimizer.swap else local * optimizer.state_bytes
    return resident


def _backward_moment(model: ModelSpec, parallel: ParallelSpec, optimizer: OptimizerSpec, *, params: StageParams,
                     effects: list[LayerEffect], transfers: list[LayerTransfer], factor: float, first: bool,
                     last: bool) -> StagePeak:
    """The start of the backward: the resident tensors, the parallel optimizer's gathered weights, the gradients
    (without accumulation: every gradient of the step; with it, a micro-batch's gradient is added into
    `accu_grads` as it is made), the weight copies and the activations in flight."""
    dim, c = dims(model, parallel), model.compute_bytes
    # the last stage's final norm input, its statistics and the logits, once more for each MTP layer's own head
    heads = 1 + model.mtp_layers
    model_level = (c * dim.bsh if first else 0) + (heads * (c * dim.bsh + FP32 * dim.bs + FP32 * model.batch
                                                            * model.seq * model.vocab // parallel.tensor)
                                                   if last else 0)
    # a layer's backward holds what it rebuilds and what its codec restores (`LayerEffect.backward_extra`)
    rebuilt = max((effect.bytes("recomputed") + effect.backward_extra for effect in effects), default=0)
    loss = 2 * FP32 * model.batch * model.seq * model.vocab // parallel.tensor if last else 0
    components = _resident(model, parallel, optimizer, params)
    # levels 1 and 2 of the parallel optimizer keep the forward's all-gathered weight for the backward; level3
    # gathers again before the backward instead (`mindspore/context.py`, `optimizer_level`)
    kept_gathered = parallel.optimizer_level != "level3"
    gathered = (params.total - params.local(parallel)) * model.param_bytes if kept_gathered else 0
    if gathered:
        components["gathered weights (parallel optimizer)"] = gathered
    components.update({
        # each Linear casts its weight to the compute dtype when the parameters' dtype differs; the backward
        # reads the copy
        "weight copies": params.total * model.compute_bytes if model.weight_cast else 0,
        "activations kept": round(factor * (sum(effect.bytes("kept") for effect in effects) + model_level)),
        "swapped, still on device": sum(effect.bytes("swapped") for effect, transfer in zip(effects, transfers)
                                        if transfer.on_device_at_turn),
        "backward working set": max(rebuilt + 2 * c * dim.bsf, loss),
    })
    return StagePeak(kind="start of the backward", components=components)


def _optimizer_moment(model: ModelSpec, parallel: ParallelSpec, optimizer: OptimizerSpec,
                      params: StageParams) -> StagePeak:
    """The optimizer step after accumulation: MindFormers' pipeline wrapper scales each accumulated gradient
    into a new tensor before zeroing `accu_grads` (`tensor_grad_scale_pipeline`; with the parallel optimizer,
    the reduce-scattered shard: `tensor_shard_grad_scale_pipeline`), and clip-grad needs all of them for the
    global norm before the optimizer runs: a second set of gradients, in the parameters' dtype."""
    components = _resident(model, parallel, optimizer, params)
    applied = params.local(parallel) if parallel.optimizer_shard else params.total
    components["gradients being applied"] = applied * model.param_bytes
    return StagePeak(kind="optimizer step", components=components)
