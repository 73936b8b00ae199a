"""What every family's CPU training step holds the same way: gradients, AdamW's phases, its early decay.

MindSpore 2.9's CPU backend, under the launcher's CPU step (`runtime/cpu_wrapper.py`): the optimizer runs
after the whole backward pass, as graph ops. These terms depend on the parameters (`ModelSpec.layer_param_list`
says how a family lays them out) and the dtypes, not on how a decoder layer computes; each family's
`cpu_checkpoints` adds them to its own moments of the step. Read off the memory-pool traces named below.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .effects import LayerEffect, TensorFate
from .inventory import FP32
from .memory import StagePeak
from .spec import ModelSpec

# MindFormers' AdamW starts each update with param * (1 - lr * weight_decay), which reads only the
# parameter and the learning rate. The runtime computes it for the embedding and lm_head as soon
# as the step starts and holds it to the end (memory-pool traces of s01, s08, s21, s26, p8).
EARLY_VOCABULARY = "decayed vocabulary parameters (AdamW, computed early)"
GRAPH_CONSTANTS = "graph constants (scalar and shape inputs, a 512-byte block each)"


def float32_model(model: ModelSpec) -> bool:
    return model.param_bytes == FP32 and model.compute_bytes == FP32


def vocabulary_params(model: ModelSpec) -> int:
    return model.vocab * model.hidden * (1 if model.tie_embeddings else 2)


def held_in_backward(effect: LayerEffect, prefixes: tuple[str, ...] = ("",)) -> int:
    """A layer's tensors during its backward: kept ones as kept, rebuilt ones at their rebuilt size."""
    return sum(held_bytes(item) for item in effect.tensors if item.saved.path.startswith(prefixes))


def held_in_mlp_backward(effect: LayerEffect, norms: tuple[str, ...], attention: tuple[str, ...]) -> int:
    """A layer's tensors while its MLP backward runs. A recomputed attention (paths under `attention`) is rebuilt
    when the gradient reaches it, after the MLP backward, unless the recompute spans the whole layer (its `norms`
    are rebuilt too: one segment, rebuilt at the start of the layer's backward) (Llama traces of k07, p5)."""
    if rebuilds(effect, *norms):
        return held_in_backward(effect)
    return sum(held_bytes(item) for item in effect.tensors
               if not (item.fate == "recomputed" and item.saved.path.startswith(attention)))


def stage_params(model: ModelSpec, layers: int) -> int:
    """Every parameter of a single-stage model: its `layers` layers (the decoder's, then the MTP layers: see
    `ModelSpec.unit_params`), the final norm, the vocabulary matrices."""
    return sum(model.unit_params(layers)) + model.hidden + vocabulary_params(model)


def _unit_gradients(model: ModelSpec, layers: int, p: int, norm: int) -> list[int]:
    """Bytes of each layer's gradients: `p` per weight, `norm` per norm weight."""
    return [p * (params - norms) + norm * norms
            for params, norms in zip(model.unit_params(layers), model.unit_norm_params(layers))]


def held_bytes(item: TensorFate) -> int:
    if item.fate == "recomputed" and item.saved.rebuilt_nbytes is not None:
        return item.saved.rebuilt_nbytes
    return item.saved.nbytes


def rebuilds(effect: LayerEffect, *prefixes: str) -> bool:
    """Whether the layer's recompute rebuilds some tensor whose path starts with one of `prefixes`."""
    return any(item.fate == "recomputed" and item.saved.path.startswith(prefixes) for item in effect.tensors)


def gradients_after(model: ModelSpec, index: int, layers: int) -> int:
    """Gradients held when layer `index`'s backward starts: later layers, lm_head, final norm."""
    h, p = model.hidden, model.gradient_bytes
    norm = p if model.clip_grad else model.layernorm_bytes
    return sum(_unit_gradients(model, layers, p, norm)[index + 1:]) + p * model.vocab * h + norm * h


def gradient_set(model: ModelSpec, layers: int) -> int:
    """Bytes of one gradient per parameter (the parameter's dtype; the RmsNorm weights in L). Tied embeddings have
    one matrix and one gradient at the optimizer, with clip-grad or without (memory-pool traces of tied Qwen3 and
    Qwen3-MoE configs and a tied Llama; the mcore sweep's d02, once read as tied with two, is a TeleChat3, whose
    training model never ties)."""
    h, p, norm = model.hidden, model.param_bytes, model.layernorm_bytes
    matrices = 1 if model.tie_embeddings else 2
    return sum(_unit_gradients(model, layers, p, norm)) + p * matrices * model.vocab * h + norm * h


