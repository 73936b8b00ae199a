"""The memory-pool peak of a legacy Llama training step on MindSpore 2.9's CPU backend.

The MindSpore 2.9 memory-pool peak that `benchmarks/run.py --only calibrate` measures:
parameters, optimizer moments and the input batch are host tensors, not in the pool;
MindFormers' AdamW runs as graph ops after clip-grad, which needs every gradient, so the
optimizer starts when the backward ends; the runtime then interleaves the updates of all
parameters (`optimizer_steps`). The peak is the largest of
    end of forward:   sum_j S_j + M_fwd + 4*e*b*s*v           (the loss holds four b*s*v tensors)
    backward of i:    sum_{j<i} S_j + G(i) + M_bwd + S_all(i) + 2*e*b*s*f
    optimizer step:   float32 models: gradients + the overflow select's zeros + 3*4*p_max;
                      float16 params, float32 norms: max(4*P + 4*p_vocab + 4*V*h, 2*4*P) + 4*p_vocab;
                      other dtypes: 2*4*P + 4*p_vocab + 4*max(2*p_layer, [compute float16] V*h)
with S_j the kept tensors of layer j, S_all(i) all of layer i's tensors (rebuilt if
recomputed), G(i) the gradients already computed (layers after i, lm_head, final norm),
M_fwd = e*(4*b*s*h + 2*s*d + 3*b*s), M_bwd = e*(2*b*s*h + 2*s*d + 3*b*s), plus m*b*s*s for
the causal mask when some attention is recomputed (it is kept as a recompute input; m is
the compute dtype's bytes without flash attention, 1 with it: `inventory.cpu_mask_bytes`).
AdamW's decayed float32 copies of the embedding and lm_head (p_vocab) are computed at the start
of the step and held to its end. Weight copies: mixed-precision models cast each Linear weight to
float32 for CPU MatMul; a float32 model copies each decoder-layer parameter instead (the
optimizer assigns it in place); both are made at the start and freed by the last reader.
P counts every parameter; p_layer is the largest decoder-layer weight.
"""

from __future__ import annotations

from ...estimate.cpu_step import (
    EARLY_VOCABULARY,
    WeightCopies,
    gradients_after,
    held_in_backward,
    held_in_mlp_backward,
    optimizer_steps,
    rebuilds,
    vocabulary_params,
    weight_copies,
)
from ...estimate.effects import LayerEffect
from ...estimate.inventory import FP32, dims
from ...estimate.memory import StagePeak
from ...estimate.spec import ModelSpec, ParallelSpec
from .inventory import cpu_attention_model, cpu_mask_bytes, cpu_matmul_copies, linear_names, linear_ops


def cpu_checkpoints(model: ModelSpec, effects: list[LayerEffect]) -> list[StagePeak]:
    """Every moment `cpu_pool_peak` compares; per-layer ones carry their layer."""
    model = cpu_attention_model(model)
    kept = [effect.bytes() - effect.bytes("recomputed") for effect in effects]  # nothing is swapped on CPU
    tables = _cpu_tables(model, effects)
    sizes = dict(zip(linear_ops(model), model.layer_param_list()))
    copies = weight_copies(model, effects, lambda index: sizes, _rerun)
    candidates = [
        StagePeak(kind="first attention of the forward (weight copies made)", components={
            "weight copies": copies.forward_total + copies.backward_total, "model-level tensors": tables,
            "layer working set": _first_scores(model, effects)}),
        StagePeak(kind="end of the forward (loss)", components={
            "activations kept": sum(kept), "weight copies": copies.backward_total,
            "model-level tensors": _forward_model_level(model) + tables,
            "loss tensors": 4 * FP32 * model.batch * model.seq * model.vocab})]
    dim = dims(model, ParallelSpec())
    for index in reversed(range(len(effects))):
        candidates.append(StagePeak(kind="backward", layer=index, components={
            "activations kept": sum(kept[:index]),
            "weight copies": sum(copies.backward[:index + 1]),
            "gradients so far": gradients_after(model, index, len(effects)),
            "model-level tensors": 2 * model.compute_bytes * dim.bsh_full + tables,
            "layer working set": held_in_mlp_backward(effects[index], _NORMS, ("attention.",))
                                 + 2 * FP32 * dim.bsf + copies.late[index]
                                 + effects[index].backward_extra}))
        candidates.append(_attention_backward(model, effects, index, kept, copies, tables, sizes))
        candidates.append(_mlp_forward(model, effects, index, kept, copies, tables))
    early = {EARLY_VOCABULARY: FP32 * vocabulary_params(model)}
    candidates = [StagePeak(kind=candidate.kind, layer=candidate.layer, components={**candidate.components, **early})
                  for candidate in candidates]
    candidates.extend(optimizer_steps(model, len(effects), early, finished_first=_finished_first(model)))
    return candidates


