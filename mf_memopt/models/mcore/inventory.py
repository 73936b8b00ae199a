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

FP16 = 2


def layer_inventory(model: ModelSpec, parallel: ParallelSpec, runtime: str) -> list[Saved]:
    if runtime == "cpu":
        return _cpu_layer(model, dims(model, parallel))
    return _ascend_layer(model, dims(model, parallel), parallel)


def _ascend_attention(model: ModelSpec, dim: Dims) -> list[Saved]:
    """Grouped-query attention with q, k and v from one fused linear, FlashAttentionScore's saved tensors."""
    c, heads_rows = model.compute_bytes, dim.q // model.head_dim
    saved = []
    if model.qk_norm:
        saved += [Saved(path="self_attention.q_layernorm.norm", what="q before its norm", nbytes=c * dim.q),
                  Saved(path="self_attention.k_layernorm.norm", what="k before its norm", nbytes=c * dim.kv)]
    return saved + [
        Saved(path="self_attention.apply_rotary_pos_emb.add", what="q and k after RoPE", nbytes=c * (dim.q + dim.kv)),
        Saved(path="self_attention.split_qkv", what="v", nbytes=c * dim.kv),
        Saved(path="self_attention.core_attention.flash_attention", what="attention output (input of linear_proj)",
              nbytes=c * dim.q),
        Saved(path="self_attention.core_attention.flash_attention", what="softmax max and sum (fp32, 8 per row)",
              nbytes=2 * FP32 * 8 * heads_rows),
    ]


def _ascend_mla(model: ModelSpec, dim: Dims, parallel: ParallelSpec) -> list[Saved]:
    """Multi-latent attention (MindFormers' MLASelfAttention): the low-rank parts of q and of k/v, kept whole on every
    tensor-parallel rank (their down projections are not split), each through its norm (qk_layernorm) into an up
    projection split by heads; FlashAttentionScore keeps q and k with their rotary part (nope + rope wide per head),
    v, its output and the softmax statistics."""
    c, tokens = model.compute_bytes, dim.bs
    heads = model.heads // parallel.tensor
    q, v = tokens * heads * (model.qk_nope + model.qk_rope), tokens * heads * model.v_head
    saved = []
    for name, rank, up in (("q", model.q_lora, "linear_q_up_proj"), ("kv", model.kv_lora, "linear_kv_up_proj")):
        if not rank:
            continue                # q projected directly from the layer norm's output (linear_q_proj)
        if model.qk_norm:
            cell = f"self_attention.{name}_layernorm"
            saved += [Saved(path=f"{cell}.norm", what=f"{name}'s low-rank part before its norm",
                            nbytes=c * tokens * rank),
                      Saved(path=f"{cell}.norm", what="rstd (fp32, per token)", nbytes=FP32 * tokens),
                      Saved(path=f"{cell}.norm", what=f"normalised low-rank {name} (input of {up})",
                            nbytes=c * tokens * rank, output_of=cell)]
        else:
            saved.append(Saved(path=f"self_attention.linear_{name}_down_proj.matmul",
                               what=f"{name}'s low-rank part (input of {up})", nbytes=c * tokens * rank))
    return saved + [
        Saved(path="self_attention.pe_concat", what="q and k with their rotary part (inputs of flash attention)",
              nbytes=c * 2 * q),
        Saved(path="self_attention.split", what="v", nbytes=c * v),
        Saved(path="self_attention.core_attention.flash_attention", what="attention output (input of linear_proj)",
              nbytes=c * v),
        Saved(path="self_attention.core_attention.flash_attention", what="softmax max and sum (fp32, 8 per row)",
              nbytes=2 * FP32 * 8 * tokens * heads),
    ]


