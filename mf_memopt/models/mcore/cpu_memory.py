"""The memory-pool peak of an mcore training step on MindSpore 2.9's CPU backend (mf_memopt's CPU step).

The same runtime as the legacy Llama's (`models/llama/cpu_memory.py`), so nearly the same moments:
the first attention of the forward with every weight copy made, the end of the forward (the loss), the
backward of each layer's MLP and of its attention, and the optimizer (`estimate/cpu_step.py`; a dense
model's one parameter at a time, `_dense_optimizer`). What differs is the layer (`inventory.py`), the fused
linears (linear_qkv, linear_fc1), and the model-level tensors, read off the allocation logs of float32 and
float16-compute Qwen3 and TeleChat3 layers:

* the loss holds five b*s*v tensors (the one-hot labels as int32, the float32 logits' cast, the
  log-softmax's difference, its exponential and the product);
* the attention mask exists once, as b*n*s*s float32 and as b*n*s*s booleans (the stand-in's
  broadcast), and the causal mask as b*s*s bytes and s*s booleans;
* the cos/sin tables (s x head_dim, float32);
* the final norm keeps x*rstd, its output and the early 2*x; the embedding output is kept as the
  first norm's input (float32 compute);
* the graph's constant kernel inputs, a pool block each (`_graph_constants`).

Not modelled: the last layer's MLP in the forward of a float16-compute model, whose weight casts are
made just before their matmul (the sweep's c26 peaks there, 4.8% above the estimate); the planner's
search has no term for a moment whose weight copies depend on the layers after it.
"""

from __future__ import annotations

from ...estimate.cpu_step import (
    EARLY_VOCABULARY,
    GRAPH_CONSTANTS,
    WeightCopies,
    float32_model,
    gradients_after,
    held_bytes,
    held_in_backward,
    held_in_mlp_backward,
    one_update,
    optimizer_steps,
    rebuilds,
    stage_params,
    weight_copies,
)
from ...estimate.effects import LayerEffect
from ...estimate.inventory import ATTENTION_OUTPUT, FP32, Dims, dims
from ...estimate.memory import StagePeak
from ...estimate.pool_log import POOL_ALIGNMENT as POOL_BLOCK
from ...estimate.spec import ModelSpec, ParallelSpec

_QKV, _PROJ = "self_attention.linear_qkv.matmul", "self_attention.linear_proj.matmul"
_FC1, _FC2 = "mlp.linear_fc1.matmul", "mlp.linear_fc2.matmul"
_ATTENTION = ("self_attention.", "input_layernorm.")
_NORMS = ("input_layernorm.", "pre_mlp_layernorm.")
_MTP_INPUTS = ("enorm.", "hnorm.", "concat", "eh_proj.")     # an MTP layer's tensors made before its transformer layer


def cpu_checkpoints(model: ModelSpec, effects: list[LayerEffect]) -> list[StagePeak]:
    """Every moment `cpu_pool_peak` compares; per-layer ones carry their layer."""
    kept = [effect.bytes() - effect.bytes("recomputed") for effect in effects]  # nothing is swapped on CPU
    tables = _tables(model, effects)
    copies = _weight_copies(model, effects)
    dim = dims(model, ParallelSpec())
    candidates = [_first_attention(model, effects, copies, tables), *_end_of_forward(model, effects, kept, copies,
                                                                                     tables)]
    for index in reversed(range(len(effects))):
        candidates.append(StagePeak(kind="backward", layer=index, components={
            "activations kept": sum(kept[:index]),
            "weight copies": sum(copies.backward[:index + 1]) - _read_before_mlp_backward(copies, index),
            "gradients so far": gradients_after(model, index, len(effects)),
            "model-level tensors": 2 * FP32 * dim.bsh_full + tables,
            "layer working set": held_in_mlp_backward(effects[index], _NORMS, _ATTENTION)
                                 - _spent(effects[index])
                                 + _mlp_backward(_unit_model(model, index, len(effects)), dim) + copies.late[index]
                                 + effects[index].backward_extra}))
        if rebuilds(effects[index], *_NORMS):
            candidates.append(_whole_layer_attention(model, effects, index, kept, copies, tables))
        else:
            candidates.append(_attention_backward(model, effects, index, kept, copies, tables))
    # AdamW's early decayed copy: two vocabulary-sized products even when the embeddings are tied (one matrix
    # read by two cells; memory-pool trace of the sweep's c03)
    constants = {GRAPH_CONSTANTS: _graph_constants(effects)}
    early = {EARLY_VOCABULARY: 2 * FP32 * model.vocab * model.hidden, **constants}
    candidates = [StagePeak(kind=candidate.kind, layer=candidate.layer, components={**candidate.components, **early})
                  for candidate in candidates]
    if model.param_bytes == FP32 and not (model.experts or model.mla):
        candidates.extend(_dense_optimizer(model, len(effects), constants))
    elif _mixed(model):
        candidates.extend(_mixed_optimizer(model, len(effects), early))
    else:
        candidates.extend(optimizer_steps(model, len(effects), early))
    return candidates