def _finished_first(model: ModelSpec) -> int:
    """The parameters whose AdamW updates are done when the largest weight's starts: MindFormers updates the
    embedding, then each layer's weights in `layer_param_list` order (wq, wk, wv, wo, w1, ...), one at a time
    after clip-grad, so the embedding and layer 0's weights before its first largest one (`optimizer_steps`)."""
    weights = model.layer_param_list()
    return model.vocab * model.hidden + sum(weights[:weights.index(max(model.largest_params()))])


def _mlp_forward(model: ModelSpec, effects: list[LayerEffect], index: int, kept: list[int], copies: WeightCopies,
                 tables: int) -> StagePeak:
    """Layer `index`'s forward at its MLP's first matmul (w1): the forward moment of the last layer.

    The float32 copies of every Linear weight are made at the start of the step and each forward copy is freed
    by the matmul that reads it (`weight_copies`), so when the last layer's MLP runs, the earlier layers have
    kept their tensors while only this layer's MLP weight copies (the `w1`, `w3`, `w2` `Cast`s) and lm_head's
    (`lm_head` `Cast`) are still alive of the forward ones, next to every backward copy (memory-pool trace of
    t02: 64.37 MiB at layer 1's w1 `MatMul`, float16 compute with float32 parameters). On top: the layer's kept
    tensors up to its ffn_norm, the residual (the attention's `Add`), w1's float32 output (`MatMul`) and, with
    float16 compute, the float32 casts of the normalised input that w1's and w3's `MatMul`s read (`Cast`), and the
    labels' float32 one-hot (`OneHot`, b*s*V), made at the start of the step (with qkv_concat, w_gate_hidden's
    float32 output of both projections and one input cast). Layers after `index` are not
    counted (their copies would make a layer's moment depend on later layers' choices, which the planner's
    search does not allow): the last layer's moment is the whole one, the others' a lower bound."""
    dim, c = dims(model, ParallelSpec()), model.compute_bytes
    mlp = ("feed_forward.",)
    before_mlp = sum(item.saved.nbytes for item in effects[index].tensors
                     if item.fate != "recomputed" and not item.saved.path.startswith(mlp))
    mlp_copies = sum(size for path, size in copies.forward[index].items() if path.startswith(mlp))
    # with qkv_concat one MatMul (w_gate_hidden) reads one float32 copy of the input and writes both projections
    # (wide5's c09: a (29, 3588) float32 MatMul output and one (29, 552) Cast at layer 2's, 69.64 MiB)
    linears = len(linear_names(model)[1])
    outputs = 2 if model.fused_linears else 1           # w1's output, or w_gate_hidden's (both projections)
    inputs = linears * FP32 * dim.bsh_full if cpu_matmul_copies(model) else 0
    return StagePeak(kind="MLP forward", layer=index, components={
        "activations kept": sum(kept[:index]) + before_mlp,
        "weight copies": sum(copies.backward[:index + 1]) + copies.lm_head + mlp_copies + copies.lm_head_forward,
        "model-level tensors": c * dim.bsh_full + tables + FP32 * model.batch * model.seq * model.vocab,
        "layer working set": outputs * FP32 * dim.bsf + inputs})


