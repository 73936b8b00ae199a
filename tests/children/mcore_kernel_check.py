"""The mcore CPU stand-ins against independent NumPy references, in one MindSpore process (graph mode, CPU).

    python tests/children/mcore_kernel_check.py      # prints one JSON line: {check name: [error, tolerance], ...}

Run by tests/mindspore/test_mcore_kernels.py in a child process: building an mcore model switches MindFormers'
process-wide context to mcore, which the other tests must not inherit.

1. RmsNorm (y, rstd, d x, d gamma against the analytic backward); Outer; the embedding (forward, and the
   weight gradient with repeated ids against np.add.at).
2. FlashAttentionScore in every layout, sparse modes 0, 2 and 3, GQA, MQA and MHA, a (S, S) and a
   (B, 1, S, S) mask: the output, the row max and dq, dk, dv against a NumPy attention and its backward.
3. A whole Qwen3 self-attention (layer 0 of a one-layer model built by MindFormers: fused interleaved QKV,
   GQA, QK RMSNorm with non-unit weights, rotary embedding, the model's own causal mask, the FlashAttention
   cell with the stand-in, output projection) against a NumPy forward from its weights, and its input and
   weight gradients against central differences of that forward along a random direction.
4. A whole Qwen3-MoE `mlp` (MoELayer of a one-layer model built by MindFormers: softmax router, top-2 of 4
   experts, normalised and scaled gates, the gbs aux loss with its accumulated counts, the experts' dispatcher
   and grouped matmuls and Swiglu on their stand-ins) against a NumPy MoE that routes each token sparsely: the
   output, the aux loss, and the gradients of input, router and expert weights along random directions.
5. DeepSeek-V3 (one dense layer, one MoE layer): the MoE block (sigmoid scores, group-limited top-k on the
   scores plus an expert bias, gates from the unbiased scores, normalised and scaled, a shared expert, the
   sequence aux loss) against a NumPy MoE, output and gradients; the multi-latent attention against a NumPy
   forward from its weights (low-rank q and kv, RoPE on the rope parts, a narrower value head), output and
   input gradient.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

os.environ.setdefault("GLOG_v", "3")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import mindspore as ms  # noqa: E402
from mindspore import Tensor, nn, ops  # noqa: E402

from mf_memopt.models.mcore.cpu_kernels import (  # noqa: E402
    CPUEmbeddingLookup,
    CPUFlashAttentionScore,
    CPUOuter,
    CPURmsNorm,
    replace_cpu_kernels,
)

RNG = np.random.default_rng(0)
RESULTS: dict[str, list[float]] = {}


def report(name: str, got, want, tolerance: float) -> None:
    error = float(np.max(np.abs(np.asarray(got, np.float64) - np.asarray(want, np.float64))))
    RESULTS[name] = [error, tolerance]


class _Output(nn.Cell):
    def __init__(self, net, index):
        super().__init__()
        self.net, self.index = net, index

    def construct(self, *args):
        out = self.net(*args)
        return out if self.index is None else out[self.index]


def grads(net, inputs, sens, index=None):
    grad = ops.GradOperation(get_all=True, sens_param=True)(_Output(net, index))
    return [item.asnumpy() for item in grad(*inputs, Tensor(sens))]


def check_gradients(prefix: str, names: list[str], base: list, analytic: list, objective, *, rel_step: float = 1e-4,
                    tolerance: float = 1e-3) -> None:
    """Each analytic gradient against central differences of `objective(*inputs)` (a scalar) along a random
    direction: the relative error of the directional derivative, as `{prefix}: {name} (relative)`."""
    for index, name in enumerate(names):
        direction = RNG.standard_normal(base[index].shape)
        step = rel_step * np.linalg.norm(base[index]) / np.linalg.norm(direction)
        plus, minus = list(base), list(base)
        plus[index], minus[index] = base[index] + step * direction, base[index] - step * direction
        numeric = (objective(*plus) - objective(*minus)) / (2 * step)
        directional = float(np.sum(analytic[index].astype(np.float64) * direction))
        RESULTS[f"{prefix}: {name} (relative)"] = [abs(directional - numeric) / abs(numeric), tolerance]


def np_rms(x, gamma, eps):
    rstd = 1.0 / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps)
    return x * rstd * gamma, rstd


def check_small_kernels() -> None:
    eps = 1e-6
    x = RNG.standard_normal((6, 2, 4, 64)).astype(np.float32)
    gamma = (1 + 0.1 * RNG.standard_normal(64)).astype(np.float32)
    norm = CPURmsNorm(eps)
    y, rstd = norm(Tensor(x), Tensor(gamma))
    want_y, want_rstd = np_rms(x.astype(np.float64), gamma.astype(np.float64), eps)
    report("RmsNorm y", y.asnumpy(), want_y, 1e-5)
    report("RmsNorm rstd", rstd.asnumpy(), want_rstd, 1e-5)
    dy = RNG.standard_normal(x.shape)
    dx, dgamma = grads(norm, (Tensor(x), Tensor(gamma)), dy.astype(np.float32), index=0)
    xhat = x.astype(np.float64) * want_rstd
    scaled = dy * gamma
    report("RmsNorm d x", dx, want_rstd * (scaled - xhat * np.mean(scaled * xhat, -1, keepdims=True)), 1e-4)
    report("RmsNorm d gamma", dgamma, np.sum(dy * xhat, axis=(0, 1, 2)), 1e-3)

    positions = np.arange(256, dtype=np.float32)
    inverse = (1.0 / (1e6 ** (np.arange(0, 64, 2, dtype=np.float32) / 64))).astype(np.float32)
    report("Outer", CPUOuter()(Tensor(positions), Tensor(inverse)).asnumpy(),
           np.outer(positions.astype(np.float64), inverse), 1e-4)

    weight = RNG.standard_normal((512, 64)).astype(np.float32)
    ids = RNG.integers(0, 512, (3, 50)).astype(np.int32)
    ids[0, :5] = 7
    lookup = CPUEmbeddingLookup()
    report("embedding forward", lookup(Tensor(ids), Tensor(weight)).asnumpy(), weight[ids], 0.0)
    dy = RNG.standard_normal((3, 50, 64)).astype(np.float32)
    _, dweight = grads(lookup, (Tensor(ids), Tensor(weight)), dy)
    want = np.zeros_like(weight, dtype=np.float64)
    np.add.at(want, ids.reshape(-1), dy.reshape(-1, 64).astype(np.float64))
    report("embedding d weight", dweight, want, 1e-5)


def np_attention(q, k, v, scale, discard):
    """q (B, N1, S1, D), k and v (B, N2, S2, D): the output, and its backward as a function of d out."""
    groups = q.shape[1] // k.shape[1]
    k_all, v_all = np.repeat(k, groups, axis=1), np.repeat(v, groups, axis=1)
    scores = np.where(discard, -np.inf, np.einsum("bnid,bnjd->bnij", q, k_all) * scale)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)

    def backward(d_out):
        d_probs = np.einsum("bnid,bnjd->bnij", d_out, v_all)
        d_scores = probs * (d_probs - np.sum(d_probs * probs, -1, keepdims=True))
        d_q = np.einsum("bnij,bnjd->bnid", d_scores, k_all) * scale
        d_k = np.einsum("bnij,bnid->bnjd", d_scores, q) * scale
        d_v = np.einsum("bnij,bnid->bnjd", probs, d_out)
        b, n1, s2, d = d_k.shape
        return d_q, d_k.reshape(b, n1 // groups, groups, s2, d).sum(2), d_v.reshape(b, n1 // groups, groups, s2,
                                                                                     d).sum(2)

    return np.einsum("bnij,bnjd->bnid", probs, v_all), scores.max(-1), backward


def to_layout(x, layout):
    b, n, s, d = x.shape
    if layout == "BNSD":
        return x
    if layout == "BSND":
        return x.transpose(0, 2, 1, 3)
    if layout == "BSH":
        return x.transpose(0, 2, 1, 3).reshape(b, s, n * d)
    return x.transpose(2, 0, 1, 3).reshape(s, b, n * d)


class _AttentionOut(nn.Cell):
    def __init__(self, attention):
        super().__init__()
        self.attention = attention

    def construct(self, q, k, v, mask):
        return self.attention(q, k, v, None, None, None, mask)[3]


def check_attention(layout, sparse_mode, mask_form, s1=32, s2=32, b=2, n1=4, n2=2, d=16) -> None:
    q = RNG.standard_normal((b, n1, s1, d)).astype(np.float32)
    k = RNG.standard_normal((b, n2, s2, d)).astype(np.float32)
    v = RNG.standard_normal((b, n2, s2, d)).astype(np.float32)
    scale = 1 / np.sqrt(d)
    causal = np.triu(np.ones((s1, s2), np.uint8), k=1 + (s2 - s1 if sparse_mode == 3 else 0))
    attention = CPUFlashAttentionScore(n1, scale, layout, sparse_mode, 2147483647,
                                       0 if sparse_mode == 0 else 2147483647)
    if mask_form == "S,S":
        mask = Tensor(causal)
    elif mask_form == "B,1,S,S":
        mask = Tensor(np.broadcast_to(causal, (b, 1, s1, s2)).copy())
    else:                                           # the compressed 2048 x 2048 mask of modes 2 and 3
        mask = Tensor(np.triu(np.ones((2048, 2048), np.uint8), k=1))
    inputs = (Tensor(to_layout(q, layout)), Tensor(to_layout(k, layout)), Tensor(to_layout(v, layout)))
    outputs = attention(*inputs, None, None, None, mask)
    want, row_max, backward = np_attention(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64),
                                           scale, causal.astype(bool))
    name = f"attention {layout} sparse_mode {sparse_mode} mask {mask_form} heads {n1}/{n2} S {s1}x{s2}"
    report(f"{name}: out", outputs[3].asnumpy(), to_layout(want, layout), 1e-5)
    report(f"{name}: row max", outputs[0].asnumpy()[..., 0], row_max, 1e-5)
    d_out = RNG.standard_normal(want.shape)
    got = grads(_AttentionOut(attention), (*inputs, mask), to_layout(d_out, layout).astype(np.float32))[:3]
    for label, value, expected in zip(("dq", "dk", "dv"), got, backward(d_out)):
        report(f"{name}: {label}", value, to_layout(expected, layout), 1e-4)


_WORK = tempfile.TemporaryDirectory(prefix="mf_memopt_check_")   # removed when the check ends


def _build(model_config: dict):
    """An mcore model built by MindFormers for one CPU process from `model_config`, the CPU stand-ins installed."""
    from mindformers import build_context
    from mindformers.core.parallel_config import build_parallel_config
    from mindformers.models.build_model import build_network
    from mindformers.tools.register import MindFormerConfig

    config = MindFormerConfig(**{
        "use_legacy": False, "run_mode": "train", "output_dir": _WORK.name,
        "use_parallel": False, "context": {"mode": 0, "device_target": "CPU"}, "parallel": {"parallel_mode": 0},
        "parallel_config": {"data_parallel": 1, "model_parallel": 1, "pipeline_stage": 1},
        "model": {"model_config": model_config}})
    build_context(config)
    build_parallel_config(config)
    network = build_network(config.model, default_args={"parallel_config": config.parallel_config,
                                                        "moe_config": config.moe_config})
    replace_cpu_kernels(network)
    return network


def _qwen3_layer(**model):
    """A one-layer Qwen3 built by MindFormers (hidden 64, 4 heads over 2 KV heads of 16, seq 32), stand-ins on;
    `model` overrides model_config keys (a Qwen3-MoE with them)."""
    from mf_memopt.models.mcore.layers import _TINY

    return _build({**_TINY, "model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "qk_layernorm": True,
                   "rope_theta": 1000000.0, **model})


class AttentionBlock(nn.Cell):
    """A layer's self-attention as the model runs it: the model's causal mask and rotary embedding around it."""

    def __init__(self, gpt, attention):
        super().__init__()
        self.gpt, self.attention = gpt, attention

    def construct(self, hidden, input_ids):
        mask = self.gpt.preprocess_labels_and_masks.casual_mask(input_ids)
        out, _ = self.attention(hidden, mask, rotary_pos_emb=self.gpt.rotary_pos_emb(hidden.shape[0]))
        return out


def np_rope(x, emb):
    half = x.shape[-1] // 2
    return x * np.cos(emb) + np.concatenate([-x[..., half:], x[..., :half]], -1) * np.sin(emb)


def check_self_attention() -> None:
    network = _qwen3_layer()
    gpt = network.model
    attention = gpt.decoder.layers[0].self_attention
    cfg = gpt.config
    s, b, h = cfg.seq_length, 2, cfg.hidden_size
    n1, n2, d = cfg.num_attention_heads, cfg.num_query_groups, cfg.kv_channels
    attention.q_layernorm.weight.set_data(Tensor((1 + 0.2 * RNG.standard_normal(d)).astype(np.float32)))
    attention.k_layernorm.weight.set_data(Tensor((1 + 0.2 * RNG.standard_normal(d)).astype(np.float32)))
    x = RNG.standard_normal((s, b, h)).astype(np.float32)
    ids = Tensor(RNG.integers(1, cfg.vocab_size, (b, s)).astype(np.int32))

    block = AttentionBlock(gpt, attention)
    block.set_train(True)
    out = block(Tensor(x), ids).asnumpy()
    w_qkv, w_out = (attention.linear_qkv.weight.asnumpy().astype(np.float64),
                    attention.linear_proj.weight.asnumpy().astype(np.float64))
    g_q, g_k = (attention.q_layernorm.weight.asnumpy().astype(np.float64),
                attention.k_layernorm.weight.asnumpy().astype(np.float64))
    eps, groups = attention.q_layernorm.eps, n1 // n2
    inverse = 1.0 / (cfg.rotary_base ** (np.arange(0, d, 2, dtype=np.float32) / d))
    freqs = np.outer(np.arange(s, dtype=np.float32), inverse).astype(np.float64)
    emb = np.concatenate([freqs, freqs], -1).reshape(s, 1, 1, d)
    causal = np.triu(np.ones((s, s), bool), k=1)

    def forward(hidden, qkv_weight, out_weight, q_gamma, k_gamma, fp16=True):
        # MindFormers' mcore attention casts q, k and v to float16 before flash attention, whose output is float16
        rounded = (lambda a: a.astype(np.float16).astype(np.float64)) if fp16 else (lambda a: a)
        qkv = (hidden @ qkv_weight.T).reshape(s, b, n2, (groups + 2) * d)      # interleaved per KV group
        q = qkv[..., :groups * d].reshape(s, b, n1, d)
        k, v = qkv[..., groups * d:(groups + 1) * d], qkv[..., (groups + 1) * d:]
        q, k = np_rope(np_rms(q, q_gamma, eps)[0], emb), np_rope(np_rms(k, k_gamma, eps)[0], emb)
        tq, tk, tv = (rounded(t).transpose(1, 2, 0, 3) for t in (q, k, v))
        attended = np_attention(tq, tk, tv, 1 / np.sqrt(d), causal)[0]
        return rounded(attended).transpose(2, 0, 1, 3).reshape(s, b, n1 * d) @ out_weight.T

    report("Qwen3 self-attention: out", out, forward(x.astype(np.float64), w_qkv, w_out, g_q, g_k), 5e-5)
    dy = RNG.standard_normal(out.shape).astype(np.float32)
    weights = ms.ParameterTuple([attention.linear_qkv.weight, attention.linear_proj.weight,
                                 attention.q_layernorm.weight, attention.k_layernorm.weight])
    (dx, _), weight_grads = ops.GradOperation(get_all=True, get_by_list=True, sens_param=True)(block, weights)(
        Tensor(x), ids, Tensor(dy))
    base = [x.astype(np.float64), w_qkv, w_out, g_q, g_k]
    analytic = [dx.asnumpy(), *(grad.asnumpy() for grad in weight_grads)]
    names = ["d input", "d linear_qkv.weight", "d linear_proj.weight", "d q_layernorm.weight", "d k_layernorm.weight"]
    # the gradient went through float16 q, k, v: 2% on the directional derivative
    check_gradients("Qwen3 self-attention", names, base, analytic,
                    lambda *inputs: np.sum(forward(*inputs, fp16=False) * dy), rel_step=1e-3, tolerance=2e-2)


class MoeObjective(nn.Cell):
    """An MoE block's (hidden, dy) -> (sum(out * dy) + aux loss, out, aux loss): one scalar to differentiate."""

    def __init__(self, moe):
        super().__init__()
        self.moe = moe

    def construct(self, hidden, dy):
        out, _, aux = self.moe(hidden)
        return ops.reduce_sum(out * dy) + aux, out, aux