def optimizer_steps(model: ModelSpec, layers: int, early: dict[str, int],
                    finished_first: int | None = None) -> list[StagePeak]:
    """MindFormers' AdamW as graph ops, after clip-grad and the overflow select.

    Float32 models: every parameter has its gradient as the overflow select returns it (the select's zeros are
    never allocated: a scalar broadcast) and its update's output (AdamW's `Mul`, a new parameter-sized tensor held
    until the whole optimizer has run), and the matrix being updated three float32 temporaries (two products and
    a sum): a tied matrix has five vocabulary-sized tensors alive, an untied pair seven (25 traces of float32
    Qwen3, Qwen3-MoE, TeleChat3 and Llama configs, tied and not, with clip-grad and without).

    Other dtype settings: the runtime runs the updates side by side, one op of every parameter after another, so
    at the peak each parameter has two float32 tensors alive (its float32 cast and the first product of its moment
    update), whatever the parameter dtype, and the embedding's and lm_head's decayed copies made at the start of
    the step are still held. On top, with float16 compute, the larger of clip-grad's last sum (the `ClipGradNorm`
    `Add`, a float32 tensor of the embedding's size) and the float32 copies (TensorMove) of the two moments of the
    parameter being finished; without float16 compute, those copies (traces of s19, s21, s25, t10). With float16
    parameters and float32 RmsNorm weights (`half_parameters_float32_norms`) it is clip-grad's last sum, whatever
    the compute dtype and whether clip-grad is on or not (a10 of the `wide2` set: 44.11 MiB at the `ClipGradNorm`
    `Add` of the embedding, float32 compute, every parameter's `Cast` and `Mul` alive; fresh10's x06, x07, x14,
    fresh11's y14, wide2's a06).

    An order in which clip-grad ended before the updates' second tensors were made, for that dtype setting (traces
    of s01, s26, s27, q07, t14), was the CPU training step before its loss-scale update moved after the optimizer
    (04b5038): the sets measured before it (the sweep, fresh to fresh8) were re-measured where this term decides
    their peak (benchmarks/data/sweep_*_peaks.json, each such entry with its own `launcher`).

    `finished_first` (float16 compute with clip-grad, the updates first; a family that knows its update order
    passes it, others keep the moment above): the parameters whose updates are done when the largest weight's
    starts. The updates then run one parameter at a time in parameter order, each making float32 copies of its
    two moments (TensorMove) and a product (`Mul`), then freeing its tensors, so the moment above is split in two
    (legacy Llama traces of w05, s19, s25, h05, t12): the end of clip-grad (every parameter's clipped float32
    gradient, the `Select`, and its first product, the `Mul`, with clip-grad's last sum, the `ClipGradNorm` `Add`
    of the embedding's size) and the largest weight's update (its three float32 temporaries on top, the
    parameters finished before it holding nothing any more, the `early` vocabulary-sized tensors among them: both
    are made for the embedding, which is updated first, and freed by its update (wide5's c09: two float32 (520, 552)
    `Mul`s made as the step starts and freed inside the embedding's update, none alive at the peak, the largest
    weight's update; the same with a vocabulary of 2000)).
    """
    if float32_model(model):
        largest = max([*model.largest_params(), model.vocab * model.hidden])
        gradients = gradient_set(model, layers)
        return [StagePeak(kind="optimizer step", components={
            "gradients": gradients, "updated parameters (AdamW outputs)": gradients,
            "optimizer outputs": 3 * FP32 * largest})]
    params = stage_params(model, layers)
    embedding = model.vocab * model.hidden
    moments = 2 * max(model.largest_params())
    if finished_first is not None and model.clip_grad and model.compute_bytes != FP32:
        return [StagePeak(kind="end of clip-grad", components={
                    "optimizer working set": 2 * FP32 * params, "clip-grad's last sum": FP32 * embedding, **early}),
                _one_at_a_time(model, params, finished_first)]
    if (model.compute_bytes != FP32 and embedding > moments) or half_parameters_float32_norms(model):
        finishing = {"clip-grad's last sum": FP32 * embedding}
    else:
        finishing = {"update being finished": FP32 * moments}
    return [StagePeak(kind="optimizer step", components={
        "optimizer working set": 2 * FP32 * params, **finishing, **early})]


def _one_at_a_time(model: ModelSpec, params: int, finished_first: int, kind: str = "optimizer step") -> StagePeak:
    """The largest weight's update when the updates run one parameter at a time after clip-grad (`one_update`).
    Traced with float32 and float16 parameters (w05, s19, s25, h05, t12; fresh10's x00: 260.59 MiB at the Add of
    layer 0's gate projection, the embedding and layer 0's attention weights done)."""
    return one_update(params, finished_first, max(model.largest_params()), {}, kind)


def one_update(params: int, finished: int, size: int, extra: dict[str, int], kind: str = "optimizer step") -> StagePeak:
    """One parameter's update (`size` elements) when AdamW updates one parameter at a time: its three float32
    temporaries (a Cast, the Mul and the Add of its moment update, or two TensorMove copies and a Mul) on top of
    every other parameter's clipped gradient and first product (two float32 tensors each), the `finished`
    elements updated before it freed; `extra` (bytes) is alive throughout."""
    return StagePeak(kind=kind, components={
        "optimizer working set": 2 * FP32 * (params - finished),
        "update being finished": 3 * FP32 * size, **extra})


