"""What the estimator reads from a training YAML: model shape, dtypes, parallelism, optimizer.

The model's keys are its family's (`models.<family>.model_spec`); parallelism and the optimizer are
read here, the same for every family.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from ..document.errors import ConfigIssue
from ..document.source import Source
from .step import accumulation

DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}
CPU_DTYPES = ("float32", "float16")
DTYPE_ROLES = ("compute", "layernorm", "softmax", "rotary", "param")


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec:
    """A decoder-only model with gated-MLP or MoE layers as the estimator needs it; sizes in elements.

    `dtypes` holds (YAML key, dtype) as the family spells its keys (shown to users); `roles` holds the
    same dtypes by what they type: compute, layernorm, softmax, rotary and param.
    """

    num_layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    seq: int
    batch: int                  # micro-batch size per data-parallel rank
    compute_bytes: int          # the compute dtype (matrix multiplications)
    param_bytes: int            # the parameters' dtype
    softmax_bytes: int          # the attention softmax's dtype
    flash_attention: bool
    tie_embeddings: bool = False
    layernorm_bytes: int = 4    # the norms' compute dtype (the RmsNorm weights are kept in it too)
    rotary_bytes: int = 4       # the rotary embedding's dtype (the cos/sin tables)
    dtypes: tuple[tuple[str, str], ...] = ()  # (YAML key, dtype name) as resolved, MindFormers' defaults filled in
    clip_grad: bool = False     # runner_wrapper.use_clip_grad: the train step's clip-grad casts gradients to float32
    roles: tuple[tuple[str, str], ...] = ()   # (role, dtype name): see DTYPE_ROLES
    head_size: int = 0          # the width of one attention head when the model sets it (mcore head_dim)
    qk_norm: bool = False       # an RMSNorm of queries and keys per head (Qwen3): 2 * head_dim weights a layer
    fused_linears: bool = False  # q, k and v in one Linear, and the MLP's gate and up in one (mcore)
    experts: int = 0            # routed experts of an MoE layer; 0: every layer has a dense MLP
    top_k: int = 0              # experts each token is routed to
    moe_ffn: int = 0            # one routed expert's intermediate size
    shared_ffn: int = 0         # the shared experts' intermediate size, all of them together; 0: none
    dense_layers: int = 0       # the first layers keep a dense MLP of `ffn` (first_k_dense_replace); MoE after them
    mtp_layers: int = 0         # multi-token-prediction layers after the decoder, on the last stage
    # multi-latent attention (DeepSeek-V3): the low ranks of q (0: q is projected directly) and of k/v, and the
    # widths of one head's q/k part without and with the rotary embedding, and of its value
    q_lora: int = 0
    kv_lora: int = 0
    qk_nope: int = 0
    qk_rope: int = 0
    v_head: int = 0

    def to_dict(self) -> dict:
        result = asdict(self)
        del result["roles"]
        for key in _FAMILY_FIELDS:          # a family sets them
            if result[key] == ModelSpec.__dataclass_fields__[key].default:
                del result[key]
        return result

    @property
    def mla(self) -> bool:
        """The attention is multi-latent (q and k/v through low-rank projections)."""
        return self.kv_lora > 0

    def layer_model(self, index: int) -> ModelSpec:
        """The model as decoder layer `index` is built: a layer before `dense_layers` has a dense MLP of `ffn`."""
        if index < self.dense_layers:
            return replace(self, experts=0, top_k=0, moe_ffn=0, shared_ffn=0, dense_layers=0)
        return self

    @property
    def layer_kinds(self) -> tuple[ModelSpec, ...]:
        """The distinct layer models: the dense first layers' (if any), then every other layer's."""
        return (self.layer_model(0), self) if self.dense_layers else (self,)

    @property
    def norm_cast(self) -> bool:
        """The RmsNorm casts its input to the layernorm dtype and keeps that copy for its backward."""
        if not self.roles:
            return self.layernorm_bytes != self.compute_bytes
        return self.dtype("layernorm") != self.dtype("compute")

    @property
    def softmax_cast(self) -> bool:
        """The attention casts the softmax output back to the compute dtype for the next BatchMatMul."""
        if not self.roles:
            return self.softmax_bytes != self.compute_bytes
        return self.dtype("softmax") != self.dtype("compute")

    @property
    def weight_cast(self) -> bool:
        """Each Linear casts its weight to the compute dtype and keeps that copy for the backward."""
        if not self.roles:
            return self.param_bytes != self.compute_bytes
        return self.dtype("param") != self.dtype("compute")

    def dtype(self, role: str) -> str:
        """The dtype name of a role (`compute`, `layernorm`, ...)."""
        return dict(self.roles).get(role, "")

    @property
    def gradient_bytes(self) -> int:
        """Bytes per element of a gradient held during the backward. Clip-grad casts each gradient to
        float32 as soon as it exists (the cast does not wait for the global norm) and keeps that copy
        until the clip; the gradient itself is freed (memory-pool traces, benchmarks/README (e))."""
        return 4 if self.clip_grad else self.param_bytes

    @property
    def head_dim(self) -> int:
        return self.head_size or self.hidden // self.heads

    def layer_param_list(self) -> list[int]:
        """Parameters of one decoder layer in optimizer order: the attention's query, key, value and output
        projections, the MLP's gate, down and up projections, the two norms. With `fused_linears`: the fused
        query-key-value and output projections, the fused gate-up and down projections, the norms. An MoE layer
        (`experts`): the fused attention projections, the experts' gate-up and down weights, the router, the shared
        experts' gate-up and down projections, the norms. A multi-latent attention (`mla`): its linears
        (`mla_attention_params`), the MLP's (`mlp_params`), the two layer norms, the q and k/v norms."""
        d, h, f = self.head_dim, self.hidden, self.ffn
        norms = [h, h, d, d] if self.qk_norm else [h, h]
        if self.mla:
            return [*self.mla_attention_params(), *self.mlp_params(), h, h, *self.mla_norm_params()]
        if self.experts or self.fused_linears:
            return [h * (self.heads + 2 * self.kv_heads) * d, self.heads * d * h, *self.mlp_params(), *norms]
        return [h * self.heads * d, h * self.kv_heads * d, h * self.kv_heads * d, self.heads * d * h,
                h * f, f * h, h * f, *norms]

    def mla_attention_params(self) -> list[int]:
        """A multi-latent attention's linears: q's down and up projections (or q's one projection without a q
        rank), k/v's down projection (its rank and the rotary part), k/v's up projection, the output projection."""
        h, n, q_head = self.hidden, self.heads, self.qk_nope + self.qk_rope
        q = [h * self.q_lora, self.q_lora * n * q_head] if self.q_lora else [h * n * q_head]
        return [*q, h * (self.kv_lora + self.qk_rope), self.kv_lora * n * (self.qk_nope + self.v_head),
                n * self.v_head * h]

    def mla_norm_params(self) -> list[int]:
        """The norms of q's and k/v's low-rank parts (MindFormers builds them with qk_layernorm)."""
        if not self.qk_norm:
            return []
        return [self.q_lora, self.kv_lora] if self.q_lora else [self.kv_lora]

    def mlp_params(self) -> list[int]:
        """The MLP's weights: gate-up and down; an MoE layer's routed experts, router and shared experts."""
        h = self.hidden
        if self.experts:
            shared = [2 * h * self.shared_ffn, self.shared_ffn * h] if self.shared_ffn else []
            return [self.experts * h * 2 * self.moe_ffn, self.experts * self.moe_ffn * h, self.experts * h, *shared]
        return [2 * h * self.ffn, self.ffn * h]

    @property
    def layer_params(self) -> int:
        return sum(self.layer_param_list())

    @property
    def norm_params(self) -> int:
        """The norm weights of one layer (not split by tensor parallelism)."""
        h = self.hidden
        if self.mla:
            return 2 * h + sum(self.mla_norm_params())
        return 2 * h + (2 * self.head_dim if self.qk_norm else 0)

    def largest_params(self) -> list[int]:
        """Every layer kind's weights (`layer_param_list`), for the largest one."""
        return [size for kind in self.layer_kinds for size in kind.layer_param_list()]

    def unit_params(self, units: int) -> list[int]:
        """The parameters of each of a single-stage step's `units` layers in forward order: the decoder layers
        (each of its kind), then the `mtp_layers` MTP layers."""
        decoder = units - self.mtp_layers
        return ([self.layer_model(index).layer_params for index in range(decoder)]
                + [self.mtp_params] * (units - decoder))

    def unit_norm_params(self, units: int) -> list[int]:
        """The norm weights (kept in the layernorm dtype) of each of `units` layers, as `unit_params` orders them."""
        decoder = units - self.mtp_layers
        return ([self.layer_model(index).norm_params for index in range(decoder)]
                + [self.mtp_norm_params] * (units - decoder))

    @property
    def mtp_params(self) -> int:
        """One MTP layer's parameters: its transformer layer (an MoE layer), the two input norms, the projection of
        their concatenation back to the hidden size, the final norm (the embedding and the output head are the
        model's)."""
        return self.layer_params + 2 * self.hidden * self.hidden + 3 * self.hidden

    @property
    def mtp_norm_params(self) -> int:
        """One MTP layer's norm weights: its transformer layer's and its three own norms'."""
        return self.norm_params + 3 * self.hidden

    @property
    def expert_params(self) -> int:
        """The routed experts' weights of one layer (gate-up and down), which expert parallelism splits."""
        return self.experts * 3 * self.hidden * self.moe_ffn