def _first_scores(model: ModelSpec, effects: list[LayerEffect]) -> int:
    """The score-sized tensors of layer 0's attention, alive while every weight copy still exists.

    The casts of the weights run as soon as the step starts, before the forward has freed any,
    so the first attention's b*n*s*s tensors come on top of them (memory-pool traces of h00, h04
    and p1). CPU BatchMatMul computes in float32. A float32 model holds the scores and the
    probabilities. In a float16 model:
    * attention recomputed: nothing is kept for the backward; the largest moment is the float32
      scores beside the probabilities (float32 softmax), or the float32 BatchMatMul output beside
      its float16 cast (float16 softmax);
    * attention kept: the probabilities stay in the softmax dtype, next to their float16 cast (a
      float32 softmax) and two float32 copies made for the BatchMatMuls that read them, the
      forward's and the backward's (the latter is made at once: it reads only the probabilities).
    Which case applies is decided by whether some layer rebuilds its attention, as for the causal
    mask (`_cpu_tables`): recompute counts and layer lists start at the first layer, and the
    planner's search needs stage-wide terms to be shared, not tied to one layer's position.
    """
    scores = dims(model, ParallelSpec()).scores
    if model.compute_bytes == FP32:
        return (2 * FP32 + (model.softmax_bytes if model.softmax_cast else 0)) * scores
    recomputed = _attention_rebuilt(effects)
    if recomputed:
        return (2 * FP32 if model.softmax_bytes == FP32 else FP32 + model.compute_bytes) * scores
    cast = model.compute_bytes if model.softmax_bytes != model.compute_bytes else 0
    return (model.softmax_bytes + cast + 2 * FP32) * scores


def _attention_backward(model: ModelSpec, effects: list[LayerEffect], index: int, kept: list[int],
                        copies: WeightCopies, tables: int, sizes: dict[str, int]) -> StagePeak:
    """Inside layer `index`'s attention backward: the MLP part is done, the score gradients are alive.

    The layer's attention tensors (rebuilt if recomputed) are still held, and the softmax backward
    works on b*n*s*s tensors (memory-pool traces of m05, m06 and k07):
    * float32 compute: the gradient of the probabilities (float32 BatchMatMul output) and the
      softmax backward's first product;
    * float16 compute, attention kept: that gradient plus its float16 cast when the softmax is
      computed in another dtype;
    * float16 compute, float32 softmax, attention recomputed alone (its norm kept): the gradient cast
      to float32, the softmax backward's temporary and the rebuilt float32 scores the softmax read
      (five float32 b*n*s*s tensors with the rebuilt probabilities and their copy: b09 of `wide3`);
    * the same under full recompute (the norms rebuilt too: one segment, rebuilt as the layer's
      backward starts): the largest moment is the rebuild's float32 copy of the probabilities, with
      the gradient of the probabilities and the float16 cast beside it, as with the attention kept
      (traces of b09 under `recompute: True`, flash attention on and off: 29.30 and 30.83 MiB);
    * float16 compute and softmax, attention recomputed alone: the softmax backward holds the float32
      gradient of the probabilities, its float16 cast, the float16 product with the probabilities and
      the float32 cast of its result (the sweep's s09, 42.94 MiB; b09 with flash attention off);
    * float16 compute, the whole layer rebuilt: its backward also holds the float32 copies of the rebuilt
      input of wq/wk/wv and of wo's incoming gradient (`_rebuilt_copies`, 4*b*s*h), and no longer the
      TensorMove copies of the layer's own parameters (`_moved_copies`) (the sweep's s20, fresh6's t03,
      fresh4's q09, b09 under `recompute: True`; a float32 causal mask counted for the float16 one had
      covered them until wide4's i09).
    """
    dim, c = dims(model, ParallelSpec()), model.compute_bytes
    attention = held_in_backward(effects[index], ("attention.", "attention_norm."))
    rebuilt = rebuilds(effects[index], "attention.softmax") and not rebuilds(effects[index], *_NORMS)
    if c == FP32:
        working = 2 * FP32
    elif rebuilt and model.softmax_bytes == FP32:
        working = 3 * FP32
    elif rebuilt:
        working = 2 * FP32 + 2 * c
    else:
        working = FP32 + (c if model.softmax_cast else 0)
    whole = c != FP32 and rebuilds(effects[index], "attention_norm.")
    copies_early = (_rebuilt_copies(effects[index]) + FP32 * dim.bsh_full) if whole else 0
    moved = _moved_copies(model, effects[index], sizes) if whole else 0
    mlp = model.gradient_bytes * 3 * model.hidden * model.ffn
    return StagePeak(kind="attention backward", layer=index, components={
        "activations kept": sum(kept[:index]),
        "weight copies": sum(copies.backward[:index + 1]) - moved,
        "gradients so far": gradients_after(model, index, len(effects)) + mlp,
        "model-level tensors": 2 * c * dim.bsh_full + tables,
        "layer working set": attention + working * dim.scores + copies.late[index] + copies_early})


