"""CPU stand-ins for the four kernels an mcore model needs and MindSpore 2.9's CPU backend lacks.

    owner cell                        attribute             primitive             stand-in
    FusedRMSNorm (every norm)         norm                  RmsNorm               CPURmsNorm
    RotaryEmbedding                   outer, outer_for_eod  Outer                 CPUOuter
    FlashAttention (core_attention)   flash_attention       FlashAttentionScore   CPUFlashAttentionScore
    VocabParallelEmbedding (and the   embedding_morph       Morph (embedding)     CPUEmbeddingLookup
    MTP's subclass, which reads the
    main embedding's weight)

Only the primitive is replaced, under its own attribute name, by a cell with the primitive's call
signature and outputs: the owner cell keeps its class, its parameters (none of these primitives owns
one, so no parameter is renamed and checkpoints load unchanged) and its own code around the kernel
(MindFormers' casts, transposes, GQA reshapes, mask cast). The name moves from the owner's
primitives to its cells, so a pattern naming it still matches; a recompute mark already on the
primitive is carried to the stand-in.

The attention keeps what FlashAttentionScore keeps for its backward (q, k, v, the mask and its
output), not the probabilities: its backward recomputes them, made to wait for the incoming
gradient, or MindSpore merges the recomputation with the forward's identical operators and keeps
the forward's probabilities after all. Layouts BNSD, BSND, BSH and SBH; sparse modes 0-4 (the
compressed 2048x2048 causal mask of modes 2-4 is built at full size); grouped-query attention
(query head h reads key/value head h // (N1 / N2)). Refused with the cell named: TND/TH layouts,
attention dropout, ALiBi (a real_shift), ring attention, and an embedding split by tensor or
sequence parallelism.
"""

from __future__ import annotations

from typing import Any

from mindspore import nn, ops
from mindspore.common import dtype as mstype
from mindspore.ops import operations as P

from .stand_in import StandIn

_LAYOUTS = {0: "BSH", 1: "BNSD", 2: "SBH", 3: "BSND", 4: "TND", 5: "TH"}
_NO_BAND = 2147483647
_MASKED = -1.0e30          # exp() of a masked score, after the row max is subtracted, is exactly 0


class CPURmsNorm(StandIn):
    """`RmsNorm(epsilon)(x, gamma) -> (y, rstd)`: rstd = 1 / sqrt(mean(x^2) + eps) over gamma's axes, in
    float32; y = x * rstd * gamma in float32, cast to x's dtype (as MindFormers' non-fused RMSNorm)."""

    def __init__(self, epsilon: float):
        super().__init__()
        self.epsilon = float(epsilon)
        self.cast, self.square, self.mean = P.Cast(), P.Square(), P.ReduceMean(keep_dims=True)
        self.add, self.rsqrt, self.mul, self.mul_gamma = P.Add(), P.Rsqrt(), P.Mul(), P.Mul()

    def construct(self, x, gamma):
        x32 = self.cast(x, mstype.float32)
        axes = tuple(range(x.ndim - gamma.ndim, x.ndim))
        rstd = self.rsqrt(self.add(self.mean(self.square(x32), axes), self.epsilon))
        y = self.mul_gamma(self.mul(x32, rstd), self.cast(gamma, mstype.float32))
        return self.cast(y, x.dtype), rstd


class CPUOuter(StandIn):
    """`Outer()(a, b) -> a[:, None] * b[None, :]`."""

    def __init__(self):
        super().__init__()
        self.reshape, self.mul = P.Reshape(), P.Mul()

    def construct(self, a, b):
        return self.mul(self.reshape(a, (-1, 1)), self.reshape(b, (1, -1)))


class CPUEmbeddingLookup(StandIn):
    """`embedding_morph(ids, weight)` without tensor parallelism: rows of the weight by Gather, whose
    backward (UnsortedSegmentSum) CPU has; the Embedding kernel's backward it has not."""

    def __init__(self):
        super().__init__()
        self.gather, self.reshape = P.Gather(), P.Reshape()

    def construct(self, ids, weight):
        batch, seq = ids.shape
        return self.reshape(self.gather(weight, self.reshape(ids, (-1,)), 0), (batch, seq, weight.shape[1]))