def _end_of_forward(model: ModelSpec, effects: list[LayerEffect], kept: list[int], copies: WeightCopies,
                    tables: int) -> list[StagePeak]:
    """The loss: five b*s*v float32 tensors (`cpu_checkpoints`' module docstring). With MTP layers the runtime runs
    the main loss, and its backward through the shared output head, before the MTP layers' transformer layers, so
    the forward ends in two moments:

    * the main loss: its five b*s*v tensors and the MTP loss's one-hot labels and their float32 cast (read only the
      labels), beside the decoder's activations and what the first MTP layer made before its transformer layer
      (its embedding, norms, concatenation and eh_proj's output);
    * the MTP loss: every activation, the MTP loss's five b*s*v tensors, the main loss's three others freed, and
      per loss before it the output head's weight gradient (v x h) and its input's (b*s x h), float32.

    Memory-pool traces of the DeepSeek-V3 fresh2 set's q05 (vocabulary 4096, 8 MiB a b*s*v tensor): 146.16 MiB at
    the main loss's `_NLLLoss/Mul`, 152.37 at the MTP loss's (147.06 and 153.71 counted here); the one moment
    counted before, every activation beside seven b*s*v tensors, said 164.21 (+7.8%). q05 at vocabulary 8192 peaks
    at the main loss: 214.16 measured, 215.06 here, 232.21 before; its MTP loss 208.37 measured, 209.71 here. The
    fresh set's g05, the held-out set's k03 and k06 and configs/deepseek3_tiny.yaml run in the same order. Traced
    with one MTP layer: a loss per MTP layer before the last, and the forward copies of the MTP layers' matmuls
    (none in a float32 model) at the main loss, follow the same reading, not a trace."""
    bsv = FP32 * model.batch * model.seq * model.vocab
    shared = {"weight copies": copies.backward_total, "model-level tensors": _forward_model_level(model) + tables}
    if not model.mtp_layers:
        return [StagePeak(kind="end of the forward (loss)", components={
            "activations kept": sum(kept), **shared, "loss tensors": 5 * bsv})]
    decoder = len(effects) - model.mtp_layers
    first = effects[decoder]
    inputs = sum(item.saved.nbytes for item in first.tensors
                 if item.fate != "recomputed" and item.saved.path.startswith(_MTP_INPUTS))
    unread = sum(sum(read.values()) for read in copies.forward[decoder:])   # the MTP matmuls' forward copies
    head = model.mtp_layers * FP32 * (model.vocab + model.batch * model.seq) * model.hidden
    return [StagePeak(kind="end of the forward (loss)", components={
                "activations kept": sum(kept[:decoder]) + inputs, **shared,
                "weight copies": shared["weight copies"] + unread, "loss tensors": (5 + 2 * model.mtp_layers) * bsv}),
            StagePeak(kind="end of the forward (the MTP loss)", components={
                "activations kept": sum(kept), **shared, "loss tensors": 5 * bsv,
                "output head's gradients (the main loss's backward)": head})]