def half_parameters_float32_norms(model: ModelSpec) -> bool:
    """Float16 parameters with float32 RmsNorm weights (the legacy Llama's defaults): the optimizer step's last
    moment holds clip-grad's last sum, never a moment's copies (`optimizer_steps`); observed in traces."""
    return model.param_bytes == 2 and model.layernorm_bytes == FP32


@dataclass(frozen=True, slots=True)
class WeightCopies:
    """Copies of the Linear weights that MatMul needs on CPU (it has no float16 kernel).

    A cast whose input is a parameter runs as soon as the step starts (nothing else holds it
    back); each copy lives until the MatMul that reads it. Per Linear weight of n elements:

    * compute float16, parameters float16: a float32 copy for the forward's x @ W, one
      for the backward's dy @ W, and one for the forward run again by a recompute;
    * compute float16, parameters float32: the model casts W to float16 and MatMul casts
      that to float32: the forward's copy is made at the start; the backward's too, unless the
      Linear is recomputed (then its float16 cast is recomputed and the copy made late);
    * compute float32, parameters float16: the model's own float32 cast serves the
      forward and the backward, held until the backward (until the forward if recomputed);
    * float32 throughout: no cast, but a copy of the parameter itself (TensorMove), because the
      backward reads the parameter after the optimizer may have assigned it; held until the
      layer's backward (lm_head's until its backward);
    * a recomputed Linear with a cast: also a TensorMove copy of the parameter, in its dtype,
      until the layer's backward (the recompute casts it again).
    Which matmuls a recompute runs again is the family's to say (`rerun`): a recompute re-runs only
    what some backward op reads.
    """

    forward: tuple[dict[str, int], ...]    # per decoder layer and matmul path: read and freed by that matmul
    backward: tuple[int, ...]    # per decoder layer: held until that layer's backward
    backward_by_path: tuple[dict[str, int], ...]   # the same by matmul path (a float32 model's TensorMove of the
    #                                                whole layer is in `backward` only)
    late_by_path: tuple[dict[str, int], ...]   # per decoder layer and matmul path: made during its backward
    #                                            (recomputed casts), one at a time
    lm_head: int                 # held until the start of the backward
    lm_head_forward: int         # lm_head's forward copy, read and freed by its matmul

    @property
    def late(self) -> tuple[int, ...]:
        return tuple(sum(made.values()) for made in self.late_by_path)

    @property
    def forward_total(self) -> int:
        return sum(sum(read.values()) for read in self.forward) + self.lm_head_forward

    @property
    def backward_total(self) -> int:
        return sum(self.backward) + self.lm_head


def weight_copies(model: ModelSpec, effects: list[LayerEffect], sizes: Callable[[int], dict[str, int]],
                  rerun: Callable[[str, LayerEffect], bool]) -> WeightCopies:
    """The copies of every Linear weight (`sizes(index)`: the matmul paths of the step's layer `index` -> their
    weights' elements) and of the lm_head; `rerun` says whether a layer's backward runs a matmul again."""
    forward, backward, backward_by_path, late_by_path = [], [], [], []
    units = model.unit_params(len(effects))
    for index, effect in enumerate(effects):
        read, kept, rebuilt = {}, {}, {}
        for path, size in sizes(index).items():
            again = rerun(path, effect)
            # the model's own weight cast is inside the Linear: a recompute scope holding the Linear
            # casts the weight again for the backward even where the matmul is not run again
            recast = model.weight_cast and (again or path in effect.recompute_scoped)
            to_forward, to_backward = copy_bytes(model, again or recast)
            read[path] = to_forward * size
            kept[path] = to_backward * size
            rebuilt[path] = 0
            if recast:
                # the recompute casts the parameter again, after the optimizer may have assigned it:
                # the runtime keeps a copy (TensorMove) from the start (traces of m02, p5, q05, s19,
                # t13); a matmul run again holds its new cast through the layer's backward; the MLP's down
                # projection's and the attention's output projection's is read by their one backward matmul and freed
                kept[path] += model.param_bytes * size
                rebuilt[path] = FP32 * size if again else 0
        held = sum(kept.values())
        if float32_model(model):
            held += FP32 * units[index]
        forward.append(read)
        backward.append(held)
        backward_by_path.append(kept)
        late_by_path.append(rebuilt)
    head_forward, head_backward = copy_bytes(model, False)
    if float32_model(model):
        head_backward = FP32        # lm_head's TensorMove, held until lm_head's backward (traces of k01, k15)
    head = model.vocab * model.hidden
    return WeightCopies(forward=tuple(forward), backward=tuple(backward), backward_by_path=tuple(backward_by_path),
                        late_by_path=tuple(late_by_path), lm_head=head_backward * head,
                        lm_head_forward=head_forward * head)


def copy_bytes(model: ModelSpec, recomputed: bool) -> tuple[int, int]:
    """Bytes per weight element held until the forward and until the backward."""
    if model.compute_bytes == 2 and not model.weight_cast:
        return FP32, FP32 * (2 if recomputed else 1)
    if model.compute_bytes == 2:
        return FP32, 0 if recomputed else FP32
    if model.weight_cast:
        return (FP32, 0) if recomputed else (0, FP32)
    return 0, 0
