"""What the estimator reads from a training YAML: model shape, dtypes, parallelism, optimizer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import ConfigIssue
from ..source import Source

DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}
# LlamaConfig's defaults (MindFormers 1.9): what a YAML without these keys trains with.
DEFAULT_DTYPES = {"compute_dtype": "float16", "layernorm_compute_type": "float32", "softmax_compute_type": "float32",
                  "rotary_dtype": "float32", "param_init_type": "float16"}
CPU_DTYPES = ("float32", "float16")


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec:
    """A MindFormers Llama (LlamaConfig) as the estimator needs it; sizes in elements."""

    num_layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    seq: int
    batch: int                  # micro-batch size per data-parallel rank
    compute_bytes: int          # compute_dtype
    param_bytes: int            # param_init_type
    softmax_bytes: int          # softmax_compute_type
    flash_attention: bool
    tie_embeddings: bool = False
    layernorm_bytes: int = 4    # layernorm_compute_type (the RmsNorm weights are kept in it too)
    rotary_bytes: int = 4       # rotary_dtype (the cos/sin tables)
    dtypes: tuple[tuple[str, str], ...] = ()  # (YAML key, dtype name) as resolved, MindFormers' defaults filled in
    clip_grad: bool = False     # runner_wrapper.use_clip_grad: the train step's clip-grad casts gradients to float32

    @property
    def norm_cast(self) -> bool:
        """The RmsNorm casts its input to layernorm_compute_type and keeps that copy for its backward."""
        if not self.dtypes:
            return self.layernorm_bytes != self.compute_bytes
        return self.dtype("layernorm_compute_type") != self.dtype("compute_dtype")

    @property
    def softmax_cast(self) -> bool:
        """The attention casts the softmax output back to compute_dtype for the next BatchMatMul."""
        if not self.dtypes:
            return self.softmax_bytes != self.compute_bytes
        return self.dtype("softmax_compute_type") != self.dtype("compute_dtype")

    @property
    def weight_cast(self) -> bool:
        """Each Linear casts its weight to compute_dtype and keeps that copy for the backward."""
        if not self.dtypes:
            return self.param_bytes != self.compute_bytes
        return self.dtype("param_init_type") != self.dtype("compute_dtype")

    def dtype(self, key: str) -> str:
        return dict(self.dtypes).get(key, DEFAULT_DTYPES.get(key, ""))

    @property
    def gradient_bytes(self) -> int:
        """Bytes per element of a gradient held during the backward. Clip-grad casts each gradient to
        float32 as soon as it exists (the cast does not wait for the global norm) and keeps that copy
        until the clip; the gradient itself is freed (memory-pool traces, benchmarks/README (e))."""
        return 4 if self.clip_grad else self.param_bytes

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def layer_param_list(self) -> list[int]:
        """Parameters of one decoder layer in optimizer order: wq, wk, wv, wo, w1, w2, w3, the two norms."""
        d, h, f = self.head_dim, self.hidden, self.ffn
        return [h * self.heads * d, h * self.kv_heads * d, h * self.kv_heads * d, self.heads * d * h,
                h * f, f * h, h * f, h, h]

    @property
    def layer_params(self) -> int:
        return sum(self.layer_param_list())


@dataclass(frozen=True, slots=True, kw_only=True)
class ParallelSpec:
    data: int = 1
    tensor: int = 1             # parallel_config.model_parallel
    pipeline: int = 1
    micro_batches: int = 1      # parallel_config.micro_batch_num
    sequence_parallel: bool = False
    context: int = 1
    vocab_emb_dp: bool = True
    optimizer_shard: bool = False  # parallel.enable_parallel_optimizer: optimizer states split over data parallel
    grad_accumulation: int = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class OptimizerSpec:
    kind: str                   # as written in optimizer.type
    state_bytes: int            # optimizer-state bytes per parameter (fp32 moments)


_OPTIMIZER_STATES = {"sgd": 0, "momentum": 4}  # Adam-like optimizers keep two fp32 moments: 8 bytes


def ffn_width(hidden: int, multiple_of: int, intermediate_size: int | None, multiplier: float | None) -> int:
    """LlamaFeedForward's hidden size, as MindFormers 1.9 computes it (llama_layer.py)."""
    if intermediate_size:
        return intermediate_size
    width = 4 * hidden
    if multiplier is not None:
        width = int((multiplier + 0.01) * width)
    width = int(2 * width / 3)
    return multiple_of * ((width + multiple_of - 1) // multiple_of)


_REQUIRED = ("num_layers", "hidden_size", "num_heads", "vocab_size", "seq_length")
_POSITIVE = ("n_kv_heads", "intermediate_size", "multiple_of", "batch_size")


def read_spec(source: Source, issues: list[ConfigIssue]) -> tuple[ModelSpec, ParallelSpec, OptimizerSpec] | None:
    model = source.get(("model", "model_config")) or {}
    if not isinstance(model, dict):
        model = {}
    before = len(issues)
    for key in _REQUIRED:
        value = model.get(key)
        if value is None:
            issues.append(source.issue(("model", "model_config", key), "missing: the estimate needs it",
                                       f"set model.model_config.{key}"))
        elif not _positive_int(value):
            issues.append(source.issue(("model", "model_config", key), f"expected a positive integer, got {value!r}",
                                       "the estimate needs the model's size"))
    for key in _POSITIVE:
        value = model.get(key)
        if value is not None and not _positive_int(value):
            issues.append(source.issue(("model", "model_config", key), f"expected a positive integer, got {value!r}",
                                       f"remove {key} or set a positive integer"))
    _check_heads(source, model, issues)
    _check_dtypes(source, model, issues)
    if len(issues) > before:
        return None
    return _model(source, model), _parallel(source), _optimizer(source)


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _check_heads(source: Source, model: dict[str, Any], issues: list[ConfigIssue]) -> None:
    hidden, heads, kv = model.get("hidden_size"), model.get("num_heads"), model.get("n_kv_heads")
    if _positive_int(hidden) and _positive_int(heads) and hidden % heads:
        issues.append(source.issue(("model", "model_config", "num_heads"),
                                   f"hidden_size {hidden} is not a multiple of num_heads {heads}",
                                   "choose num_heads dividing hidden_size"))
    if _positive_int(heads) and _positive_int(kv) and heads % kv:
        issues.append(source.issue(("model", "model_config", "n_kv_heads"),
                                   f"num_heads {heads} is not a multiple of n_kv_heads {kv}",
                                   "choose n_kv_heads dividing num_heads"))


def _check_dtypes(source: Source, model: dict[str, Any], issues: list[ConfigIssue]) -> None:
    for key in DEFAULT_DTYPES:
        value = model.get(key)
        if value is not None and _dtype_name(value) not in DTYPE_BYTES:
            issues.append(source.issue(("model", "model_config", key), f"unknown dtype {value!r}",
                                       f"use one of {', '.join(DTYPE_BYTES)}"))


def resolved_dtypes(model: dict[str, Any]) -> dict[str, str]:
    """Every dtype key of the model, MindFormers' default where the YAML has none."""
    return {key: _dtype_name(model[key]) if model.get(key) is not None else default
            for key, default in DEFAULT_DTYPES.items()}


def _dtype_name(value: Any) -> str:
    return str(value).replace("mstype.", "").strip()


def _model(source: Source, model: dict[str, Any]) -> ModelSpec:
    hidden, heads = model["hidden_size"], model["num_heads"]
    dtypes = resolved_dtypes(model)
    return ModelSpec(
        num_layers=model["num_layers"], hidden=hidden, heads=heads, kv_heads=model.get("n_kv_heads") or heads,
        ffn=ffn_width(hidden, model.get("multiple_of", 256), model.get("intermediate_size"),
                      model.get("ffn_dim_multiplier")),
        vocab=model["vocab_size"], seq=model["seq_length"],
        batch=source.get(("runner_config", "batch_size")) or model.get("batch_size", 1),
        compute_bytes=DTYPE_BYTES[dtypes["compute_dtype"]], param_bytes=DTYPE_BYTES[dtypes["param_init_type"]],
        softmax_bytes=DTYPE_BYTES[dtypes["softmax_compute_type"]],
        layernorm_bytes=DTYPE_BYTES[dtypes["layernorm_compute_type"]], rotary_bytes=DTYPE_BYTES[dtypes["rotary_dtype"]],
        dtypes=tuple(sorted(dtypes.items())),
        flash_attention=bool(model.get("use_flash_attention", False)),
        tie_embeddings=bool(model.get("tie_word_embeddings", False)),
        clip_grad=source.get(("runner_wrapper", "use_clip_grad"), False) is True)


def _parallel(source: Source) -> ParallelSpec:
    config = source.get(("parallel_config",)) or {}
    return ParallelSpec(
        data=config.get("data_parallel", 1), tensor=config.get("model_parallel", 1),
        pipeline=config.get("pipeline_stage", 1), micro_batches=config.get("micro_batch_num", 1),
        sequence_parallel=bool(config.get("use_seq_parallel", False)), context=config.get("context_parallel", 1),
        vocab_emb_dp=bool(config.get("vocab_emb_dp", True)),
        optimizer_shard=bool(source.get(("parallel", "enable_parallel_optimizer"), False)),
        grad_accumulation=source.get(("runner_config", "gradient_accumulation_steps")) or 1)


def _optimizer(source: Source) -> OptimizerSpec:
    kind = str(source.get(("optimizer", "type"), "AdamW"))
    return OptimizerSpec(kind=kind, state_bytes=_OPTIMIZER_STATES.get(kind.lower(), 8))