def _graph_constants(effects: list[LayerEffect]) -> int:
    """The graph's constant kernel inputs (scalars, flags and shape tuples: `Default/data-N`), made as the step
    starts and held to its end, one pool block of 512 bytes each: 65 for the model, 28 per decoder layer, 4 more
    for a layer whose MLP is recomputed and 6 for one whose attention is (its ops run twice). Counted in the
    allocation logs of a TeleChat3 of hidden 64 at 2, 5 and 8 layers, with no, MLP, attention and full recompute
    and two step forms (the step form does not change the count); Qwen3 and TeleChat3 layers of hidden 256 match
    it within 7 blocks. They matter only on a tiny model: the fresh set's d14 (3.12 MiB) holds 257 (128.5 KiB)."""
    per_layer = (28 + 4 * rebuilds(effect, "mlp.") + 6 * rebuilds(effect, "self_attention.") for effect in effects)
    return POOL_BLOCK * (65 + sum(per_layer))


def _read_before_mlp_backward(copies: WeightCopies, index: int) -> int:
    """The copies of layer `index` its MLP backward has read by its peak (the activation's backward): linear_fc2's,
    whose backward matmul has run, and the parameter copies (TensorMove) of a recomputed linear_fc1, which the
    recompute has cast again; its new float32 cast (`WeightCopies.late`) is what linear_fc1's backward reads.
    A float32 model's TensorMove of the whole layer is not split by matmul, and stays counted.

    Memory-pool traces of the sweep's c06 and the fresh3 set's g07 (float16 compute, float32 parameters, the MLP
    recomputed): at the SwiGlu's backward of the last layer, of that layer's MLP copies only linear_fc1's late
    float32 cast is alive (the estimate counted linear_fc2's copy and both TensorMoves too: c06 +6.1%, g07 +9.1%).
    g07 without recompute: 22.14 MiB measured at that moment, 22.38 estimated without linear_fc2's copy (23.16
    with it)."""
    by_path = copies.backward_by_path[index]
    return by_path.get(_FC2, 0) + (by_path.get(_FC1, 0) if copies.late_by_path[index].get(_FC1, 0) else 0)


def _spent(effect: LayerEffect) -> int:
    """The layer's tensors its own backward has replaced by its peak (an MoE block's gate and up, split into the
    halves `_mlp_backward` counts, and its weighted product), kept or rebuilt."""
    return sum(held_bytes(item) for item in effect.tensors if item.saved.spent_early and item.fate != "swapped")


def _mlp_backward(model: ModelSpec, dim: Dims) -> int:
    """What the MLP's backward makes beyond the kept tensors: a dense MLP's gate and up gradients; an MoE block's
    rebuilt Swiglu (both halves of the gate and up, the sigmoid of SiLU and of its backward, SiLU's output), the
    Swiglu's gradient and the weighted product's, for every expert and token (allocation logs of the tiny Qwen3-MoE
    and the MoE sweep's m03: seven (tokens, E, F) tensors at a layer's MLP backward)."""
    if not model.experts:
        return 2 * FP32 * dim.bsf
    return (6 * model.compute_bytes + FP32) * dim.bs * model.experts * model.moe_ffn


def _mixed(model: ModelSpec) -> bool:
    """float16 compute with float32 parameters and norms, the mixed setting the mcore sweep measured."""
    return model.compute_bytes != FP32 and model.param_bytes == FP32 and model.layernorm_bytes == FP32


