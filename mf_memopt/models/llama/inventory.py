"""The tensors one legacy Llama decoder layer keeps for its backward pass, per operator.

Two runtimes:

* `ascend` (analytic): MindFormers' Llama as built for Ascend, with fused RmsNorm, fused
  SiLU and, if configured, FlashAttention; sizes follow the tensor shapes of
  llama_transformer.py, split by tensor and sequence parallelism as in Megatron
  (Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models",
  MLSys 2023, section 4).
* `cpu` (measured): what MindSpore 2.9's CPU backend keeps (fp32, no flash attention),
  read from the compiled kernel graph and confirmed against the memory-pool peak. Three
  tensors exist only there, because the CPU runtime runs parts of the backward early (the
  SiLU's sigmoid and the two RmsNorm `2*x`); they are marked `cpu_only`.
"""

from __future__ import annotations

from dataclasses import replace

from ...estimate.inventory import (
    ATTENTION_INPUT,
    ATTENTION_OUTPUT,
    FP32,
    MLP_DOWN_INPUT,
    MLP_GATE,
    MLP_GATE_EARLY,
    MLP_INPUT,
    Dims,
    Op,
    Saved,
    dims,
)
from ...estimate.spec import ModelSpec, ParallelSpec


def layer_inventory(model: ModelSpec, parallel: ParallelSpec, runtime: str) -> list[Saved]:
    if runtime == "cpu":
        saved = _cpu_layer(cpu_attention_model(model), dims(model, parallel))
    else:
        saved = _ascend_layer(model, dims(model, parallel))
    if not model.fused_linears:
        return saved
    return [replace(item, path=_CONCAT_TENSORS.get(item.path, item.path),
                    output_of=_CONCAT_TENSORS.get(item.output_of or "", item.output_of)) for item in saved]


# qkv_concat (`fused_linears`): MindFormers' LLamaAttention has one `w_qkv` Linear whose output `split_qkv` cuts
# into q, k and v, and LlamaFeedForward (built with ffn_concat=qkv_concat) one `w_gate_hidden` whose output `split`
# cuts into the gate and up projections' outputs, the SiLU a cell of its own (`activate`) (llama_transformer.py,
# llama_layer.py); the tensors are the same, made by these operators
_CONCAT_TENSORS = {"attention.wv.matmul": "attention.split_qkv", "feed_forward.w1.matmul": "feed_forward.split",
                   "feed_forward.w3.matmul": "feed_forward.split",
                   "feed_forward.w1.activation.silu": "feed_forward.activate.silu",
                   "feed_forward.w1": "feed_forward.activate"}
_CONCAT_OPS = {"attention.wq.matmul": "attention.w_qkv.matmul", "attention.wk.matmul": "attention.w_qkv.matmul",
               "attention.wv.matmul": "attention.w_qkv.matmul",
               "feed_forward.w1.matmul": "feed_forward.w_gate_hidden.matmul",
               "feed_forward.w3.matmul": "feed_forward.w_gate_hidden.matmul"}