_FAMILY_FIELDS = ("head_size", "qk_norm", "fused_linears", "experts", "top_k", "moe_ffn", "shared_ffn", "dense_layers",
                  "mtp_layers", "q_lora", "kv_lora", "qk_nope", "qk_rope", "v_head")


@dataclass(frozen=True, slots=True, kw_only=True)
class ParallelSpec:
    data: int = 1
    tensor: int = 1             # parallel_config.model_parallel
    pipeline: int = 1
    micro_batches: int = 1      # parallel_config.micro_batch_num
    sequence_parallel: bool = False
    context: int = 1
    vocab_emb_dp: bool = True
    optimizer_shard: bool = False  # parallel.enable_parallel_optimizer: weights and optimizer states split over the
                                   # devices that hold the same slice (`memory.shard_groups`)
    grad_accumulation: int = 1
    expert: int = 1             # parallel_config.expert_parallel: each rank holds experts / expert of every MoE layer
    optimizer_shard_size: int = -1  # parallel_optimizer_config.optimizer_weight_shard_size (-1: the whole group)
    accumulation_shard: bool = False  # parallel_optimizer_config.gradient_accumulation_shard: accu_grads split too
    optimizer_level: str = "level1"  # parallel_optimizer_config.optimizer_level (MindSpore's default level1)
    scheduler: str = "1f1b"     # parallel.pipeline_config.pipeline_scheduler
    seq_split: int = 1          # parallel_config.seq_split_num: seq pipe splits each micro-batch's sequence