def _mixed_optimizer(model: ModelSpec, layers: int, early: dict[str, int]) -> list[StagePeak]:
    """AdamW on an MoE or multi-latent model with float16 compute and float32 parameters: every parameter's selected
    gradient and its update's output (two float32 tensors, as in `optimizer_steps`), and one more float32 tensor of
    the largest weight, vocabulary matrices included, the update being finished (fitted on the dense sweep's c05,
    c07 and c19 before `_dense_optimizer` replaced it there; not traced on these layers)."""
    return [StagePeak(kind="optimizer step", components={
        "optimizer working set": 2 * FP32 * stage_params(model, layers),
        "update being finished": FP32 * max(*model.largest_params(), model.vocab * model.hidden), **early})]


def _dense_optimizer(model: ModelSpec, layers: int, constants: dict[str, int]) -> list[StagePeak]:
    """AdamW on a dense model with float32 parameters (float32 or float16 compute, norms in either: MindFormers' mcore
    norms keep their weight in `params_dtype`, `transformer/norm.py`), as the runtime orders it: every
    parameter's selected gradient and the first product of its update (two float32 tensors each) are made first;
    then the updates run one parameter at a time in parameter order (the embedding; each layer's linear_proj,
    linear_qkv, linear_fc1, linear_fc2; ...), each making three temporaries of its size (two TensorMove copies of
    its moments and a product) and freeing its tensors when done. The peak is the update of some parameter p: the
    two tensors of every parameter not yet updated, p's three on top. The embedding's update (the first) and layer
    0's (those of later layers and lm_head come with less left to update) are the moments.

    Memory-pool traces of the held-out fresh4 set's j02 (float32, linear_fc1 2.3 times the vocabulary matrix):
    77.90 MiB at the embedding's update, 72.83 at layer 0's linear_qkv, 77.33 at its linear_fc1; j06 (float32):
    152.79 at layer 0's linear_qkv, linear_proj done; fresh5's n11 (float16 compute): 79.99 at layer 0's
    linear_fc1, its three temporaries on top. The rules they replace, three temporaries of the largest weight on
    top of every parameter's two tensors (float32) and one (float16 compute), agree where the vocabulary matrix
    is the largest and missed these by +7.2%, +8.4% and -9.8%. With float16 norms the runtime orders it the same
    (memory-pool trace of the wide3 set's h06, float16 compute and norms: 109.02 MiB at the embedding's update, every
    parameter's two float32 tensors, both decayed vocabulary products and the update's `Add`; the side-by-side rule
    said 119.95, +10.0%)."""
    params = stage_params(model, layers)
    qkv, proj, fc1, fc2, *_ = model.layer_param_list()
    embedding = model.vocab * model.hidden
    # layer 0's updates in order, each with the parameters updated before it (the embedding first)
    layer0 = [(embedding, proj), (embedding + proj, qkv), (embedding + proj + qkv, fc1),
              (embedding + proj + qkv + fc1, fc2)]
    finished, size = max(layer0, key=lambda update: one_update(params, *update, constants).peak)
    return [one_update(params, 0, embedding, constants),
            one_update(params, finished, size, constants, "largest update of the optimizer")]


def _attention_backward(model: ModelSpec, effects: list[LayerEffect], index: int, kept: list[int],
                        copies: WeightCopies, tables: int) -> StagePeak:
    """Inside layer `index`'s attention backward: the MLP's gradients exist, and the CPU stand-in's backward
    computes the probabilities again: the scores less their maximum, the softmax and the gradient product, three
    float32 b*n*s*s tensors. A recomputed attention also rebuilds the float32 mask and its boolean broadcast
    (memory-pool trace of the fresh set's d01: 44 MiB of b*n*s*s tensors at 16 heads of seq 256). A float32 layer
    without flash attention peaks when the stand-in rebuilds the scores, v and the output already read and freed
    (`_read_before_scores_rebuilt`)."""
    dim = dims(model, ParallelSpec())
    rebuilt = rebuilds(effects[index], "self_attention.")
    unit = _unit_model(model, index, len(effects))
    fc1, fc2, *_ = unit.mlp_params()
    working = held_in_backward(effects[index], _ATTENTION) + copies.late[index] \
        + (3 * FP32 + ((FP32 + 1) if rebuilt else 0)) * dim.scores
    copies_held, gradients = sum(copies.backward[:index + 1]), model.gradient_bytes * (fc1 + fc2)
    if _float32_plain_attention(model, rebuilt):
        linears = _linears(unit)
        working += FP32 * dim.q - _read_before_scores_rebuilt(effects[index], model, dim)
        copies_held -= sum(FP32 * size for path, size in linears.items() if not _before_scores(path))
        gradients += model.gradient_bytes * linears[_PROJ]
    return StagePeak(kind="attention backward", layer=index, components={
        "activations kept": sum(kept[:index]),
        "weight copies": copies_held,
        "gradients so far": gradients_after(model, index, len(effects)) + gradients,
        "model-level tensors": 2 * FP32 * dim.bsh_full + tables,
        "layer working set": working})