def tokens(a, hidden):
    """(S, B, h) -> (B*S, h): an MoE layer routes its tokens batch-major."""
    return a.transpose(1, 0, 2).reshape(-1, hidden)


def np_moe(x, router_w, w1, w2, *, topk, scaling, normalize, aux_coeff, fi_accu):
    """MindFormers' MoELayer (softmax TopKRouter, gbs_aux_loss; alltoall dispatcher and grouped matmuls) in NumPy:
    x (N, h) -> out (N, h) and the aux loss."""
    experts = router_w.shape[0]
    logits = x @ router_w.T
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    index = np.argsort(-probs, -1, kind="stable")[:, :topk]
    gate = np.take_along_axis(probs, index, -1)
    if normalize and topk > 1:
        gate = gate / (gate.sum(-1, keepdims=True) + 1e-20)
    gate = scaling * gate
    h, f = x.shape[1], w2.shape[0] // experts
    w1, w2 = w1.reshape(experts, h, 2 * f), w2.reshape(experts, f, h)
    out = np.zeros_like(x)
    for n in range(x.shape[0]):
        for j in range(topk):
            e = index[n, j]
            a, b = np.split(x[n] @ w1[e], 2)
            out[n] += gate[n, j] * ((a / (1 + np.exp(-a)) * b) @ w2[e])
    pi = probs.mean(0)
    fi = np.bincount(index.reshape(-1), minlength=experts) / index.size
    accumulated = fi_accu + fi
    aux = np.mean(pi * accumulated / accumulated.sum()) * aux_coeff * experts ** 2
    return out, aux


