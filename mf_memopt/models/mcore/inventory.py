"""The tensors one mcore decoder layer (`TransformerLayer`) keeps for its backward pass, per operator.

Two runtimes, as for the legacy Llama:

* `ascend` (analytic): the layer as MindFormers builds it for Ascend (fused RmsNorm, SwiGlu,
  FlashAttentionScore), sizes from the tensor shapes of `parallel_core/training_graph`, split by
  tensor and sequence parallelism as in Megatron (Korthikanti et al., MLSys 2023, section 4).
* `cpu` (measured): what MindSpore 2.9's CPU backend keeps with mf_memopt's stand-ins, read from the
  memory-pool allocation logs of float32 and float16-compute layers (Qwen3 and TeleChat3, queries
  wider than the hidden size, one and several key/value heads). Three facts shape it:
  - the linears run on float32 on CPU: the fused gate/up output and the whole SwiGlu are float32
    whatever compute_dtype says;
  - the RmsNorm backward's `2*x` runs early (as in the legacy Llama), in every norm, the per-head
    q/k norms included;
  - the attention stand-in (`cpu_kernels.CPUFlashAttentionScore`) has its own backward: it keeps q, k
    and v as MindFormers' FlashAttention cell cast them (float16) and its float32 output, and no
    recompute rebuilds them (`never_recomputed`).
"""

from __future__ import annotations

from ...estimate.inventory import (
    ATTENTION_INPUT,
    ATTENTION_OUTPUT,
    FP32,
    MLP_DOWN_INPUT,
    MLP_INPUT,
    Dims,
    Op,
    Saved,
    dims,
)
from ...estimate.spec import ModelSpec, ParallelSpec

FP16 = 2


def layer_inventory(model: ModelSpec, parallel: ParallelSpec, runtime: str) -> list[Saved]:
    if runtime == "cpu":
        return _cpu_layer(model, dims(model, parallel))
    return _ascend_layer(model, dims(model, parallel))


def _ascend_layer(model: ModelSpec, dim: Dims) -> list[Saved]:
    c = model.compute_bytes
    heads_rows = dim.q // model.head_dim
    saved = [
        Saved(path="input_layernorm.norm", what="normalised input of linear_qkv", nbytes=c * dim.bsh,
              output_of="input_layernorm"),
        Saved(path="input_layernorm.norm", what="rstd (fp32, per token)", nbytes=FP32 * dim.bs),
    ]
    if model.qk_norm:
        saved += [Saved(path="self_attention.q_layernorm.norm", what="q before its norm", nbytes=c * dim.q),
                  Saved(path="self_attention.k_layernorm.norm", what="k before its norm", nbytes=c * dim.kv)]
    saved += [
        Saved(path="self_attention.apply_rotary_pos_emb.add", what="q and k after RoPE", nbytes=c * (dim.q + dim.kv)),
        Saved(path="self_attention.split_qkv", what="v", nbytes=c * dim.kv),
        Saved(path="self_attention.core_attention.flash_attention", what="attention output (input of linear_proj)",
              nbytes=c * dim.q),
        Saved(path="self_attention.core_attention.flash_attention", what="softmax max and sum (fp32, 8 per row)",
              nbytes=2 * FP32 * 8 * heads_rows),
        Saved(path="add", what="residual after attention (input of pre_mlp_layernorm)", nbytes=c * dim.bsh),
        Saved(path="pre_mlp_layernorm.norm", what="normalised input of linear_fc1", nbytes=c * dim.bsh,
              output_of="pre_mlp_layernorm", role=MLP_INPUT),
        Saved(path="pre_mlp_layernorm.norm", what="rstd (fp32, per token)", nbytes=FP32 * dim.bs),
        Saved(path="mlp.linear_fc1.matmul", what="gate and up (input of SwiGlu)", nbytes=c * 2 * dim.bsf),
        Saved(path="mlp.activation_func.mul", what="SiLU(gate) * up (input of linear_fc2)", nbytes=c * dim.bsf,
              role=MLP_DOWN_INPUT),
        Saved(path="add", what="layer output (input of the next layer)", nbytes=c * dim.bsh,
              kept_by_full_recompute=True),
    ]
    return saved