def _ascend_layer(model: ModelSpec, dim: Dims, parallel: ParallelSpec) -> list[Saved]:
    c = model.compute_bytes
    consumer = "linear_q_down_proj and linear_kv_down_proj" if model.mla else "linear_qkv"
    saved = [
        Saved(path="input_layernorm.norm", what=f"normalised input of {consumer}", nbytes=c * dim.bsh,
              output_of="input_layernorm"),
        Saved(path="input_layernorm.norm", what="rstd (fp32, per token)", nbytes=FP32 * dim.bs),
    ]
    saved += _ascend_mla(model, dim, parallel) if model.mla else _ascend_attention(model, dim)
    saved += [
        Saved(path="add", what="residual after attention (input of pre_mlp_layernorm)", nbytes=c * dim.bsh),
        Saved(path="pre_mlp_layernorm.norm", what="normalised input of linear_fc1", nbytes=c * dim.bsh,
              output_of="pre_mlp_layernorm", role=MLP_INPUT),
        Saved(path="pre_mlp_layernorm.norm", what="rstd (fp32, per token)", nbytes=FP32 * dim.bs),
    ]
    if model.experts:
        saved += _moe_ascend(model, dim)
    else:
        saved += [
            Saved(path="mlp.linear_fc1.matmul", what="gate and up (input of SwiGlu)", nbytes=c * 2 * dim.bsf),
            Saved(path="mlp.activation_func.mul", what="SiLU(gate) * up (input of linear_fc2)", nbytes=c * dim.bsf,
                  role=MLP_DOWN_INPUT),
        ]
    saved.append(Saved(path="add", what="layer output (input of the next layer)", nbytes=c * dim.bsh,
                       kept_by_full_recompute=True))
    return saved


def _cpu_layer(model: ModelSpec, dim: Dims) -> list[Saved]:
    """What one layer keeps on MindSpore 2.9's CPU backend: float32 throughout, or float16 compute.

    c = compute_dtype. With c = float16 the norms cast their float16 input to float32 and their
    output back, the layer keeps its residual in float32 (`fp32_residual_connection`), and each
    input a matmul's backward reads gets a float32 copy made during the forward.
    """
    half = model.compute_bytes == FP16
    if model.mla:
        saved = _cpu_norm("input_layernorm", dim.bsh, dim.bs, half,
                          consumer="linear_q_down_proj and linear_kv_down_proj") + _cpu_mla(model, dim)
    else:
        saved = _cpu_norm("input_layernorm", dim.bsh, dim.bs, half, consumer="linear_qkv") + _cpu_attention(
            model, dim, half)
    if half:
        saved.append(Saved(path="cast", what="residual after attention, float32", nbytes=FP32 * dim.bsh))
    else:
        saved.append(Saved(path="add", what="residual after attention (input of pre_mlp_layernorm)",
                           nbytes=FP32 * dim.bsh))
    norm = _cpu_norm("pre_mlp_layernorm", dim.bsh, dim.bs, half, consumer="linear_fc1")
    if model.experts and not model.shared_ffn:
        # the MoE block's first operator is a Transpose, whose backward needs no input: the norm's output goes
        saved += [item for item in norm if item.output_of is None] + _moe_cpu(model, dim)
    elif model.experts:
        # the shared experts' linear_fc1 reads the norm's output (allocation logs of the tiny DeepSeek-V3)
        saved += norm + _moe_cpu(model, dim)
    else:
        saved += norm + _cpu_mlp("mlp.activation_func", dim.bsf)
    saved.append(Saved(path="add", what="layer output (input of the next layer)", nbytes=FP32 * dim.bsh,
                       kept_by_full_recompute=True))
    return saved


def _cpu_attention(model: ModelSpec, dim: Dims, half: bool) -> list[Saved]:
    """Grouped-query attention on CPU: the q/k norms' tensors, the stand-in's, the input of linear_proj."""
    heads_rows = dim.q // model.head_dim
    kv_rows = dim.kv // model.head_dim
    saved = []
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
    saved += [_stand_in_inputs(model, dim),
        Saved(path="self_attention.core_attention.flash_attention", what="attention output (float32), kept by the "
              "CPU stand-in's backward", nbytes=FP32 * dim.q, never_recomputed=True),
    ]
    if half or not model.experts:
        # a float32 Qwen3-MoE layer keeps no separate copy: linear_proj's backward reads the attention output the
        # stand-in keeps (allocation logs of the MoE sweep's build half)
        saved.append(Saved(path="self_attention.linear_proj.matmul" if half else "self_attention.cast",
                           what="attention output, input of linear_proj"
                           + (" (a float32 copy for its backward)" if half else ""),
                           nbytes=FP32 * dim.q, read_by="self_attention.linear_proj.matmul" if half else None,
                           rebuilt_nbytes=model.compute_bytes * dim.q if half else None, role=ATTENTION_OUTPUT))
    return saved


