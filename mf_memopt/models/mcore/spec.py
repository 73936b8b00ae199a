"""An mcore model's keys read into the estimator's `ModelSpec`, as MindFormers builds the model.

A key the YAML leaves out takes the architecture's config-class default (head_dim 128, ...) or
TransformerConfig's dtype default (`keys.py`), so the estimate prices the model MindFormers builds.
"""

from __future__ import annotations

from ...document.errors import ConfigIssue
from ...document.source import Source
from ...estimate.spec import DTYPE_BYTES, ModelSpec, dtype_name, positive_int
from ...estimate.step import step_form
from .keys import DTYPE_DEFAULTS, MODEL, architecture, mcore_view, model_value

# dtype key -> role (estimate.spec.DTYPE_ROLES)
DTYPE_ROLES = {"compute_dtype": "compute", "layernorm_compute_dtype": "layernorm",
               "softmax_compute_dtype": "softmax", "rotary_dtype": "rotary", "params_dtype": "param"}
_SHAPE = ("num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
          "intermediate_size", "vocab_size", "seq_length")
_MOE_SHAPE = ("num_experts", "num_experts_per_tok", "moe_intermediate_size")
# MindFormers' Qwen3 layer specs build the q/k norms whatever qk_layernorm says (modeling_qwen3*_train.py)
_QK_NORM_ALWAYS = ("Qwen3ForCausalLM", "Qwen3MoeForCausalLM")
_MLA_SHAPE = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


def cpu_spec_issues(source: Source, model: ModelSpec) -> list[ConfigIssue]:
    """The parts of the model the CPU memory model has no terms for: the ascend runtime estimates them."""
    if not model.mla or model.compute_bytes == DTYPE_BYTES["float32"]:
        return []
    view, _ = mcore_view(source)
    return [view.issue((*MODEL, "compute_dtype"), "the CPU memory model of multi-latent attention was read off "
                       "float32 layers only", "estimate with the ascend runtime, or measure the CPU peak by "
                       "training (estimate --measure)")]


def _count(view: Source, key: str, issues: list[ConfigIssue], *, zero: bool = False) -> int | None:
    """A model key that must be a positive integer (or 0 with `zero`); None after reporting it."""
    value = model_value(view, key)
    if value is None and zero:
        return 0
    if positive_int(value) or (zero and value == 0 and not isinstance(value, bool)):
        return value
    issues.append(view.issue((*MODEL, key), f"expected a {'non-negative' if zero else 'positive'} integer, got "
                             f"{value!r}", "the estimate needs the model's size"))
    return None


def _mla(view: Source, issues: list[ConfigIssue]) -> dict[str, int]:
    """Multi-latent attention's ranks and head widths (q_lora_rank 0 or null: q is projected directly)."""
    if not model_value(view, "multi_latent_attention"):
        return {}
    shape = {key: _count(view, key, issues) for key in _MLA_SHAPE}
    written_null = view.has((*MODEL, "q_lora_rank")) and view.get((*MODEL, "q_lora_rank")) is None
    q_lora = 0 if written_null else _count(view, "q_lora_rank", issues, zero=True)
    if None in shape.values() or q_lora is None:
        return {}
    return {"q_lora": q_lora, "kv_lora": shape["kv_lora_rank"], "qk_nope": shape["qk_nope_head_dim"],
            "qk_rope": shape["qk_rope_head_dim"], "v_head": shape["v_head_dim"]}


def _shared_ffn(view: Source) -> int:
    """The shared experts' intermediate size as MindFormers sets it: the YAML's, else shared experts x one's."""
    written = view.get((*MODEL, "moe_shared_expert_intermediate_size"))
    if isinstance(written, int) and written > 0:
        return written
    return (model_value(view, "n_shared_experts") or 0) * model_value(view, "moe_intermediate_size")


def _flash_attention(view: Source) -> bool:
    """`use_flash_attention` as MindFormers builds the model: TransformerConfig's default is True. Without it,
    `SelfAttention.construct` (`parallel_core/training_graph/transformer/attention.py`) hands q, k and v to the
    core attention in the compute dtype (with flash attention it casts them to float16) and the attention mask
    stays in the compute dtype until the core attention's uint8 cast (`mask_generate.py`)."""
    return model_value(view, "use_flash_attention") is not False


def model_spec(source: Source, issues: list[ConfigIssue]) -> ModelSpec | None:
    view, _ = mcore_view(source)            # how the YAML spells its keys is reported by `validate`
    arch, path = architecture(view)
    if arch is None:
        issues.append(view.issue(path, "a model with no known architecture is not modelled: the estimate does not "
                                 "price another model as one", "name the architecture (model_config.architectures)"))
        return None
    reported = len(issues)
    mla = _mla(view, issues)
    dense = _count(view, "first_k_dense_replace", issues, zero=True) if arch.moe else 0
    mtp = _count(view, "num_nextn_predict_layers", issues, zero=True)
    if len(issues) > reported:
        return None
    shape = _SHAPE + (_MOE_SHAPE if arch.moe else ())
    values = {key: _count(view, key, issues) for key in shape}
    if None in values.values():
        return None
    dtypes = {key: dtype_name(model_value(view, key)) for key in DTYPE_DEFAULTS}
    unknown = [key for key, name in dtypes.items() if name not in DTYPE_BYTES]
    for key in unknown:
        issues.append(view.issue((*MODEL, key), f"unknown dtype {dtypes[key]!r}", "float32, float16 or bfloat16"))
    if unknown:
        return None
    by_role = {DTYPE_ROLES[key]: name for key, name in dtypes.items()}
    # only Qwen3's and Qwen3-MoE's training models share the matrices, and they read tie_word_embeddings alone
    tied = arch.ties and bool(model_value(view, "tie_word_embeddings"))
    return ModelSpec(
        num_layers=values["num_hidden_layers"], hidden=values["hidden_size"], heads=values["num_attention_heads"],
        kv_heads=values["num_key_value_heads"], head_size=values["head_dim"], ffn=values["intermediate_size"],
        vocab=values["vocab_size"], seq=values["seq_length"],
        batch=view.get(("runner_config", "batch_size")) or 1,
        compute_bytes=DTYPE_BYTES[by_role["compute"]], param_bytes=DTYPE_BYTES[by_role["param"]],
        softmax_bytes=DTYPE_BYTES[by_role["softmax"]], layernorm_bytes=DTYPE_BYTES[by_role["layernorm"]],
        rotary_bytes=DTYPE_BYTES[by_role["rotary"]], dtypes=tuple(sorted(dtypes.items())),
        roles=tuple(sorted(by_role.items())), flash_attention=_flash_attention(view), tie_embeddings=tied,
        qk_norm=arch.name in _QK_NORM_ALWAYS or bool(model_value(view, "qk_layernorm")),
        clip_grad=step_form(view).clip_grad, fused_linears=True, dense_layers=dense, mtp_layers=mtp, **mla,
        **({"experts": values["num_experts"], "top_k": values["num_experts_per_tok"],
            "moe_ffn": values["moe_intermediate_size"], "shared_ffn": _shared_ffn(view)} if arch.moe else {}))