def _float32_plain_attention(model: ModelSpec, rebuilt: bool) -> bool:
    """A float32 dense layer (no experts, no multi-latent attention) without flash attention whose attention is not
    recomputed: the case `_read_before_scores_rebuilt` was traced on (Qwen3 and TeleChat3)."""
    return float32_model(model) and not (model.flash_attention or model.mla or model.experts or rebuilt)


def _read_before_scores_rebuilt(effect: LayerEffect, model: ModelSpec, dim: Dims) -> int:
    """What a float32 attention without flash attention has read and freed when the stand-in's backward rebuilds its
    scores (`cpu_kernels._Attention.bprop`): linear_proj's backward has read its input, then the stand-in's backward
    has run `dO @ v^T` (v's last reader) and `dO * out` (the output's), before `q @ k^T`; the output's gradient
    (b*n*s*d, float32) is alive instead, and so are q and k. The layer's TensorMove copies of linear_proj, linear_fc1
    and linear_fc2 are freed by their backward matmuls, and linear_proj's gradient exists (`_attention_backward`).

    Memory-pool trace of the wide3 set's h08 (TeleChat3, float32, 12 heads of 36 on a hidden of 72, seq 171, no
    recompute): 29.13 MiB at layer 1's rebuilt scores (`_Attention/Mul-op1`), its q and k (`Transpose-op0`, `-op1`)
    and the output's gradient (`Grad_Transpose/Transpose-op1`) alive, v, the output and linear_proj's input freed;
    counted as alive they made the estimate 31.08 MiB (+6.7%)."""
    proj_input = sum(held_bytes(item) for item in effect.tensors if item.saved.role == ATTENTION_OUTPUT)
    return model.compute_bytes * dim.q + FP32 * dim.q + proj_input      # v, the output, linear_proj's input


def _first_attention(model: ModelSpec, effects: list[LayerEffect], copies: WeightCopies, tables: int) -> StagePeak:
    """Layer 0's attention scores in the forward, while every weight copy made at the start of the step still exists.

    The casts and TensorMove copies read only parameters, so the runtime makes them all as the step starts
    (`WeightCopies`); by layer 0's scores only the copies of its attention's input projections (linear_qkv, or
    the multi-latent attention's down and up projections) have been read and freed. On top: the CPU stand-in's
    float32 BatchMatMul output and its scaled copy (two b*n*s*s tensors), the embedding output and its float32
    copy for the residual, q, k and v in the compute dtype and a float32 repeat of the key for the grouped
    BatchMatMul, and the loss's one-hot labels with their float32 cast, which read only the labels (memory-pool
    trace of the fresh2 set's e13: 137.0 MiB at the recomputed attention's Mul, 101.6 MiB of it weight copies).
    With tied embeddings and float16 compute, AdamW's early decay of the one matrix reads it through a TensorMove
    copy (the parameter dtype) made next to these copies and freed by the decay's second Mul (memory-pool trace of
    the MoE wide set's x10: 84.33 MiB at AdamW's `Mul-op0`, the copy `Default/TensorMove-op24` alive, every weight
    copy, both decayed products and the loss's one-hot with its cast).
    """
    dim, c = dims(model, ParallelSpec()), model.compute_bytes
    read = sum(size for path, size in copies.forward[0].items() if _before_scores(path))
    tied = model.tie_embeddings and model.compute_bytes != FP32
    tied_copy = {"tied matrix's copy for AdamW's decay (TensorMove)": model.param_bytes * model.vocab * model.hidden
                 } if tied else {}
    return StagePeak(kind="first attention of the forward (weight copies made)", components={
        **tied_copy,
        "weight copies": copies.forward_total - read + copies.backward_total,
        "model-level tensors": tables + (c + FP32) * dim.bsh_full
                               + 2 * FP32 * model.batch * model.seq * model.vocab,
        "layer working set": 2 * FP32 * dim.scores + c * (dim.q + 2 * dim.kv) + FP32 * dim.q})