def linear_names(model: ModelSpec) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The Linears that read the attention's and the MLP's normalised input."""
    if model.fused_linears:
        return ("w_qkv",), ("w_gate_hidden",)
    return ("wq", "wk", "wv"), ("w1", "w3")


_LINEAR_OPS = ("attention.wq.matmul", "attention.wk.matmul", "attention.wv.matmul", "attention.wo.matmul",
               "feed_forward.w1.matmul", "feed_forward.w2.matmul", "feed_forward.w3.matmul")


def linear_ops(model: ModelSpec) -> tuple[str, ...]:
    """The matmul paths of one layer's Linears in `ModelSpec.layer_param_list` order (its weights'); with
    qkv_concat each fused Linear once, where its first part was."""
    if not model.fused_linears:
        return _LINEAR_OPS
    return tuple(dict.fromkeys(_CONCAT_OPS.get(path, path) for path in _LINEAR_OPS))


def _ascend_layer(model: ModelSpec, dim: Dims) -> list[Saved]:
    c = model.compute_bytes
    saved = [
        Saved(path="attention_norm.norm", what="normalised input of wq/wk/wv", nbytes=c * dim.bsh,
              output_of="attention_norm", role=ATTENTION_INPUT),
        Saved(path="attention_norm.norm", what="rstd (fp32, per token)", nbytes=FP32 * dim.bs),
        Saved(path="attention.apply_rotary_emb.add", what="q and k after RoPE", nbytes=c * (dim.q + dim.kv)),
        Saved(path="attention.wv.matmul", what="v", nbytes=c * dim.kv),
    ]
    if model.flash_attention:
        saved += [Saved(path="attention.flash_attention.flash_attention", what="attention output (input of wo)",
                        nbytes=c * dim.q),
                  Saved(path="attention.flash_attention.flash_attention", what="softmax max and sum (fp32, 8 per row)",
                        nbytes=2 * FP32 * 8 * (dim.q // model.head_dim))]
    else:
        groups = model.heads // model.kv_heads
        saved.append(Saved(path="attention.softmax", what="attention probabilities",
                           nbytes=model.softmax_bytes * dim.scores))
        if model.softmax_cast:
            saved.append(Saved(path="attention.cast", what="attention probabilities cast to compute_dtype (for the "
                               "BatchMatMul)", nbytes=c * dim.scores))
        saved.append(Saved(path="attention.merger_head_transpose", what="attention output (input of wo)",
                           nbytes=c * dim.q, role=ATTENTION_OUTPUT))
        if groups > 1:
            saved.append(Saved(path="attention.tile_kv", what="k and v repeated to every head",
                               nbytes=c * 2 * (dim.q - dim.kv)))
    saved += [
        Saved(path="add", what="residual after attention (input of ffn_norm)", nbytes=c * dim.bsh),
        Saved(path="ffn_norm.norm", what="normalised input of w1/w3", nbytes=c * dim.bsh, output_of="ffn_norm",
              role=MLP_INPUT),
        Saved(path="ffn_norm.norm", what="rstd (fp32, per token)", nbytes=FP32 * dim.bs),
        Saved(path="feed_forward.w1.matmul", what="w1 output (input of SiLU)", nbytes=c * dim.bsf),
        Saved(path="feed_forward.w3.matmul", what="w3 output", nbytes=c * dim.bsf),
        Saved(path="feed_forward.w1.activation.silu", what="SiLU output", nbytes=c * dim.bsf,
              output_of="feed_forward.w1", role=MLP_GATE),
        Saved(path="feed_forward.mul", what="SiLU(w1) * w3 (input of w2)", nbytes=c * dim.bsf, role=MLP_DOWN_INPUT),
        Saved(path="add", what="layer output (input of the next layer)", nbytes=c * dim.bsh,
              kept_by_full_recompute=True),
    ]
    return saved


def _cpu_layer(model: ModelSpec, dim: Dims) -> list[Saved]:
    """What one layer keeps on MindSpore 2.9's CPU backend, in the dtypes the config sets.

    c = compute_dtype, L = layernorm_compute_type, S = softmax_compute_type, read from the
    compiled kernel graph of each dtype setting:

    * where two dtypes differ the graph has a Cast, and the backward reads the cast copy, not
      the original: the RmsNorm's copy of its input in L (instead of the residual stream), the
      softmax output's copy in c;
    * the CPU MatMul and BatchMatMul have no float16 kernel: with c = float16 every input a
      matmul's backward reads gets its own float32 copy, made during the forward (the cast
      depends only on forward tensors, so the runtime runs it as soon as it can), and the
      float16 original is freed: the input of wq/wk/wv is kept three times in float32, q, k,
      v, the probabilities and the input of wo and w2 once each. A tensor a recompute rebuilds
      in the backward is not copied early: the cast runs inside the backward matmul, and the
      rebuilt float16 tensor is what the layer's backward holds (`rebuilt_nbytes`);
    * the backward's SiLU sigmoid and the RmsNorm's 2*x are computed early, too.
    The weight copies those matmuls need are not activations: see `memory.WeightCopies`.
    """
    c, wide = model.compute_bytes, cpu_matmul_copies(model)
    mha = model.kv_heads == model.heads
    matmul_in = FP32 if wide else c
    attention_linears, mlp_linears = linear_names(model)
    saved = [*_cpu_norm(model, dim, "attention_norm", attention_linears)]
    if wide or mha:
        saved += [Saved(path="attention.apply_rotary_emb.add", what="q and k after RoPE" + _copy(wide),
                        nbytes=matmul_in * dim.q * 2),
                  Saved(path="attention.transpose", what="v" + _copy(wide), nbytes=matmul_in * dim.q)]
    else:
        saved += [Saved(path="attention.apply_rotary_emb.add", what="q after RoPE", nbytes=c * dim.q),
                  Saved(path="attention.tile_kv", what="k and v repeated to every head", nbytes=c * 2 * dim.q)]
    saved.append(Saved(path="attention.softmax", what="attention probabilities", nbytes=model.softmax_bytes
                       * dim.scores))
    if wide or model.softmax_cast:
        saved.append(Saved(path="attention.cast", what="attention probabilities for the BatchMatMul"
                           + (_copy(wide) if wide else " (cast to compute_dtype)"),
                           nbytes=matmul_in * dim.scores))
    saved.append(Saved(path="attention.merger_head_transpose", what="attention output (input of wo)" + _copy(wide),
                       nbytes=matmul_in * dim.q, role=ATTENTION_OUTPUT))
    if not model.norm_cast:
        saved.append(Saved(path="add", what="residual after attention (input of ffn_norm)", nbytes=c * dim.bsh))
    saved += _cpu_norm(model, dim, "ffn_norm", mlp_linears)
    saved += [
        Saved(path="feed_forward.w1.matmul", what="w1 output (input of the SiLU backward)", nbytes=c * dim.bsf),
        Saved(path="feed_forward.w3.matmul", what="w3 output", nbytes=c * dim.bsf),
        Saved(path="feed_forward.w1.activation.silu", what="SiLU output (x * sigmoid(x))", nbytes=c * dim.bsf,
              output_of="feed_forward.w1", role=MLP_GATE),
        Saved(path="feed_forward.w1.activation.silu", what="sigmoid(x) of the SiLU backward, run early",
              nbytes=c * dim.bsf, cpu_only=True, role=MLP_GATE_EARLY),
        Saved(path="feed_forward.mul", what="SiLU(w1) * w3 (input of w2)" + _copy(wide), nbytes=matmul_in * dim.bsf,
              rebuilt_nbytes=c * dim.bsf, read_by="feed_forward.w2.matmul", role=MLP_DOWN_INPUT),
    ]
    if model.norm_cast:
        saved.append(Saved(path="input", what="layer input (compute_dtype), kept as the recompute input",
                           nbytes=c * dim.bsh, recompute_input=True))
    else:
        saved.append(Saved(path="add", what="layer output (input of the next layer)", nbytes=c * dim.bsh,
                           kept_by_full_recompute=True))
    return saved


_CORE = "attention.batch_matmul_q_k"


def cpu_attention_model(model: ModelSpec) -> ModelSpec:
    """The model as the CPU launcher runs its attention. With `use_flash_attention` the launcher's stand-in
    (`cpu_attention.CPUFlashAttention`) casts the scores to float32 for its softmax whatever `softmax_compute_type`
    says and casts the probabilities back to the compute dtype: its softmax dtype is float32 (memory-pool traces in
    docs/estimator.md, "The flash-attention stand-in")."""
    if not model.flash_attention:
        return model
    roles = tuple(sorted({**dict(model.roles), "softmax": "float32"}.items())) if model.roles else ()
    return replace(model, softmax_bytes=FP32, roles=roles)


def cpu_mask_bytes(model: ModelSpec) -> int:
    """Bytes per element of the causal mask a recomputed attention keeps as its input: MindFormers'
    `LowerTriangularMaskWithDynamic.construct` casts it to uint8 for flash attention (the stand-in scales it inside
    the recomputed cell). Without flash attention it is the `Mul` by -10000 (`multiply_data`, a tensor of the
    `compute_type` LlamaModel passes, `compute_dtype`), so compute_dtype: the (b, 1, s, s) float16 `Mul` of the
    casual_mask cell in the memory-pool trace of wide4's i09, alive at its peak."""
    return 1 if model.flash_attention else model.compute_bytes


