"""The tensors one Llama decoder layer keeps for its backward pass, per operator.

Each tensor is named with the layer-relative path of the operator that produces it, the
same paths the plan's patterns match (`feed_forward.w1.activation.silu`), so a recompute
or swap rule can be mapped onto bytes.

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

from dataclasses import dataclass

from .spec import ModelSpec, ParallelSpec

FP32 = 4


@dataclass(frozen=True, slots=True, kw_only=True)
class Saved:
    path: str                   # cell path + primitive that produces it, relative to the layer
    what: str
    nbytes: int                 # per micro-batch, per device
    cpu_only: bool = False
    kept_by_full_recompute: bool = False  # the layer's output is never recomputed


@dataclass(frozen=True, slots=True, kw_only=True)
class Op:
    """A compute-heavy operator of the forward pass and its FLOPs (per micro-batch, per device)."""

    path: str
    flops: int


@dataclass(frozen=True, slots=True)
class Dims:
    """Element counts of the usual activation shapes on one device."""

    bsh: int        # b*s*h, split by sequence parallelism (and context parallelism)
    bsh_full: int   # b*s*h, not split by sequence parallelism
    bsf: int        # b*s*f/t
    q: int          # b*(n/t)*s*d
    kv: int         # b*(n_kv/t)*s*d
    scores: int     # b*(n/t)*s*s
    bs: int         # b*s (per-token statistics)


def dims(model: ModelSpec, parallel: ParallelSpec) -> Dims:
    t, s = parallel.tensor, model.seq // parallel.context
    b, h, d = model.batch, model.hidden, model.head_dim
    bsh_full = b * s * h
    return Dims(bsh=bsh_full // (t if parallel.sequence_parallel else 1), bsh_full=bsh_full,
                bsf=b * s * model.ffn // t, q=b * (model.heads // t) * s * d,
                kv=b * max(model.kv_heads // t, 1) * s * d, scores=b * (model.heads // t) * s * model.seq,
                bs=b * s)


def layer_inventory(model: ModelSpec, parallel: ParallelSpec, runtime: str) -> list[Saved]:
    if runtime == "cpu":
        return _cpu_layer(model, dims(model, parallel))
    return _ascend_layer(model, dims(model, parallel))


def _ascend_layer(model: ModelSpec, dim: Dims) -> list[Saved]:
    c = model.compute_bytes
    saved = [
        Saved(path="attention_norm.norm", what="normalised input of wq/wk/wv", nbytes=c * dim.bsh),
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
        saved += [Saved(path="attention.softmax", what="attention probabilities", nbytes=model.softmax_bytes * dim.scores),
                  Saved(path="attention.merger_head_transpose", what="attention output (input of wo)",
                        nbytes=c * dim.q)]
        if groups > 1:
            saved.append(Saved(path="attention.tile_kv", what="k and v repeated to every head",
                               nbytes=c * 2 * (dim.q - dim.kv)))
    saved += [
        Saved(path="add", what="residual after attention (input of ffn_norm)", nbytes=c * dim.bsh),
        Saved(path="ffn_norm.norm", what="normalised input of w1/w3", nbytes=c * dim.bsh),
        Saved(path="ffn_norm.norm", what="rstd (fp32, per token)", nbytes=FP32 * dim.bs),
        Saved(path="feed_forward.w1.matmul", what="w1 output (input of SiLU)", nbytes=c * dim.bsf),
        Saved(path="feed_forward.w3.matmul", what="w3 output", nbytes=c * dim.bsf),
        Saved(path="feed_forward.w1.activation.silu", what="SiLU output", nbytes=c * dim.bsf),
        Saved(path="feed_forward.mul", what="SiLU(w1) * w3 (input of w2)", nbytes=c * dim.bsf),
        Saved(path="add", what="layer output (input of the next layer)", nbytes=c * dim.bsh,
              kept_by_full_recompute=True),
    ]
    return saved


def _cpu_layer(model: ModelSpec, dim: Dims) -> list[Saved]:
    e = FP32
    mha = model.kv_heads == model.heads
    return [
        Saved(path="attention_norm.square", what="2*x of the RmsNorm backward, run early", nbytes=e * dim.bsh,
              cpu_only=True, kept_by_full_recompute=True),
        Saved(path="attention_norm.mul", what="x * rsqrt", nbytes=e * dim.bsh),
        Saved(path="attention_norm.mul2", what="normalised input of wq/wk/wv", nbytes=e * dim.bsh),
        Saved(path="attention_norm.rsqrt", what="rsqrt (per token)", nbytes=e * dim.bs),
        Saved(path="attention.apply_rotary_emb.add", what="q after RoPE" + (" and k" if mha else ""),
              nbytes=e * (dim.q * 2 if mha else dim.q)),
        Saved(path="attention.transpose" if mha else "attention.tile_kv",
              what="v" if mha else "k and v repeated to every head", nbytes=e * (dim.q if mha else 2 * dim.q)),
        Saved(path="attention.softmax", what="attention probabilities", nbytes=e * dim.scores),
        Saved(path="attention.merger_head_transpose", what="attention output (input of wo)", nbytes=e * dim.q),
        Saved(path="add", what="residual after attention (input of ffn_norm)", nbytes=e * dim.bsh),
        Saved(path="ffn_norm.square", what="2*x of the RmsNorm backward, run early", nbytes=e * dim.bsh,
              cpu_only=True),
        Saved(path="ffn_norm.mul", what="x * rsqrt", nbytes=e * dim.bsh),
        Saved(path="ffn_norm.mul2", what="normalised input of w1/w3", nbytes=e * dim.bsh),
        Saved(path="ffn_norm.rsqrt", what="rsqrt (per token)", nbytes=e * dim.bs),
        Saved(path="feed_forward.w1.matmul", what="w1 output", nbytes=e * dim.bsf),
        Saved(path="feed_forward.w3.matmul", what="w3 output", nbytes=e * dim.bsf),
        Saved(path="feed_forward.w1.activation.silu", what="SiLU output (x * sigmoid(x))", nbytes=e * dim.bsf),
        Saved(path="feed_forward.w1.activation.silu", what="sigmoid(x) of the SiLU backward, run early",
              nbytes=e * dim.bsf, cpu_only=True),
        Saved(path="feed_forward.mul", what="SiLU(w1) * w3 (input of w2)", nbytes=e * dim.bsf),
        Saved(path="add", what="layer output (input of the next layer)", nbytes=e * dim.bsh,
              kept_by_full_recompute=True),
    ]


def layer_ops(model: ModelSpec, parallel: ParallelSpec) -> list[Op]:
    """Forward FLOPs of the matmul-class operators of one layer (2 per multiply-add)."""
    t, b, s, h, d = parallel.tensor, model.batch, model.seq // parallel.context, model.hidden, model.head_dim
    heads, kv = model.heads // t, max(model.kv_heads // t, 1)
    core = "attention.flash_attention.flash_attention" if model.flash_attention else "attention.batch_matmul_q_k"
    return [
        Op(path="attention.wq.matmul", flops=2 * b * s * h * heads * d),
        Op(path="attention.wk.matmul", flops=2 * b * s * h * kv * d),
        Op(path="attention.wv.matmul", flops=2 * b * s * h * kv * d),
        Op(path=core, flops=4 * b * heads * s * model.seq * d),
        Op(path="attention.wo.matmul", flops=2 * b * s * heads * d * h),
        Op(path="feed_forward.w1.matmul", flops=2 * b * s * h * model.ffn // t),
        Op(path="feed_forward.w3.matmul", flops=2 * b * s * h * model.ffn // t),
        Op(path="feed_forward.w2.matmul", flops=2 * b * s * model.ffn // t * h),
    ]
