"""What the estimator reads from a training YAML: model shape, dtypes, parallelism, optimizer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import ConfigIssue
from ..source import Source

DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}


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


def read_spec(source: Source, issues: list[ConfigIssue]) -> tuple[ModelSpec, ParallelSpec, OptimizerSpec] | None:
    model = source.get(("model", "model_config")) or {}
    missing = [key for key in ("num_layers", "hidden_size", "num_heads", "vocab_size", "seq_length")
               if not isinstance(model.get(key), int)]
    for key in missing:
        issues.append(source.issue(("model", "model_config", key), "missing: the estimate needs it",
                                   f"set model.model_config.{key}"))
    if missing:
        return None
    return _model(source, model), _parallel(source), _optimizer(source)


def _model(source: Source, model: dict[str, Any]) -> ModelSpec:
    hidden, heads = model["hidden_size"], model["num_heads"]
    return ModelSpec(
        num_layers=model["num_layers"], hidden=hidden, heads=heads, kv_heads=model.get("n_kv_heads") or heads,
        ffn=ffn_width(hidden, model.get("multiple_of", 256), model.get("intermediate_size"),
                      model.get("ffn_dim_multiplier")),
        vocab=model["vocab_size"], seq=model["seq_length"],
        batch=source.get(("runner_config", "batch_size")) or model.get("batch_size", 1),
        compute_bytes=_bytes(model.get("compute_dtype", "float16")),
        param_bytes=_bytes(model.get("param_init_type", "float16")),
        softmax_bytes=_bytes(model.get("softmax_compute_type", "float32")),
        flash_attention=bool(model.get("use_flash_attention", False)),
        tie_embeddings=bool(model.get("tie_word_embeddings", False)))


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


def _bytes(dtype: Any) -> int:
    return DTYPE_BYTES.get(str(dtype).replace("mstype.", ""), 2)