def cpu_matmul_copies(model: ModelSpec) -> bool:
    """MatMul/BatchMatMul run in float32 on CPU: float16 operands are cast, the backward's inputs early."""
    return model.compute_bytes == 2


def _copy(wide: bool) -> str:
    return ", a float32 copy for the matmul backward" if wide else ""


def _cpu_norm(model: ModelSpec, dim: Dims, cell: str, linears: tuple[str, ...]) -> list[Saved]:
    """LlamaRMSNorm without the fused kernel: cast to L, square, mean, rsqrt, mul, cast back, mul weight."""
    c, norm, wide = model.compute_bytes, model.layernorm_bytes, cpu_matmul_copies(model)
    saved = []
    if model.norm_cast:
        saved.append(Saved(path=f"{cell}.cast", what="input cast to layernorm_compute_type", nbytes=norm * dim.bsh))
    consumers = "/".join(linears)
    role = MLP_INPUT if cell == "ffn_norm" else ATTENTION_INPUT
    normalised = (Saved(path=f"{cell}.mul2", what=f"normalised input of {consumers}, one float32 copy for each "
                        "Linear's backward", nbytes=FP32 * len(linears) * dim.bsh, rebuilt_nbytes=c * dim.bsh,
                        read_by=f"{'attention' if cell == 'attention_norm' else 'feed_forward'}.{linears[0]}.matmul",
                        output_of=cell, role=role, copies=len(linears)) if wide else
                  Saved(path=f"{cell}.mul2", what=f"normalised input of {consumers}", nbytes=c * dim.bsh,
                        output_of=cell, role=role))
    saved += [
        Saved(path=f"{cell}.square", what="2*x of the RmsNorm backward, run early", nbytes=norm * dim.bsh,
              cpu_only=True, kept_by_full_recompute=cell == "attention_norm" and not model.norm_cast),
        Saved(path=f"{cell}.mul", what="x * rsqrt" + (" cast to compute_dtype" if model.norm_cast else ""),
              nbytes=c * dim.bsh),
        normalised,
        Saved(path=f"{cell}.rsqrt", what="rsqrt (per token)", nbytes=norm * dim.bs),
    ]
    return saved