def _stand_in_inputs(model: ModelSpec, dim: Dims) -> Saved:
    """q, k and v as the CPU stand-in's backward keeps them. With flash attention `SelfAttention.construct` casts
    them to float16 first; without it they stay in the compute dtype, k and v repeated to every query head
    (`_repeat_kv`). Memory-pool traces of a float32 Qwen3 (4 layers, 4 heads of 32, seq 128, batch 2) with and
    without flash attention: 0.1875 MiB more per layer without it, the three float32 (2, 4, 128, 32) Transposes
    of `core_attention` in place of float16 ones; the MoE wide2 set's f02 (float32, no flash attention): 1.32 MiB
    of its 2.23 MiB miss."""
    if model.flash_attention:
        return Saved(path="self_attention.core_attention.flash_attention", what="q, k and v as the attention casts "
                     "them for flash attention (float16), kept by the CPU stand-in's backward",
                     nbytes=FP16 * (dim.q + 2 * dim.kv), never_recomputed=True)
    return Saved(path="self_attention.core_attention.flash_attention", what="q, and k and v repeated to every head, "
                 "in the compute dtype (no flash attention), kept by the CPU stand-in's backward",
                 nbytes=model.compute_bytes * 3 * dim.q, never_recomputed=True)


def _cpu_mla(model: ModelSpec, dim: Dims) -> list[Saved]:
    """Multi-latent attention on CPU (float32), read off the allocation logs of tiny DeepSeek-V3 configs with
    q_lora_rank 64-192, kv_lora_rank 32-96, 4 and 8 heads, head widths apart, seq 128 and 256: q's low-rank part
    and its norm's x*rstd, output and statistics; k/v's low-rank part (a split's output) and its norm's, with the
    early 2*x of its backward; q and k (nope + rope wide) and v as the stand-in keeps them, its output, and that
    output reshaped for linear_proj. The up projections' outputs are not kept (the split, concatenation and
    rotary ops after them need no input in their backward). When the attention is recomputed (the layer, or its
    `self_attention` cell) the split outputs that feed it (q's and k's halves, v) are kept: MindFormers' split is
    expanded into Slice ops that are not marked for recompute, so the recompute starts from them (memory-pool trace
    of the DeepSeek-V3 fresh set's g04, its attention cell recomputed: 4.56 MiB of `Expand/_SplitWithSize/Slice`
    outputs alive at the end of the forward, 1.14 MiB a layer, this tensor's size). The k/v norm's early 2*x reads
    the kept low-rank part, so no recompute rebuilds it (g04: four (64, 4, 32) `Expand/_Muls/Mul` alive)."""
    t, n, c = dim.bs, model.heads, model.compute_bytes
    qk, v = t * n * (model.qk_nope + model.qk_rope), t * n * model.v_head
    saved = []
    if model.q_lora:
        saved.append(Saved(path="self_attention.linear_q_down_proj.matmul",
                           what="q's low-rank part (input of q_layernorm)", nbytes=FP32 * t * model.q_lora,
                           output_of="self_attention.linear_q_down_proj"))
        if model.qk_norm:
            saved += _cpu_low_rank_norm("self_attention.q_layernorm", t, model.q_lora, "linear_q_up_proj",
                                        early=False)
    saved.append(Saved(path="self_attention.split_3d", what="k/v's low-rank part (input of kv_layernorm)",
                       nbytes=FP32 * t * model.kv_lora, never_recomputed=True))
    if model.qk_norm:
        saved += _cpu_low_rank_norm("self_attention.kv_layernorm", t, model.kv_lora, "linear_kv_up_proj", early=True)
    return saved + [
        Saved(path="self_attention.split", what="q's and k's halves and v, split (kept when the attention is "
              "recomputed)",
              nbytes=FP32 * t * (n * (2 * model.qk_nope + model.v_head + model.qk_rope) + model.qk_rope),
              recompute_input=True),
        Saved(path="self_attention.core_attention.flash_attention", what="q and k (nope + rope wide) and v, kept by "
              "the CPU stand-in's backward", nbytes=c * (2 * qk + v), never_recomputed=True),
        Saved(path="self_attention.core_attention.flash_attention", what="attention output (float32), kept by the "
              "CPU stand-in's backward", nbytes=FP32 * v, never_recomputed=True),
        Saved(path="self_attention.reshape", what="attention output, input of linear_proj", nbytes=FP32 * v,
              role=ATTENTION_OUTPUT),
    ]


