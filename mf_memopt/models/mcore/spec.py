"""An mcore model's keys read into the estimator's `ModelSpec`, as MindFormers builds the model.

A key the YAML leaves out takes the architecture's config-class default (head_dim 128, ...) or
TransformerConfig's dtype default (`keys.py`), so the estimate prices the model MindFormers builds.
"""

from __future__ import annotations

from ...config.errors import ConfigIssue
from ...config.source import Source
from ...estimate.spec import DTYPE_BYTES, ModelSpec, dtype_name, positive_int
from ...estimate.step import step_form
from .keys import DTYPE_DEFAULTS, MODEL, Architecture, architecture, mcore_view, model_value

# dtype key -> role (estimate.spec.DTYPE_ROLES)
DTYPE_ROLES = {"compute_dtype": "compute", "layernorm_compute_dtype": "layernorm",
               "softmax_compute_dtype": "softmax", "rotary_dtype": "rotary", "params_dtype": "param"}
_SHAPE = ("num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
          "intermediate_size", "vocab_size", "seq_length")
_MOE_SHAPE = ("num_experts", "num_experts_per_tok", "moe_intermediate_size")
# MindFormers' Qwen3 layer specs build the q/k norms whatever qk_layernorm says (modeling_qwen3*_train.py)
_QK_NORM_ALWAYS = ("Qwen3ForCausalLM", "Qwen3MoeForCausalLM")
_MLA = ("DeepseekV3ForCausalLM", "TeleChat3MoeForCausalLM")     # multi-latent attention


def _unmodelled(view: Source, arch: Architecture) -> tuple[str, str] | None:
    """(key, what) of the first part of the model the estimate has no terms for, or None."""
    if arch.name in _MLA:
        return "architectures", "multi-latent attention is"
    if (model_value(view, "first_k_dense_replace") or 0) > 0:
        return "first_k_dense_replace", "dense layers before its MoE layers are"
    if (model_value(view, "num_nextn_predict_layers") or 0) > 0:
        return "num_nextn_predict_layers", "multi-token-prediction layers are"
    return None


def _shared_ffn(view: Source) -> int:
    """The shared experts' intermediate size as MindFormers sets it: the YAML's, else shared experts x one's."""
    written = view.get((*MODEL, "moe_shared_expert_intermediate_size"))
    if isinstance(written, int) and written > 0:
        return written
    return (model_value(view, "n_shared_experts") or 0) * model_value(view, "moe_intermediate_size")


def model_spec(source: Source, issues: list[ConfigIssue]) -> ModelSpec | None:
    view, _ = mcore_view(source)            # how the YAML spells its keys is reported by `validate`
    arch, path = architecture(view)
    if arch is None:
        issues.append(view.issue(path, "a model with no known architecture is not modelled: the estimate does not "
                                 "price another model as one", "name the architecture (model_config.architectures)"))
        return None
    unmodelled = _unmodelled(view, arch)
    if unmodelled:
        key, what = unmodelled
        issues.append(view.issue((*MODEL, key), f"{arch.name}'s {what} not modelled yet: the estimate covers Qwen3, "
                                 "TeleChat3 and Qwen3-MoE layers, and does not price another layer as one",
                                 "validate, plan and the launcher apply to it; measure its memory by training it"))
        return None
    shape = _SHAPE + (_MOE_SHAPE if arch.moe else ())
    values = {key: model_value(view, key) for key in shape}
    bad = [key for key, value in values.items() if not positive_int(value)]
    for key in bad:
        issues.append(view.issue((*MODEL, key), f"expected a positive integer, got {values[key]!r}",
                                 "the estimate needs the model's size"))
    if bad:
        return None
    dtypes = {key: dtype_name(model_value(view, key)) for key in DTYPE_DEFAULTS}
    unknown = [key for key, name in dtypes.items() if name not in DTYPE_BYTES]
    for key in unknown:
        issues.append(view.issue((*MODEL, key), f"unknown dtype {dtypes[key]!r}", "float32, float16 or bfloat16"))
    if unknown:
        return None
    by_role = {DTYPE_ROLES[key]: name for key, name in dtypes.items()}
    untie = view.get((*MODEL, "untie_embeddings_and_output_weights"))
    tied = bool(view.get((*MODEL, "tie_word_embeddings"), False)) if untie is None else not untie
    return ModelSpec(
        num_layers=values["num_hidden_layers"], hidden=values["hidden_size"], heads=values["num_attention_heads"],
        kv_heads=values["num_key_value_heads"], head_size=values["head_dim"], ffn=values["intermediate_size"],
        vocab=values["vocab_size"], seq=values["seq_length"],
        batch=view.get(("runner_config", "batch_size")) or 1,
        compute_bytes=DTYPE_BYTES[by_role["compute"]], param_bytes=DTYPE_BYTES[by_role["param"]],
        softmax_bytes=DTYPE_BYTES[by_role["softmax"]], layernorm_bytes=DTYPE_BYTES[by_role["layernorm"]],
        rotary_bytes=DTYPE_BYTES[by_role["rotary"]], dtypes=tuple(sorted(dtypes.items())),
        roles=tuple(sorted(by_role.items())), flash_attention=True, tie_embeddings=tied,
        qk_norm=arch.name in _QK_NORM_ALWAYS or bool(model_value(view, "qk_layernorm")),
        clip_grad=step_form(view).clip_grad, fused_linears=True,
        **({"experts": values["num_experts"], "top_k": values["num_experts_per_tok"],
            "moe_ffn": values["moe_intermediate_size"], "shared_ffn": _shared_ffn(view)} if arch.moe else {}))