def layer_ops(model: ModelSpec, parallel: ParallelSpec) -> list[Op]:
    """Forward FLOPs of the matmul-class operators of one layer (2 per multiply-add)."""
    t, b, s, h, d = parallel.tensor, model.batch, model.seq // parallel.context, model.hidden, model.head_dim
    heads, kv = model.heads // t, max(model.kv_heads // t, 1)
    core = "attention.flash_attention.flash_attention" if model.flash_attention else "attention.batch_matmul_q_k"
    ops = [
        Op(path="attention.wq.matmul", flops=2 * b * s * h * heads * d),
        Op(path="attention.wk.matmul", flops=2 * b * s * h * kv * d),
        Op(path="attention.wv.matmul", flops=2 * b * s * h * kv * d),
        Op(path=core, flops=4 * b * heads * s * model.seq * d),
        Op(path="attention.wo.matmul", flops=2 * b * s * heads * d * h),
        Op(path="feed_forward.w1.matmul", flops=2 * b * s * h * model.ffn // t),
        Op(path="feed_forward.w3.matmul", flops=2 * b * s * h * model.ffn // t),
        Op(path="feed_forward.w2.matmul", flops=2 * b * s * model.ffn // t * h),
    ]
    if not model.fused_linears:
        return ops
    fused: dict[str, int] = {}
    for op in ops:
        path = _CONCAT_OPS.get(op.path, op.path)
        fused[path] = fused.get(path, 0) + op.flops
    return [Op(path=path, flops=flops) for path, flops in fused.items()]