def _cpu_low_rank_norm(cell: str, tokens: int, rank: int, consumer: str, *, early: bool) -> list[Saved]:
    """An MLA norm of a low-rank part on CPU: x * rstd, its output, the early 2*x where the logs show it, rstd."""
    return [
        Saved(path=f"{cell}.norm", what="x * rstd", nbytes=FP32 * tokens * rank),
        Saved(path=f"{cell}.norm", what=f"normalised low-rank part (input of {consumer})", nbytes=FP32 * tokens * rank,
              output_of=cell),
        *([Saved(path=f"{cell}.norm", what="2*x of the RmsNorm backward, run early", nbytes=FP32 * tokens * rank,
                 cpu_only=True, never_recomputed=True)] if early else []),
        Saved(path=f"{cell}.norm", what="rstd (per token)", nbytes=FP32 * tokens),
    ]


def _cpu_mlp(activation: str, bsf: int, *, mul: str | None = None, role: str | None = MLP_DOWN_INPUT) -> list[Saved]:
    """A dense gated MLP on CPU: the fused gate and up, the SiLU output and its early sigmoid, the gated product.
    `activation` holds split, silu and mul (SwiGlu), or, with `mul`, silu alone (the MLP splits and multiplies)."""
    split, mul = (f"{activation}.split", f"{activation}.mul") if mul is None else (f"{mul[:-len('mul')]}split", mul)
    gate, early = (MLP_GATE, MLP_GATE_EARLY) if role == MLP_DOWN_INPUT else (None, None)   # compressible MLPs only
    return [
        Saved(path=split, what="gate and up (float32)", nbytes=FP32 * 2 * bsf),
        Saved(path=f"{activation}.silu", what="SiLU output (x * sigmoid(x))", nbytes=FP32 * bsf, role=gate),
        Saved(path=f"{activation}.silu", what="sigmoid(x) of the SiLU backward, run early", nbytes=FP32 * bsf,
              cpu_only=True, role=early),
        Saved(path=mul, what="SiLU(gate) * up (float32), input of linear_fc2", nbytes=FP32 * bsf, role=role),
    ]


# --- MoE layers (`mlp` is MindFormers' MoELayer: router, experts, and shared experts where the model has them) ---
_EXPERTS = "mlp.experts.morphed_forward"


def _moe_cpu(model: ModelSpec, dim: Dims) -> list[Saved]:
    """An MoE layer on CPU with mf_memopt's dense experts stand-in (`moe_kernels.CPUDenseExperts`), read off the
    allocation logs of tiny Qwen3-MoE layers (float32, and float16 compute): the router's Dense input transposed by
    its backward early, two more token-by-hidden float32 copies of the input in float32 layers (the layer's
    token-order reshape and the experts' reshape; one with float16 compute: the first matmul's float32 copy), the
    router probabilities, and for every token the gate and up of all E experts in the compute dtype and the weighted
    Swiglu output in float32 (its own, or the second matmul's float32 copy). The Swiglu output itself is not kept:
    MindFormers marks the Swiglu for recompute, and the backward rebuilds it (`cpu_memory.py` prices that). The
    first weight laid out for one matmul (h x E*2F) stands in for the parameter copy the backward reads."""
    e, f, n, c = model.experts, model.moe_ffn, dim.bs, model.compute_bytes
    copies = [Saved(path="mlp.local_reshape_permute", what="MoE input in token order", nbytes=FP32 * dim.bsh),
              Saved(path=_EXPERTS, what="experts' input tokens", nbytes=FP32 * dim.bsh)]
    saved = [
        *(copies if c == FP32 else [Saved(path=_EXPERTS, what="experts' input tokens, a float32 copy for the first "
                                          "matmul's backward", nbytes=FP32 * dim.bsh)]),
        Saved(path="mlp.router.linear", what="router input transposed for the Dense backward, run early",
              nbytes=FP32 * dim.bsh, cpu_only=True),
        Saved(path="mlp.router.gating_activation", what="router probabilities (tokens x experts)", nbytes=FP32 * n * e),
        Saved(path=_EXPERTS, what="gate and up of every expert for every token (the dense CPU stand-in)",
              nbytes=c * n * e * 2 * f, spent_early=True),
        Saved(path=_EXPERTS, what="Swiglu output weighted by the routing (float32), input of the second matmul",
              nbytes=FP32 * n * e * f, role=MLP_DOWN_INPUT, spent_early=True),
    ]
    if model.shared_ffn:
        saved += _cpu_mlp("mlp.shared_experts.activation_func", n * model.shared_ffn, mul="mlp.shared_experts.mul",
                          role=None)
    return saved