def check_moe_layer() -> None:
    """A Qwen3-MoE layer's `mlp` (router, TopkExt, the experts' dispatcher and grouped matmuls, Swiglu, on their
    stand-ins) against `np_moe`: output, aux loss, and the gradients of sum(out * dy) + aux loss."""
    settings = {"topk": 2, "scaling": 1.5, "normalize": True, "aux_coeff": 0.01}
    network = _qwen3_layer(model_type="qwen3_moe", architectures=["Qwen3MoeForCausalLM"], hidden_act="silu",
                           num_experts=4, num_experts_per_tok=settings["topk"], moe_intermediate_size=32,
                           router_dense_type="float32", norm_topk_prob=True, moe_grouped_gemm=True,
                           routed_scaling_factor=settings["scaling"], moe_aux_loss_coeff=settings["aux_coeff"],
                           moe_router_load_balancing_type="gbs_aux_loss")
    moe = network.model.decoder.layers[0].mlp
    s, b, h = 32, 2, 64

    block = MoeObjective(moe)
    block.set_train(True)
    x = RNG.standard_normal((s, b, h)).astype(np.float32)
    dy = RNG.standard_normal((s, b, h)).astype(np.float32)
    moe.router.weight.set_data(Tensor(RNG.standard_normal(moe.router.weight.shape).astype(np.float32)))
    parameters = [moe.router.weight, moe.experts.weight1, moe.experts.weight2]
    base = [x.astype(np.float64), *(p.asnumpy().astype(np.float64) for p in parameters)]

    def objective(hidden, router_w, w1, w2, fi_accu):
        out, aux = np_moe(tokens(hidden, h), router_w, w1, w2, fi_accu=fi_accu, **settings)
        return np.sum(out * tokens(dy.astype(np.float64), h)) + aux, out, aux

    fi_accu = np.zeros(4)
    moe.router.fi_accu.set_data(Tensor(fi_accu.astype(np.float32)))
    _, out, aux = block(Tensor(x), Tensor(dy))
    _, want_out, want_aux = objective(*base, fi_accu)
    report("Qwen3-MoE layer: out", tokens(out.asnumpy(), h), want_out, 5e-5)
    report("Qwen3-MoE layer: aux loss", aux.asnumpy(), want_aux, 1e-6)
    # the gbs aux loss accumulates expert counts across steps (fi_accu): the second step reads the first's
    fi_accu = moe.router.fi_accu.asnumpy().astype(np.float64)
    grad = ops.GradOperation(get_all=True, get_by_list=True)(_Output(block, 0), ms.ParameterTuple(parameters))
    (dx, _), weight_grads = grad(Tensor(x), Tensor(dy))
    analytic = [dx.asnumpy(), *(g.asnumpy() for g in weight_grads)]
    check_gradients("Qwen3-MoE layer", ["d input", "d router.weight", "d experts.weight1", "d experts.weight2"],
                    base, analytic, lambda *inputs: objective(*inputs, fi_accu)[0])


