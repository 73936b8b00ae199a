"""Peak device memory of one pipeline stage in a training step.

Ascend (device memory, analytic):
    peak = parameters + gradients (+ accumulation buffer) + optimizer states
         + in_flight x (kept activations of the stage's layers + model-level activations)
         + swapped activations still on the device at the forward/backward turn
         + the backward working set (a recomputed layer rebuilt, gradient temporaries, the loss)
  in_flight: micro-batches a 1F1B stage holds at its peak, min(micro_batch_num, pp - stage);
  interleaved: ((pp - stage - 1) * 2 + (chunks - 1) * pp + 1) chunk-sized units
  (Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
  Megatron-LM", SC'21, section 2.2).


CPU (the MindSpore memory-pool peak of the CPU launcher): the largest of the moments of the step
that the model's family names (`ModelFamily.cpu_checkpoints`), each the bytes alive then.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .effects import LayerEffect
from .inventory import FP32, dims
from .spec import ModelSpec, OptimizerSpec, ParallelSpec
from .transfer import LayerTransfer

if TYPE_CHECKING:
    from ..models.family import ModelFamily


STATIC = ("parameters", "gradients", "optimizer states", "gradients so far", "optimizer outputs", "weight copies",
          "updated parameters (AdamW outputs)",
          "decayed vocabulary parameters (AdamW, computed early)", "optimizer working set", "update being finished",
          "gradient casts", "clip-grad's last sum", "graph constants (scalar and shape inputs, a 512-byte block each)")
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
    """Micro-batches of activations a stage holds at its peak, in units of the whole stage."""
    if parallel.pipeline == 1:
        return 1.0
    if chunks == 1:
        return float(min(parallel.micro_batches, parallel.pipeline - stage))
    units = (parallel.pipeline - stage - 1) * 2 + (chunks - 1) * parallel.pipeline + 1
    return min(parallel.micro_batches * chunks, units) / chunks


def stage_parameters(model: ModelSpec, parallel: ParallelSpec, layers: Sequence[int], first: bool, last: bool) -> int:
    """The parameters one device of a stage holds: its decoder layers (`layers`, by index: dense first layers and
    MoE layers differ), the embedding on the first stage, the final norm, the output head and the MTP layers on
    the last. Tensor parallelism splits the matrices, expert parallelism the routed experts; norms are whole."""
    t = parallel.tensor

    def on_device(params: int, norms: int, experts: int) -> int:
        return (params - norms - experts) // t + experts // parallel.expert + norms

    vocab = model.vocab * model.hidden // (1 if parallel.vocab_emb_dp else t)
    params = sum(on_device(spec.layer_params, spec.norm_params, spec.expert_params)
                  for spec in map(model.layer_model, layers))
    if first:
        params += vocab
    if last:
        params += model.hidden + (0 if model.tie_embeddings and first else vocab)
        params += model.mtp_layers * on_device(model.mtp_params, model.mtp_norm_params, model.expert_params)
        if model.mtp_layers and not first and not model.tie_embeddings:
            params += vocab         # the MTP layers embed the shifted tokens with the first stage's embedding
    return params


def ascend_peak(model: ModelSpec, parallel: ParallelSpec, optimizer: OptimizerSpec, *, params: int,
                effects: list[LayerEffect], transfers: list[LayerTransfer], factor: float, first: bool,
                last: bool) -> StagePeak:
    dim, c = dims(model, parallel), model.compute_bytes
    accumulation = params * model.param_bytes if parallel.micro_batches > 1 or parallel.grad_accumulation > 1 else 0
    # the last stage's final norm input, its statistics and the logits, once more for each MTP layer's own head
    heads = 1 + model.mtp_layers
    model_level = (c * dim.bsh if first else 0) + (heads * (c * dim.bsh + FP32 * dim.bs + FP32 * model.batch
                                                            * model.seq * model.vocab // parallel.tensor)
                                                   if last else 0)
    rebuilt = max((effect.bytes("recomputed") for effect in effects), default=0)
    loss = 2 * FP32 * model.batch * model.seq * model.vocab // parallel.tensor if last else 0
    return StagePeak(kind="start of the backward", components={
        "parameters": params * model.param_bytes,
        "gradients": params * model.param_bytes + accumulation,
        "optimizer states": params * optimizer.state_bytes // (parallel.data if parallel.optimizer_shard else 1),
        # each Linear casts its weight to the compute dtype when the parameters' dtype differs; the backward
        # reads the copy
        "weight copies": params * model.compute_bytes if model.weight_cast else 0,
        "activations kept": round(factor * (sum(effect.bytes("kept") for effect in effects) + model_level)),
        "swapped, still on device": sum(effect.bytes("swapped") for effect, transfer in zip(effects, transfers)
                                        if transfer.on_device_at_turn),
        "backward working set": max(rebuilt + 2 * c * dim.bsf, loss),
    })


def cpu_pool_peak(family: ModelFamily, model: ModelSpec, effects: list[LayerEffect]) -> StagePeak:
    """The largest of the family's checkpoints of a CPU training step; every term in the config's dtypes."""
    return max(family.cpu_checkpoints(model, effects), key=lambda candidate: candidate.peak)