class _Attention(nn.Cell):
    """softmax(scale * q k^T, masked) v in float32 for q (B, N1, S1, D), k and v (B, N2, S2, D), `discard`
    (bool, True = masked) broadcastable to the scores; the output in q's dtype, with the row max and the
    row sum of exp(score - max). The backward keeps only the inputs and the output."""

    def __init__(self, scale: float):
        super().__init__()
        self.scale = float(scale)
        self.cast, self.reshape, self.tile, self.select = P.Cast(), P.Reshape(), P.Tile(), P.Select()
        self.scores_mm, self.out_mm = P.BatchMatMul(transpose_b=True), P.BatchMatMul()
        self.grad_ta, self.grad_tb, self.grad_mm = (P.BatchMatMul(transpose_a=True), P.BatchMatMul(transpose_b=True),
                                                    P.BatchMatMul())
        self.softmax, self.exp, self.sub, self.mul, self.add = P.Softmax(-1), P.Exp(), P.Sub(), P.Mul(), P.Add()
        self.row_max, self.row_sum = P.ReduceMax(keep_dims=True), P.ReduceSum(keep_dims=True)
        self.group_sum = P.ReduceSum(keep_dims=False)

    def _repeat(self, x, groups):
        """(B, N2, S, D) -> (B, N2 * groups, S, D), query head h reading key/value head h // groups."""
        if groups == 1:
            return x
        batch, heads, seq, dim = x.shape
        return self.reshape(self.tile(self.reshape(x, (batch, heads, 1, seq * dim)), (1, 1, groups, 1)),
                            (batch, heads * groups, seq, dim))

    def _summed(self, x, groups):
        """The gradient of `_repeat`: (B, N2 * groups, S, D) -> (B, N2, S, D)."""
        if groups == 1:
            return x
        batch, heads, seq, dim = x.shape
        return self.group_sum(self.reshape(x, (batch, heads // groups, groups, seq, dim)), 2)

    def _scores(self, q32, k32, discard, shift):
        # `shift` is FlashAttentionScore's real_shift (ALiBi), which the stand-in refuses: it is always None. The
        # branch stays because MindSpore 2.9 does not compile this cell's backward without it ("func graph is
        # empty" in Depend's backward) when the score function has no control flow (measured on Qwen3).
        scores = self.scores_mm(q32, k32)
        if shift is not None:
            scores = self.add(scores, self.cast(shift, mstype.float32))
        scores = self.mul(scores, self.scale)
        return self.select(ops.broadcast_to(discard, scores.shape), ops.zeros_like(scores) + _MASKED, scores)

    def construct(self, q, k, v, discard):
        return self._forward(q, k, v, discard, None)

    def _forward(self, q, k, v, discard, shift):
        groups = q.shape[1] // k.shape[1]
        q32 = self.cast(q, mstype.float32)
        k32 = self._repeat(self.cast(k, mstype.float32), groups)
        v32 = self._repeat(self.cast(v, mstype.float32), groups)
        scores = self._scores(q32, k32, discard, shift)
        top = self.row_max(scores, -1)
        out = self.cast(self.out_mm(self.softmax(scores), v32), q.dtype)
        return out, top, self.row_sum(self.exp(self.sub(scores, top)), -1)

    def bprop(self, q, k, v, discard, out, dout):
        groups = q.shape[1] // k.shape[1]
        q, k, v = ops.depend(q, dout[0]), ops.depend(k, dout[0]), ops.depend(v, dout[0])
        q32 = self.cast(q, mstype.float32)
        k32 = self._repeat(self.cast(k, mstype.float32), groups)
        v32 = self._repeat(self.cast(v, mstype.float32), groups)
        probs = self.softmax(self._scores(q32, k32, discard, None))
        d_out, out32 = self.cast(dout[0], mstype.float32), self.cast(out[0], mstype.float32)
        d_v = self.grad_ta(probs, d_out)
        d_scores = self.mul(probs, self.sub(self.grad_tb(d_out, v32), self.row_sum(self.mul(d_out, out32), -1)))
        d_q = self.mul(self.grad_mm(d_scores, k32), self.scale)
        d_k = self.mul(self.grad_ta(d_scores, q32), self.scale)
        return (self.cast(d_q, q.dtype), self.cast(self._summed(d_k, groups), k.dtype),
                self.cast(self._summed(d_v, groups), v.dtype), ops.zeros_like(discard))


class CPUFlashAttentionScore(StandIn):
    """`FlashAttentionScore(...)(query, key, value, real_shift, drop_mask, padding_mask, attn_mask, prefix,
    actual_seq_qlen, actual_seq_kvlen) -> (softmax_max, softmax_sum, softmax_out, attention_out)` on CPU.

    attention_out = Softmax(Mask(scale * q k^T, attn_mask)) v, in query's dtype; attn_mask 1 = discard, of
    shape (S1, S2), (B, 1, S1, S2) or (B, N1, S1, S2). softmax_max and softmax_sum are FA's row statistics
    broadcast to (B, N1, S1, 8); softmax_out is a placeholder, as FA's is unused."""

    def __init__(self, head_num: int, scale_value: float, input_layout: str, sparse_mode: int = 0,
                 pre_tokens: int = _NO_BAND, next_tokens: int = _NO_BAND):
        super().__init__()
        if input_layout not in ("BNSD", "BSND", "BSH", "SBH"):
            raise ValueError(f"input_layout {input_layout} has no CPU stand-in")
        if sparse_mode not in (0, 1, 2, 3, 4):
            raise ValueError(f"sparse_mode {sparse_mode} has no CPU stand-in")
        self.head_num, self.input_layout, self.sparse_mode = int(head_num), input_layout, int(sparse_mode)
        self.pre_tokens, self.next_tokens = int(pre_tokens), int(next_tokens)
        self.cast, self.reshape, self.transpose, self.either = P.Cast(), P.Reshape(), P.Transpose(), P.LogicalOr()
        self.attention = _Attention(scale_value)

    def _to_bnsd(self, x, heads):
        if self.input_layout == "BNSD":
            return x
        if self.input_layout == "BSND":
            return self.transpose(x, (0, 2, 1, 3))
        if self.input_layout == "BSH":
            batch, seq, width = x.shape
            return self.transpose(self.reshape(x, (batch, seq, heads, width // heads)), (0, 2, 1, 3))
        seq, batch, width = x.shape
        return self.transpose(self.reshape(x, (seq, batch, heads, width // heads)), (1, 2, 0, 3))

    def _from_bnsd(self, x):
        if self.input_layout == "BNSD":
            return x
        if self.input_layout == "BSND":
            return self.transpose(x, (0, 2, 1, 3))
        batch, heads, seq, dim = x.shape
        if self.input_layout == "BSH":
            return self.reshape(self.transpose(x, (0, 2, 1, 3)), (batch, seq, heads * dim))
        return self.reshape(self.transpose(x, (2, 0, 1, 3)), (seq, batch, heads * dim))

    def _key_heads(self, query, key):
        if self.input_layout == "BNSD":
            return key.shape[1]
        if self.input_layout == "BSND":
            return key.shape[2]
        return key.shape[-1] // (query.shape[-1] // self.head_num)

    def _sparse_mask(self, s1, s2):
        """What the sparse mode itself discards, (S1, S2) bool, or None (static shapes: folded at compile)."""
        row = self.reshape(ops.arange(s1, dtype=mstype.int32), (-1, 1))
        col = self.reshape(ops.arange(s2, dtype=mstype.int32), (1, -1))
        if self.sparse_mode == 2:
            return ops.greater(col, row)
        if self.sparse_mode == 3:
            return ops.greater(col, row + (s2 - s1))
        if self.sparse_mode in (0, 4) and (self.pre_tokens < s1 + s2 or self.next_tokens < s1 + s2):
            return self.either(ops.less(col, row - min(self.pre_tokens, s1 + s2)),
                               ops.greater(col, row + min(self.next_tokens, s1 + s2)))
        return None

    def construct(self, query, key, value, real_shift=None, drop_mask=None, padding_mask=None, attn_mask=None,
                  prefix=None, actual_seq_qlen=None, actual_seq_kvlen=None):
        key_heads = self._key_heads(query, key)
        q, k, v = self._to_bnsd(query, self.head_num), self._to_bnsd(key, key_heads), self._to_bnsd(value, key_heads)
        s1, s2 = q.shape[2], k.shape[2]
        discard = None
        if self.sparse_mode in (0, 1):
            if attn_mask is not None:
                discard = self.cast(attn_mask, mstype.bool_)
                band = self._sparse_mask(s1, s2) if self.sparse_mode == 0 else None
                if band is not None:
                    discard = self.either(discard, band)
        else:
            discard = self._sparse_mask(s1, s2)
        if discard is None:
            discard = ops.zeros((s1, s2), mstype.bool_)
        out, top, total = self.attention(q, k, v, discard)
        shape = (out.shape[0], out.shape[1], s1, 8)
        return (ops.broadcast_to(top, shape), ops.broadcast_to(total, shape), ops.zeros((1,), out.dtype),
                self._from_bnsd(out))


def _attention_stand_in(owner: Any, primitive: Any, path: str) -> CPUFlashAttentionScore:
    attrs = primitive.attrs
    layout = getattr(owner, "input_layout", None) or _LAYOUTS[int(attrs["input_layout"])]
    refused = (("TND/TH layout (use_eod_attn_mask_compression)", layout in ("TND", "TH")),
               ("attention dropout", getattr(owner, "enable_dropout", False) or float(attrs.get("keep_prob", 1)) < 1),
               ("ALiBi", getattr(owner, "use_alibi_mask", False)),
               ("ring attention", getattr(owner, "use_ring_attention", False)))
    for what, asked in refused:
        if asked:
            raise ValueError(f"{path}: {what} has no CPU stand-in for FlashAttentionScore")
    return CPUFlashAttentionScore(int(attrs["head_num"]), float(attrs["scale_value"]), layout,
                                  int(attrs["sparse_mode"]), int(attrs["pre_tokens"]), int(attrs["next_tokens"]))


def _stand_in(owner: Any, name: str, primitive: Any, path: str) -> nn.Cell | None:
    kind = type(primitive).__name__
    if kind == "RmsNorm":
        return CPURmsNorm(primitive.attrs["epsilon"])
    if kind == "Outer":
        return CPUOuter()
    if kind == "FlashAttentionScore":
        return _attention_stand_in(owner, primitive, path)
    if kind == "Morph" and name == "embedding_morph" and any(
            cls.__name__ == "VocabParallelEmbedding" for cls in type(owner).__mro__):   # the MTP's shared one too
        if getattr(owner, "enable_embedding_tp", False) or getattr(owner, "sequence_parallel", False):
            raise ValueError(f"{path}: an embedding split by tensor or sequence parallelism has no CPU stand-in")
        return CPUEmbeddingLookup()
    from .moe_kernels import moe_stand_in

    return moe_stand_in(owner, name, primitive, path)


def replace_cpu_kernels(network: Any) -> list[tuple[str, str, str]]:
    """Install the stand-ins in a built mcore network: (path, primitive class, stand-in class) of each.
    Raises ValueError naming the cell for a setting no stand-in implements; the parameters stay as they were."""
    before = [(id(parameter), parameter.name) for parameter in network.get_parameters()]
    found = []
    for owner_path, owner in network.cells_and_names():
        for name, primitive in list(owner._primitives.items()):
            path = f"{owner_path}.{name}" if owner_path else name
            stand_in = None if primitive is None else _stand_in(owner, name, primitive, path)
            if stand_in is not None:
                found.append((owner, name, primitive, stand_in, path))
    for owner, name, primitive, stand_in, _ in found:
        if primitive.attrs.get("recompute") is True:
            getattr(stand_in, "carry_recompute", stand_in.recompute)()
        del owner._primitives[name]
        setattr(owner, name, stand_in)
    if [(id(parameter), parameter.name) for parameter in network.get_parameters()] != before:
        raise AssertionError("the CPU stand-ins changed the network's parameters")
    return [(path, type(primitive).__name__, type(stand_in).__name__) for _, _, primitive, stand_in, path in found]