# A DeepSeek-V3 with a dense first layer and an MoE second one (multi-latent attention, a shared expert, sigmoid
# routing with an expert bias, limited to the best of two groups of two experts), as
# tests/helpers/mcore_differential.py's
_DEEPSEEK = {"model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": 2,
             "hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 32, "num_attention_heads": 4,
             "num_key_value_heads": 4, "q_lora_rank": 32, "kv_lora_rank": 16, "qk_nope_head_dim": 16,
             "qk_rope_head_dim": 8, "v_head_dim": 16, "vocab_size": 128, "seq_length": 32, "max_position_embeddings": 32,
             "n_routed_experts": 4, "num_experts_per_tok": 2, "n_shared_experts": 1, "first_k_dense_replace": 1,
             "n_group": 2, "topk_group": 1, "routed_scaling_factor": 2.5, "norm_topk_prob": True,
             "num_nextn_predict_layers": 1, "mtp_loss_factor": 0.3, "moe_router_score_function": "sigmoid",
             "moe_router_enable_expert_bias": True, "moe_router_load_balancing_type": "seq_aux_loss",
             "moe_aux_loss_coeff": 0.01, "moe_router_dtype": "float32", "gated_linear_unit": True,
             "moe_grouped_gemm": True, "use_pad_tokens": False, "moe_token_dispatcher_type": "alltoall",
             "add_bias_linear": False, "use_flash_attention": True, "use_attn_mask_compression": False,
             "multi_latent_attention": True, "mla_qkv_concat": False, "qk_layernorm": True, "hidden_act": "silu",
             "params_dtype": "float32", "compute_dtype": "float32", "layernorm_compute_dtype": "float32",
             "softmax_compute_dtype": "float32", "rotary_dtype": "float32"}