def _moved_copies(model: ModelSpec, effect: LayerEffect, sizes: dict[str, int]) -> int:
    """The TensorMove copies of the parameters a layer's recompute casts again (`weight_copies`), freed once the
    whole layer is rebuilt: at its attention backward only the earlier layers' are alive (memory-pool trace of
    fresh4's q09, float16 compute with float32 parameters: one layer's seven copies, 2.77 MiB, at layer 1's)."""
    if not model.weight_cast:
        return 0
    return sum(model.param_bytes * size for path, size in sizes.items()
               if _rerun(path, effect) or path in effect.recompute_scoped)


def _rebuilt_copies(effect: LayerEffect) -> int:
    """The float32 copies of the rebuilt normalised input of wq/wk/wv that a float16 layer's backward makes as
    soon as its norm is rebuilt (the `Saved` item's kept size, its copies)."""
    return sum(item.saved.nbytes for item in effect.tensors
               if item.fate == "recomputed" and item.saved.path == "attention_norm.mul2")


def _rerun(path: str, effect: LayerEffect) -> bool:
    """Whether the backward runs this Linear again. A recompute re-runs only what some backward op
    reads: w2's output feeds only the residual add, so w2 never runs again; wo's output is read
    again only when the ffn_norm after the residual add is rebuilt too (memory-pool traces of h04
    and h14: no recompute copy of w2, and of wo only under full recompute)."""
    if path not in effect.recomputed_ops or path == "feed_forward.w2.matmul":
        return False
    if path == "attention.wo.matmul":
        return rebuilds(effect, "ffn_norm.")
    return True


_NORMS = ("attention_norm.", "ffn_norm.")


def _cpu_tables(model: ModelSpec, effects: list[LayerEffect]) -> int:
    """cos/sin tables (rotary_dtype), per-token statistics, the causal mask when attention is rebuilt
    (`cpu_mask_bytes`: uint8 under flash attention)."""
    dim = dims(model, ParallelSpec())
    mask = cpu_mask_bytes(model) * model.batch * model.seq * model.seq if _attention_rebuilt(effects) else 0
    return model.rotary_bytes * 2 * model.seq * model.head_dim + FP32 * 3 * dim.bs + mask


def _attention_rebuilt(effects: list[LayerEffect]) -> bool:
    return any(rebuilds(effect, "attention.") for effect in effects)


def _forward_model_level(model: ModelSpec) -> int:
    """The embedding output (when the first norm reads it without a cast) and the final RmsNorm's tensors."""
    dim, c, norm = dims(model, ParallelSpec()), model.compute_bytes, model.layernorm_bytes
    embedding = 0 if model.norm_cast else c * dim.bsh_full
    normalised = FP32 if cpu_matmul_copies(model) else c                  # the input of lm_head
    final_norm = (norm if model.norm_cast else 0) + c + normalised + norm  # [input copy], mul, mul2, early 2*x
    return embedding + final_norm * dim.bsh_full