def _moe_ascend(model: ModelSpec, dim: Dims) -> list[Saved]:
    """An MoE layer on Ascend (analytic): the router in float32, and the grouped experts on the k*N rows a device
    holds after the token dispatch, routing assumed balanced (MindFormers' alltoall dispatcher drops no token):
    the permuted input, the first grouped matmul's output (Swiglu input) and the experts' outputs gathered back
    per token for the routing weights' product; the Swiglu output is rebuilt in the backward (MindFormers marks
    the Swiglu for recompute itself); shared experts as a dense gated MLP."""
    # the tokens this device routes: sequence parallelism (which MindFormers requires with tensor parallelism in
    # an MoE layer) splits them
    c, e, f, n, k = model.compute_bytes, model.experts, model.moe_ffn, dim.bsh // model.hidden, model.top_k
    saved = [
        Saved(path="mlp.router.linear", what="router input (float32)", nbytes=FP32 * dim.bsh),
        Saved(path="mlp.router.gating_activation", what="router probabilities (float32)", nbytes=FP32 * n * e),
        Saved(path=_EXPERTS, what="dispatched tokens (top-k rows per token)", nbytes=c * k * dim.bsh),
        Saved(path=_EXPERTS, what="gate and up of the dispatched rows (input of Swiglu)", nbytes=c * k * n * 2 * f),
        Saved(path=_EXPERTS, what="experts' outputs gathered per token (for the routing weights' product)",
              nbytes=c * k * dim.bsh),
    ]
    if model.shared_ffn:
        saved += [Saved(path="mlp.shared_experts.linear_fc1.matmul", what="shared experts' gate and up",
                        nbytes=c * 2 * n * model.shared_ffn),
                  Saved(path="mlp.shared_experts.mul", what="shared experts' SiLU(gate) * up",
                        nbytes=c * n * model.shared_ffn)]
    return saved


def _moe_ops(model: ModelSpec, tokens: int) -> list[Op]:
    h, f, k = model.hidden, model.moe_ffn, model.top_k
    ops = [Op(path="mlp.router.linear", flops=2 * tokens * h * model.experts),
           Op(path=_EXPERTS, flops=2 * tokens * k * h * 3 * f)]
    if model.shared_ffn:
        ops += [Op(path="mlp.shared_experts.linear_fc1.matmul", flops=2 * tokens * h * 2 * model.shared_ffn),
                Op(path="mlp.shared_experts.linear_fc2.matmul", flops=2 * tokens * model.shared_ffn * h)]
    return ops


def _cpu_norm(cell: str, bsh: int, bs: int, half: bool, *, consumer: str) -> list[Saved]:
    """A FusedRMSNorm on CPU (the stand-in computes in float32): x * rstd, its output, the early 2*x, rstd. With
    float16 compute the first norm's output is kept as its float16 cast (linear_qkv's backward casts it late); the
    MLP's matmuls run in float32 and keep the norm's float32 output.

    Under full recompute the first norm's early 2*x is kept with float32 compute (memory-pool traces of a float32
    Qwen3 of 4 layers, hidden 128, seq 128, batch 2, fully recomputed: one (128, 2, 128) `Expand/_Muls/Mul` a layer
    alive at the end of the forward, 0.5 MiB in all; the MoE wide2 set's f02: five, 0.76 MiB of its miss) and not
    with float16 compute (the same Qwen3 with float16 compute: only the final norm's)."""
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
        # a fully recomputed layer keeps its input, so with float32 compute the first norm's 2*x is still made early
        # and held (as in the legacy Llama); with float16 compute the norm's input is a cast the recompute rebuilds
        Saved(path=f"{cell}.norm", what="2*x of the RmsNorm backward, run early", nbytes=FP32 * bsh, cpu_only=True,
              kept_by_full_recompute=cell == "input_layernorm" and not half),
        Saved(path=f"{cell}.norm", what="rstd (per token)", nbytes=FP32 * bs),
    ]