def _deepseek():
    return _build(dict(_DEEPSEEK))


def np_silu_gate(h):
    """MindFormers' interleaved gated MLP activation: gate and up alternate in the fused output's columns."""
    gate, up = h[..., 0::2], h[..., 1::2]
    return gate / (1 + np.exp(-gate)) * up


def np_deepseek_moe(x, router_w, bias, w1, w2, shared_fc1, shared_fc2, *, topk, groups, topk_groups, scaling,
                    coeff):
    """DeepSeek-V3's MoE block in NumPy: sigmoid scores; experts chosen on the scores plus the expert bias, within
    the `topk_groups` best groups (a group scored by the sum of its best topk/topk_groups biased scores); gates the
    unbiased scores at the chosen experts, normalised and scaled; plus the shared expert; the sequence aux loss."""
    experts = router_w.shape[0]
    scores = 1 / (1 + np.exp(-(x @ router_w.T)))
    biased = scores + bias
    per_group = biased.reshape(len(x), groups, -1)
    group_score = np.sort(per_group, -1)[..., ::-1][..., :topk // topk_groups].sum(-1)
    best_groups = np.argsort(-group_score, -1, kind="stable")[:, :topk_groups]
    keep = np.zeros_like(group_score, bool)
    np.put_along_axis(keep, best_groups, True, -1)
    masked = np.where(np.repeat(keep, experts // groups, -1), biased, 0.0)
    index = np.argsort(-masked, -1, kind="stable")[:, :topk]
    gate = np.take_along_axis(scores, index, -1)
    gate = scaling * gate / (gate.sum(-1, keepdims=True) + 1e-20)
    h, f = x.shape[1], w2.shape[0] // experts
    w1, w2 = w1.reshape(experts, h, 2 * f), w2.reshape(experts, f, h)
    out = np_silu_gate(x @ shared_fc1.T) @ shared_fc2.T
    for n in range(len(x)):
        for j in range(topk):
            e = index[n, j]
            a, b = np.split(x[n] @ w1[e], 2)
            out[n] += gate[n, j] * ((a / (1 + np.exp(-a)) * b) @ w2[e])
    p = (scores / (scores.sum(-1, keepdims=True) + 1e-20)).mean(0)
    load = np.bincount(index.reshape(-1), minlength=experts) / index.size
    return out, coeff * experts * np.sum(p * load)


def check_deepseek_moe() -> None:
    """DeepSeek-V3's MoE block (layer 1: router with group-limited top-k and expert bias on the top-k stand-in, the
    experts on theirs, the shared expert) against `np_deepseek_moe`: output, aux loss and gradients."""
    network = _deepseek()
    moe = network.model.decoder.layers[1].mlp
    s, b, h = 32, 2, 64
    settings = {"topk": 2, "groups": 2, "topk_groups": 1, "scaling": 2.5, "coeff": 0.01}

    block = MoeObjective(moe)
    block.set_train(True)
    x = RNG.standard_normal((s, b, h)).astype(np.float32)
    dy = RNG.standard_normal((s, b, h)).astype(np.float32)
    moe.router.weight.set_data(Tensor(RNG.standard_normal(moe.router.weight.shape).astype(np.float32)))
    # a positive bias: a negative biased score could tie with the zeros MindFormers puts on the other groups'
    # experts, and the order of tied top-k picks is the kernel's own
    bias = (0.3 * RNG.random(4)).astype(np.float32)
    moe.router.expert_bias.set_data(Tensor(bias))
    parameters = [moe.router.weight, moe.experts.weight1, moe.experts.weight2, moe.shared_experts.linear_fc1.weight,
                  moe.shared_experts.linear_fc2.weight]
    base = [x.astype(np.float64), *(p.asnumpy().astype(np.float64) for p in parameters)]

    def objective(hidden, router_w, w1, w2, shared_fc1, shared_fc2):
        out, aux = np_deepseek_moe(tokens(hidden, h), router_w, bias.astype(np.float64), w1, w2, shared_fc1,
                                   shared_fc2, **settings)
        return np.sum(out * tokens(dy.astype(np.float64), h)) + aux, out, aux

    _, out, aux = block(Tensor(x), Tensor(dy))
    _, want_out, want_aux = objective(*base)
    report("DeepSeek-V3 MoE block: out", tokens(out.asnumpy(), h), want_out, 5e-5)
    report("DeepSeek-V3 MoE block: aux loss", aux.asnumpy(), want_aux, 1e-6)
    grad = ops.GradOperation(get_all=True, get_by_list=True)(_Output(block, 0), ms.ParameterTuple(parameters))
    (dx, _), weight_grads = grad(Tensor(x), Tensor(dy))
    analytic = [dx.asnumpy(), *(g.asnumpy() for g in weight_grads)]
    names = ["d input", "d router.weight", "d experts.weight1", "d experts.weight2", "d shared_experts.linear_fc1",
             "d shared_experts.linear_fc2"]
    check_gradients("DeepSeek-V3 MoE block", names, base, analytic, lambda *inputs: objective(*inputs)[0])


def check_multi_latent_attention() -> None:
    """DeepSeek-V3's attention (layer 0: q and kv down-projections with their norms, up-projections, RoPE on the
    q/k rope parts after MindFormers' de-interleave, one rope key shared by every head, a value head narrower than
    the query's, FlashAttention on its stand-in, output projection) against a NumPy forward from its weights, with
    the model's causal mask and softmax scale; the input gradient along a random direction."""
    network = _deepseek()
    gpt = network.model
    attention = gpt.decoder.layers[0].self_attention
    c = _DEEPSEEK
    s, b, h, n = c["seq_length"], 2, c["hidden_size"], c["num_attention_heads"]
    dn, dr, dv, rank = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"], c["kv_lora_rank"]
    for linear in (attention.linear_q_down_proj, attention.linear_q_up_proj, attention.linear_kv_down_proj,
                   attention.linear_kv_up_proj):       # larger weights: scores far from uniform, RoPE and scale matter
        linear.weight.set_data(Tensor(linear.weight.asnumpy() * 30))
    x = RNG.standard_normal((s, b, h)).astype(np.float32)
    ids = Tensor(RNG.integers(1, c["vocab_size"], (b, s)).astype(np.int32))

    block = AttentionBlock(gpt, attention)
    block.set_train(True)
    out = block(Tensor(x), ids).asnumpy()
    weight = {name: getattr(attention, name).weight.asnumpy().astype(np.float64)
              for name in ("linear_q_down_proj", "linear_q_up_proj", "linear_kv_down_proj", "linear_kv_up_proj",
                           "linear_proj", "q_layernorm", "kv_layernorm")}
    eps, scale = attention.q_layernorm.eps, float(attention.softmax_scale)
    inverse = 1.0 / (c.get("rope_theta", 10000.0) ** (np.arange(0, dr, 2, dtype=np.float32) / dr))
    freqs = np.outer(np.arange(s, dtype=np.float32), inverse).astype(np.float64)
    emb = np.concatenate([freqs, freqs], -1).reshape(s, 1, 1, dr)
    causal = np.triu(np.ones((s, s), bool), k=1)

    def rope(t):           # MindFormers' MLA de-interleaves the rope part before the rotate-half RoPE
        return np_rope(np.concatenate([t[..., 0::2], t[..., 1::2]], -1), emb)

    def forward(hidden):
        q = np_rms(hidden @ weight["linear_q_down_proj"].T, weight["q_layernorm"], eps)[0]
        q = (q @ weight["linear_q_up_proj"].T).reshape(s, b, n, dn + dr)
        down = hidden @ weight["linear_kv_down_proj"].T
        latent, k_rope = np_rms(down[..., :rank], weight["kv_layernorm"], eps)[0], down[..., rank:]
        kv = (latent @ weight["linear_kv_up_proj"].T).reshape(s, b, n, dn + dv)
        q = np.concatenate([q[..., :dn], rope(q[..., dn:])], -1)
        k = np.concatenate([kv[..., :dn], np.broadcast_to(rope(k_rope.reshape(s, b, 1, dr)), (s, b, n, dr))], -1)
        tq, tk, tv = (t.transpose(1, 2, 0, 3) for t in (q, k, kv[..., dn:]))
        attended = np_attention(tq, tk, tv, scale, causal)[0]
        return attended.transpose(2, 0, 1, 3).reshape(s, b, n * dv) @ weight["linear_proj"].T

    report("DeepSeek-V3 multi-latent attention: out", out, forward(x.astype(np.float64)), 1e-4)
    dy = RNG.standard_normal(out.shape).astype(np.float32)
    dx = ops.GradOperation(get_all=True, sens_param=True)(block)(Tensor(x), ids, Tensor(dy))[0].asnumpy()
    check_gradients("DeepSeek-V3 multi-latent attention", ["d input"], [x.astype(np.float64)], [dx],
                    lambda hidden: np.sum(forward(hidden) * dy))


def main() -> int:
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    ms.set_seed(0)        # the models' initial weights: every run checks the same numbers
    check_small_kernels()
    for layout in ("BNSD", "BSND", "BSH", "SBH"):
        check_attention(layout, 0, "S,S")
    check_attention("BNSD", 0, "B,1,S,S")
    check_attention("BNSD", 2, "2048")
    check_attention("BNSD", 3, "2048", s1=16, s2=32)
    check_attention("BNSD", 0, "S,S", n1=4, n2=1)
    check_attention("BNSD", 0, "S,S", n1=4, n2=4)
    check_self_attention()
    check_moe_layer()
    check_deepseek_moe()
    check_multi_latent_attention()
    print(json.dumps(RESULTS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