@dataclass(frozen=True, slots=True, kw_only=True)
class OptimizerSpec:
    kind: str                   # as written in optimizer.type
    state_bytes: int            # optimizer-state bytes per parameter (fp32 moments)
    swap: bool = False          # optimizer.swap: MindFormers' AdamW creates its moments on the host (device='CPU')


_OPTIMIZER_STATES = {"sgd": 0, "momentum": 4}  # Adam-like optimizers keep two fp32 moments: 8 bytes


def cpu_dtype_issues(source: Source, model: ModelSpec) -> list[ConfigIssue]:
    written = source.get(("model", "model_config")) or {}
    return [source.issue(("model", "model_config", key), f"{value} has no CPU kernels in MindSpore 2.9"
                         + ("" if key in written else " (MindFormers' default: the key is not written)"),
                         "use float32 or float16 with the cpu runtime; bfloat16 is modelled by the ascend runtime")
            for key, value in model.dtypes if value not in CPU_DTYPES]


def positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def dtype_name(value: Any) -> str:
    return str(value).replace("mstype.", "").strip()


def parallel_spec(source: Source) -> ParallelSpec:
    config = source.get(("parallel_config",)) or {}
    return ParallelSpec(
        data=config.get("data_parallel", 1), tensor=config.get("model_parallel", 1),
        pipeline=config.get("pipeline_stage", 1), micro_batches=config.get("micro_batch_num", 1),
        sequence_parallel=bool(config.get("use_seq_parallel", False)), context=config.get("context_parallel", 1),
        vocab_emb_dp=bool(config.get("vocab_emb_dp", True)),
        optimizer_shard=bool(source.get(("parallel", "enable_parallel_optimizer"), False)),
        grad_accumulation=accumulation(source)[0], expert=config.get("expert_parallel", 1) or 1,
        optimizer_shard_size=_int(source.get(OPTIMIZER_CONFIG + ("optimizer_weight_shard_size",), -1), -1),
        accumulation_shard=source.get(OPTIMIZER_CONFIG + ("gradient_accumulation_shard",), False) is True,
        optimizer_level=str(source.get(OPTIMIZER_CONFIG + ("optimizer_level",), "level1")),
        scheduler=str(source.get(("parallel", "pipeline_config", "pipeline_scheduler"), "1f1b")),
        seq_split=max(1, _int(config.get("seq_split_num", 1), 1)))


OPTIMIZER_CONFIG = ("parallel", "parallel_optimizer_config")


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def optimizer_spec(source: Source) -> OptimizerSpec:
    kind = str(source.get(("optimizer", "type"), "AdamW"))
    return OptimizerSpec(kind=kind, state_bytes=_OPTIMIZER_STATES.get(kind.lower(), 8),
                         swap=source.get(("optimizer", "swap"), False) is True)

