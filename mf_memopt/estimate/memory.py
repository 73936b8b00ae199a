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

CPU (the MindSpore 2.9 memory-pool peak that `benchmarks/run.py --only calibrate` measures):
parameters, optimizer moments and the input batch are host tensors, not in the pool;
nn.AdamWeightDecay updates in parameter order, so every gradient waits for the end of the
backward; its CPU kernel allocates three outputs per update. The peak is the largest of
    end of forward:   sum_j S_j + M_fwd + 4*e*b*s*v           (the loss holds four b*s*v tensors)
    backward of i:    sum_{j<i} S_j + G(i) + M_bwd + S_all(i) + 2*e*b*s*f
    optimizer step k: e * sum_{j>=k} p_j + 3*e*p_k
with S_j the kept tensors of layer j, S_all(i) all of layer i's tensors (rebuilt if
recomputed), G(i) the gradients already computed (layers after i, lm_head, final norm),
M_fwd = e*(4*b*s*h + 2*s*d + 3*b*s), M_bwd = e*(2*b*s*h + 2*s*d + 3*b*s), plus e*b*s*s for
the causal mask when some attention is recomputed (it is kept as a recompute input).
"""

from __future__ import annotations

from dataclasses import dataclass

from .effects import LayerEffect
from .inventory import FP32, dims
from .spec import ModelSpec, OptimizerSpec, ParallelSpec
from .transfer import LayerTransfer


STATIC = ("parameters", "gradients", "optimizer states", "gradients so far", "optimizer outputs")
ACTIVATIONS = ("activations kept", "swapped, still on device", "model-level tensors")


@dataclass(frozen=True, slots=True, kw_only=True)
class StagePeak:
    checkpoint: str                     # the moment of the step the peak is at
    components: dict[str, int]          # bytes; they add up to the peak

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


def stage_parameters(model: ModelSpec, parallel: ParallelSpec, layers: int, first: bool, last: bool) -> int:
    t = parallel.tensor
    matrices = model.layer_params - 2 * model.hidden
    vocab = model.vocab * model.hidden // (1 if parallel.vocab_emb_dp else t)
    params = layers * (matrices // t + 2 * model.hidden)
    if first:
        params += vocab
    if last:
        params += model.hidden + (0 if model.tie_embeddings and first else vocab)
    return params


def ascend_peak(model: ModelSpec, parallel: ParallelSpec, optimizer: OptimizerSpec, *, params: int,
                effects: list[LayerEffect], transfers: list[LayerTransfer], factor: float, first: bool,
                last: bool) -> StagePeak:
    dim, c = dims(model, parallel), model.compute_bytes
    accumulation = params * model.param_bytes if parallel.micro_batches > 1 or parallel.grad_accumulation > 1 else 0
    model_level = (c * dim.bsh if first else 0) + (c * dim.bsh + FP32 * dim.bs + FP32 * model.batch * model.seq
                                                   * model.vocab // parallel.tensor if last else 0)
    rebuilt = max((effect.bytes("recomputed") for effect in effects), default=0)
    loss = 2 * FP32 * model.batch * model.seq * model.vocab // parallel.tensor if last else 0
    return StagePeak(checkpoint="start of the backward", components={
        "parameters": params * model.param_bytes,
        "gradients": params * model.param_bytes + accumulation,
        "optimizer states": params * optimizer.state_bytes // (parallel.data if parallel.optimizer_shard else 1),
        "activations kept": round(factor * (sum(effect.bytes("kept") for effect in effects) + model_level)),
        "swapped, still on device": sum(effect.bytes("swapped") for effect, transfer in zip(effects, transfers)
                                        if transfer.on_device_at_turn),
        "backward working set": max(rebuilt + 2 * c * dim.bsf, loss),
    })


def cpu_pool_peak(model: ModelSpec, effects: list[LayerEffect]) -> StagePeak:
    e, dim = FP32, dims(model, ParallelSpec())
    kept = [effect.bytes() - effect.bytes("recomputed") for effect in effects]  # nothing is swapped on CPU
    attention_rebuilt = any(item.fate == "recomputed" and item.saved.path.startswith("attention.")
                            for effect in effects for item in effect.tensors)
    mask = e * model.batch * model.seq * model.seq if attention_rebuilt else 0
    tables = e * (2 * model.seq * model.head_dim + 3 * dim.bs) + mask
    candidates = [StagePeak(checkpoint="end of the forward (loss)", components={
        "activations kept": sum(kept), "model-level tensors": e * 4 * dim.bsh_full + tables,
        "loss tensors": 4 * e * model.batch * model.seq * model.vocab})]
    layer_params = model.layer_params
    for index in reversed(range(len(effects))):
        candidates.append(StagePeak(checkpoint=f"backward of layer {index}", components={
            "activations kept": sum(kept[:index]),
            "gradients so far": e * ((len(effects) - 1 - index) * layer_params + model.vocab * model.hidden
                                     + model.hidden),
            "model-level tensors": e * 2 * dim.bsh_full + tables,
            "layer working set": effects[index].bytes() + 2 * e * dim.bsf + effects[index].backward_extra}))
    candidates.append(_optimizer_step(model, len(effects)))
    return max(candidates, key=lambda candidate: candidate.peak)


def _optimizer_step(model: ModelSpec, layers: int) -> StagePeak:
    h = model.hidden
    params = [model.vocab * h, *model.layer_param_list() * layers, h, model.vocab * h]
    best, remaining = (0, 0), sum(params)
    for size in params:
        if FP32 * remaining + 3 * FP32 * size > sum(best):
            best = (FP32 * remaining, 3 * FP32 * size)
        remaining -= size
    return StagePeak(checkpoint="optimizer step", components={"gradients": best[0], "optimizer outputs": best[1]})