def _cpu_layer(model: ModelSpec, dim: Dims) -> list[Saved]:
    """What one layer keeps on MindSpore 2.9's CPU backend: float32 throughout, or float16 compute.

    c = compute_dtype. With c = float16 the norms cast their float16 input to float32 and their
    output back, the layer keeps its residual in float32 (`fp32_residual_connection`), and each
    input a matmul's backward reads gets a float32 copy made during the forward.
    """
    half = model.compute_bytes == FP16
    heads_rows = dim.q // model.head_dim
    kv_rows = dim.kv // model.head_dim
    saved = _cpu_norm("input_layernorm", dim.bsh, dim.bs, half, consumer="linear_qkv")
    if model.qk_norm:
        for name, size, rows in (("q", dim.q, heads_rows), ("k", dim.kv, kv_rows)):
            cell = f"self_attention.{name}_layernorm"
            saved += [
                Saved(path=f"{cell}.cast" if half else "self_attention.split_qkv",
                      what=f"{name} (input of its norm{', cast to float32' if half else ''})", nbytes=FP32 * size),
                Saved(path=f"{cell}.norm", what=f"{name} * rstd", nbytes=FP32 * size),
                Saved(path=f"{cell}.norm", what="2*x of the RmsNorm backward, run early", nbytes=FP32 * size,
                      cpu_only=True),
                Saved(path=f"{cell}.norm", what="rstd (per token and head)", nbytes=FP32 * rows),
            ]
    saved += [
        Saved(path="self_attention.core_attention.flash_attention", what="q, k and v as the FlashAttention cell "
              "casts them (float16), kept by the CPU stand-in's backward", nbytes=FP16 * (dim.q + 2 * dim.kv),
              never_recomputed=True),
        Saved(path="self_attention.core_attention.flash_attention", what="attention output (float32), kept by the "
              "CPU stand-in's backward", nbytes=FP32 * dim.q, never_recomputed=True),
        Saved(path="self_attention.linear_proj.matmul" if half else "self_attention.cast",
              what="attention output, input of linear_proj" + (" (a float32 copy for its backward)" if half else ""),
              nbytes=FP32 * dim.q, read_by="self_attention.linear_proj.matmul" if half else None,
              rebuilt_nbytes=model.compute_bytes * dim.q if half else None, role=ATTENTION_OUTPUT),
    ]
    if half:
        saved.append(Saved(path="cast", what="residual after attention, float32", nbytes=FP32 * dim.bsh))
    else:
        saved.append(Saved(path="add", what="residual after attention (input of pre_mlp_layernorm)",
                           nbytes=FP32 * dim.bsh))
    saved += _cpu_norm("pre_mlp_layernorm", dim.bsh, dim.bs, half, consumer="linear_fc1")
    saved += [
        Saved(path="mlp.activation_func.split", what="gate and up (float32)", nbytes=FP32 * 2 * dim.bsf),
        Saved(path="mlp.activation_func.silu", what="SiLU output (x * sigmoid(x))", nbytes=FP32 * dim.bsf),
        Saved(path="mlp.activation_func.silu", what="sigmoid(x) of the SiLU backward, run early", nbytes=FP32 * dim.bsf,
              cpu_only=True),
        Saved(path="mlp.activation_func.mul", what="SiLU(gate) * up (float32), input of linear_fc2",
              nbytes=FP32 * dim.bsf, role=MLP_DOWN_INPUT),
        Saved(path="add", what="layer output (input of the next layer)", nbytes=FP32 * dim.bsh,
              kept_by_full_recompute=True),
    ]
    return saved


def _cpu_norm(cell: str, bsh: int, bs: int, half: bool, *, consumer: str) -> list[Saved]:
    """A FusedRMSNorm on CPU (the stand-in computes in float32): x * rstd, its output, the early 2*x, rstd. With
    float16 compute the first norm's output is kept as its float16 cast (linear_qkv's backward casts it late); the
    MLP's matmuls run in float32 and keep the norm's float32 output."""
    role = MLP_INPUT if consumer == "linear_fc1" else ATTENTION_INPUT
    if half and consumer == "linear_qkv":
        # linear_qkv's backward casts its float16 input itself, late
        output = [Saved(path=f"{cell}.cast", what=f"normalised input of {consumer} (float16)", nbytes=FP16 * bsh,
                        output_of=cell, role=role)]
    else:
        output = [Saved(path=f"{cell}.norm", what=f"normalised input of {consumer}", nbytes=FP32 * bsh,
                        output_of=cell, role=role)]
    return [
        Saved(path=f"{cell}.norm", what="x * rstd", nbytes=FP32 * bsh),
        *output,
        Saved(path=f"{cell}.norm", what="2*x of the RmsNorm backward, run early", nbytes=FP32 * bsh, cpu_only=True),
        Saved(path=f"{cell}.norm", what="rstd (per token)", nbytes=FP32 * bs),
    ]


def layer_ops(model: ModelSpec, parallel: ParallelSpec) -> list[Op]:
    """Forward FLOPs of the matmul-class operators of one layer (2 per multiply-add)."""
    t, b, s, h, d = parallel.tensor, model.batch, model.seq // parallel.context, model.hidden, model.head_dim
    heads, kv = model.heads // t, max(model.kv_heads // t, 1)
    return [
        Op(path="self_attention.linear_qkv.matmul", flops=2 * b * s * h * (heads + 2 * kv) * d),
        Op(path="self_attention.core_attention.flash_attention", flops=4 * b * heads * s * model.seq * d),
        Op(path="self_attention.linear_proj.matmul", flops=2 * b * s * heads * d * h),
        Op(path="mlp.linear_fc1.matmul", flops=2 * b * s * h * 2 * model.ffn // t),
        Op(path="mlp.linear_fc2.matmul", flops=2 * b * s * model.ffn // t * h),
    ]