def _whole_layer_attention(model: ModelSpec, effects: list[LayerEffect], index: int, kept: list[int],
                           copies: WeightCopies, tables: int) -> StagePeak:
    """A recompute that spans layer `index` (its norms are rebuilt) runs as one segment when its backward starts,
    before the MLP's backward (`held_in_mlp_backward`), so the attention's two b*n*s*s moments are apart, and the
    layer's "attention backward" checkpoint is the larger of them (one checkpoint of that kind per layer, as the
    planner's search reads them, `auto/limits.py`):

    * the attention rebuilt, its scores computed: the layer's weight copies all made (every copy held for its
      backward and the forward copies of the matmuls run again, but the attention's input projections', read
      before the scores), no MLP gradient yet, the rebuilt mask (float32 and booleans) and two float32 b*n*s*s
      tensors, the stand-in's BatchMatMul output and its scaled copy;
    * the attention's backward, after the MLP's: every matmul but the attention's input projections has read its
      copies, the MLP's gradients exist, the stand-in's backward works on three float32 b*n*s*s tensors, and the
      mask rebuilt with the layer was read by its forward and freed.

    Memory-pool trace of the fresh2 set's e13 (layer 1: 123.7 MiB at the rebuilt attention, 107.8 MiB in its
    backward; the single moment `_attention_backward` counts both in would say 158.0 MiB).
    """
    dim = dims(model, ParallelSpec())
    fc1, fc2, *_ = _unit_model(model, index, len(effects)).mlp_params()
    attention = held_in_backward(effects[index], _ATTENTION)
    shared = {"activations kept": sum(kept[:index]), "model-level tensors": 2 * FP32 * dim.bsh_full + tables}
    read = sum(size for path, size in copies.late_by_path[index].items() if _before_scores(path))
    # what the matmuls that have run their backward no longer hold; a float32 model's TensorMove copies of those
    # matmuls' weights go with them (memory-pool trace of the fresh3 set's g02, float32, fully recomputed: at layer
    # 1's attention backward only linear_qkv's copy of that layer is left, 40.41 MiB measured; counting the whole
    # layer's TensorMove said 43.22)
    spent = sum(size for path, size in copies.backward_by_path[index].items() if not _before_scores(path))
    if float32_model(model):
        spent += sum(FP32 * size for path, size in _linears(_unit_model(model, index, len(effects))).items()
                     if not _before_scores(path))
    before = sum(copies.backward[:index])
    moments = [StagePeak(kind="attention backward", layer=index, components={
                "activations kept": shared["activations kept"],
                "weight copies": before + copies.backward[index] + copies.late[index] - read,
                "gradients so far": gradients_after(model, index, len(effects)),
                "model-level tensors": shared["model-level tensors"],
                "layer working set": attention + (2 * FP32 + FP32 + 1) * dim.scores + effects[index].backward_extra}),
            StagePeak(kind="attention backward", layer=index, components={
                "activations kept": shared["activations kept"],
                "weight copies": before + copies.backward[index] - spent,
                "gradients so far": gradients_after(model, index, len(effects)) + model.gradient_bytes * (fc1 + fc2),
                "model-level tensors": shared["model-level tensors"],
                "layer working set": attention + 3 * FP32 * dim.scores})]
    return max(moments, key=lambda moment: moment.peak)