def layer_ops(model: ModelSpec, parallel: ParallelSpec) -> list[Op]:
    """Forward FLOPs of the matmul-class operators of one layer (2 per multiply-add)."""
    t, b, s, h, d = parallel.tensor, model.batch, model.seq // parallel.context, model.hidden, model.head_dim
    heads, kv = model.heads // t, max(model.kv_heads // t, 1)
    if model.mla:
        attention = _mla_ops(model, b * s, heads, model.seq)
    else:
        attention = [
            Op(path="self_attention.linear_qkv.matmul", flops=2 * b * s * h * (heads + 2 * kv) * d),
            Op(path="self_attention.core_attention.flash_attention", flops=4 * b * heads * s * model.seq * d),
            Op(path="self_attention.linear_proj.matmul", flops=2 * b * s * heads * d * h),
        ]
    if model.experts:
        return attention + _moe_ops(model, b * s)
    return attention + [
        Op(path="mlp.linear_fc1.matmul", flops=2 * b * s * h * 2 * model.ffn // t),
        Op(path="mlp.linear_fc2.matmul", flops=2 * b * s * model.ffn // t * h),
    ]


def _mla_ops(model: ModelSpec, tokens: int, heads: int, keys: int) -> list[Op]:
    h, q_head = model.hidden, model.qk_nope + model.qk_rope
    if model.q_lora:
        q = [Op(path="self_attention.linear_q_down_proj.matmul", flops=2 * tokens * h * model.q_lora),
             Op(path="self_attention.linear_q_up_proj.matmul", flops=2 * tokens * model.q_lora * heads * q_head)]
    else:
        q = [Op(path="self_attention.linear_q_proj.matmul", flops=2 * tokens * h * heads * q_head)]
    return q + [
        Op(path="self_attention.linear_kv_down_proj.matmul", flops=2 * tokens * h * (model.kv_lora + model.qk_rope)),
        Op(path="self_attention.linear_kv_up_proj.matmul",
           flops=2 * tokens * model.kv_lora * heads * (model.qk_nope + model.v_head)),
        Op(path="self_attention.core_attention.flash_attention",
           flops=2 * tokens * heads * keys * (q_head + model.v_head)),
        Op(path="self_attention.linear_proj.matmul", flops=2 * tokens * heads * model.v_head * h),
    ]


# --- multi-token prediction (`model.mtp.layers.N`: enorm, hnorm, eh_proj, transformer_layer, final_layernorm) ---
MTP_LAYER = "transformer_layer."


def mtp_inventory(model: ModelSpec, parallel: ParallelSpec, runtime: str) -> list[Saved]:
    """What one MTP layer keeps: the embedding of the shifted tokens and both input norms' statistics, the
    concatenation of the two normalised inputs (eh_proj's input), eh_proj's output (its transformer layer's input),
    that layer's tensors under `transformer_layer.`, and its final norm's statistics and output (the shared output
    head's input); on CPU each norm's x * rstd too (allocation logs of the tiny DeepSeek-V3). Its loss's tensors are
    the model's. Under full recompute the layer keeps its inputs (the embedding, and the decoder's output, counted
    there) and its output."""
    dim = dims(model, parallel)
    c = FP32 if runtime == "cpu" else model.compute_bytes
    inner = [replace(item, path=MTP_LAYER + item.path,
                     output_of=MTP_LAYER + item.output_of if item.output_of else None,
                     kept_by_full_recompute=False) for item in layer_inventory(model, parallel, runtime)]

    def norm(cell: str, early: bool = False) -> list[Saved]:
        scaled = [Saved(path=f"{cell}.norm", what="x * rstd", nbytes=FP32 * dim.bsh)] if runtime == "cpu" else []
        if early and runtime == "cpu":
            # the input norms' RmsNorm backward runs its 2*x early, and it reads an input a full recompute keeps
            # (memory-pool traces of the DeepSeek-V3 fresh2 set's q05, select recompute, and q01, full recompute)
            scaled.append(Saved(path=f"{cell}.norm", what="2*x of the RmsNorm backward, run early",
                                nbytes=FP32 * dim.bsh, cpu_only=True, kept_by_full_recompute=True))
        return [*scaled, Saved(path=f"{cell}.norm", what="rstd (fp32, per token)", nbytes=FP32 * dim.bs)]

    return [
        Saved(path="enorm.norm", what="embedding of the shifted tokens (input of enorm)", nbytes=c * dim.bsh,
              kept_by_full_recompute=True),
        *norm("enorm", early=True), *norm("hnorm", early=True),
        Saved(path="concat", what="both normalised inputs, concatenated (input of eh_proj)", nbytes=c * 2 * dim.bsh),
        Saved(path="eh_proj.matmul", what="eh_proj output (input of transformer_layer)", nbytes=c * dim.bsh),
        *inner,
        *norm("final_layernorm"),
        Saved(path="final_layernorm.norm", what="MTP layer output (input of the shared output head)",
              nbytes=c * dim.bsh, output_of="final_layernorm", kept_by_full_recompute=True),
    ]


def mtp_ops(model: ModelSpec, parallel: ParallelSpec) -> list[Op]:
    tokens = model.batch * model.seq // parallel.context
    return [Op(path="eh_proj.matmul", flops=2 * tokens * 2 * model.hidden * model.hidden // parallel.tensor),
            *(replace(op, path=MTP_LAYER + op.path) for op in layer_ops(model, parallel))]


def kept_communication(model: ModelSpec, parallel: ParallelSpec) -> list[Saved]:
    """The outputs of a fully recomputed layer's tensor-parallel communication that `mp_comm_recompute: False`
    keeps for the backward instead of running the communication again (Ascend; none without tensor parallelism).

    `Cell.recompute(mp_comm_recompute=False)` marks every primitive of the layer `recompute_comm_op: False`
    (`mindspore/nn/cell.py`, `Cell._mp_comm_recompute`); MindSpore's parallel pass then leaves the forward
    communication operators out of the recompute (docs/configuration.md, "mp_comm_recompute under tensor
    parallelism"). Which operators a layer issues, from MindFormers 1.9's `parallel_core/training_graph`:

    * `RowParallelLinear.forward_func` (`tensor_parallel/layers.py`), the attention's `linear_proj` and the dense
      MLP's `linear_fc2`: an explicit `ops.AllReduce` of its (b*s, h) product, or with `sequence_parallel` an
      `ops.ReduceScatter` over the sequence (b*s/t, h), in the compute dtype;
    * `ColumnParallelLinear.shard`, the attention's input projection and the MLP's `linear_fc1`: its input laid out
      `("cp", "dp", "None")`, the whole sequence; with `sequence_parallel` the norm before it is laid out
      `("cp_tp", "dp", "None")` (`TransformerLayer.shard`, `transformer/transformer_layer.py`), so the parallel
      pass gathers the sequence (an AllGather, (b*s, h)) before it. Without sequence parallelism the layouts agree
      and nothing is inserted.

    An MoE layer counts its attention's only: its routed experts communicate through the token dispatcher, not a
    row/column-parallel pair."""
    if parallel.tensor == 1:
        return []
    dim, c = dims(model, parallel), model.compute_bytes
    cells = [("self_attention", "linear_proj", "the attention's input projection")]
    if not model.experts:
        cells.append(("mlp", "linear_fc2", "linear_fc1"))
    saved = []
    for cell, row, column in cells:
        if parallel.sequence_parallel:
            saved += [Saved(path=f"{cell}.{row}.reduce_scatter", what=f"{row}'s reduce-scatter output (kept: "
                            "mp_comm_recompute False)", nbytes=c * dim.bsh, kept_by_full_recompute=True),
                      Saved(path=f"{cell}.all_gather", what=f"the sequence all-gathered for {column} (kept: "
                            "mp_comm_recompute False)", nbytes=c * dim.bsh_full, kept_by_full_recompute=True)]
        else:
            saved.append(Saved(path=f"{cell}.{row}.all_reduce", what=f"{row}'s all-reduce output (kept: "
                               "mp_comm_recompute False)", nbytes=c * dim.bsh_full, kept_by_full_recompute=True))
    return saved