def _before_scores(path: str) -> bool:
    """The attention's input projections: their matmuls run before the scores (all of the attention's but
    linear_proj)."""
    return path.startswith("self_attention.") and path != _PROJ


def _weight_copies(model: ModelSpec, effects: list[LayerEffect]) -> WeightCopies:
    return weight_copies(model, effects, lambda index: _linears(_unit_model(model, index, len(effects))), _rerun)


def _unit_model(model: ModelSpec, index: int, units: int) -> ModelSpec:
    """The model of the step's layer `index` of `units`: a decoder layer's kind, or an MTP layer's (MoE)."""
    return model.layer_model(index) if index < units - model.mtp_layers else model


def _linears(model: ModelSpec) -> dict[str, int]:
    """A layer's attention and MLP linears: matmul path -> weight elements (an MoE layer's experts' first and
    second weights stand where a dense layer's linear_fc1 and linear_fc2 are)."""
    fc1, fc2, *_ = model.mlp_params()
    if model.mla:
        names = (["linear_q_down_proj", "linear_q_up_proj"] if model.q_lora else ["linear_q_proj"]) + [
            "linear_kv_down_proj", "linear_kv_up_proj", "linear_proj"]
        attention = {f"self_attention.{name}.matmul": size
                     for name, size in zip(names, model.mla_attention_params())}
    else:
        qkv, proj, *_ = model.layer_param_list()
        attention = {_QKV: qkv, _PROJ: proj}
    return {**attention, _FC1: fc1, _FC2: fc2}


def _rerun(path: str, effect: LayerEffect) -> bool:
    """Whether the backward runs this Linear again: linear_fc2's output feeds only the residual add, so it never
    runs again; linear_proj's only when the norm after the residual add is rebuilt too (as in the Llama)."""
    if path not in effect.recomputed_ops or path == _FC2:
        return False
    if path == _PROJ:
        return rebuilds(effect, "pre_mlp_layernorm.")
    return True


def _tables(model: ModelSpec, effects: list[LayerEffect]) -> int:
    """cos/sin tables, the attention masks (float32 and the stand-in's booleans), the causal mask, per-token
    label masks.

    The causal mask is kept as uint8 (b*s*s bytes): with flash attention `CausalMaskGenerate` casts it; without,
    the core attention casts it in each layer (`FlashAttention.construct`), so where a recompute runs that cast
    again the mask is held in the compute dtype instead (memory-pool traces of a fully recomputed float32 Qwen3
    with and without flash attention: a (2, 128, 128) float32 `CausalMaskGenerate/Sub` in place of the
    (2, 1, 128, 128) uint8 `Cast`; the MoE wide2 set's f02 likewise)."""
    b, s, n = model.batch, model.seq, model.heads
    rotary = model.qk_rope if model.mla else model.head_dim      # multi-latent attention rotates qk_rope wide
    recast = not model.flash_attention and any(rebuilds(effect, "self_attention.") for effect in effects)
    causal = (model.compute_bytes if recast else 1) * b * s * s
    return (2 * FP32 * s * rotary + (FP32 + 1) * b * n * s * s + causal + s * s
            + 3 * FP32 * b * s)


def _forward_model_level(model: ModelSpec) -> int:
    """The embedding output (float32 compute) and the final norm's tensors at the loss."""
    bsh = dims(model, ParallelSpec()).bsh_full
    if model.compute_bytes == FP32:
        return FP32 * bsh + 3 * FP32 * bsh          # embedding; x*rstd, output, early 2*x
    return (3 * FP32 + model.compute_bytes + FP32) * bsh   # input cast, x*rstd, 2*x, output (c), its float32 copy
