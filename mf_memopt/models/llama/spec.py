"""The legacy Llama's model keys (`LlamaConfig`) read into the estimator's `ModelSpec`."""

from __future__ import annotations

from typing import Any

from ...document.errors import ConfigIssue
from ...document.source import Source
from ...estimate.spec import DTYPE_BYTES, ModelSpec, dtype_name, positive_int
from ...estimate.step import step_form

MODEL_CONFIG = ("model", "model_config")
# LlamaConfig's dtype keys, their roles, and their defaults (MindFormers 1.9): what a YAML without them trains with.
DTYPE_KEYS = {"compute_dtype": ("compute", "float16"), "layernorm_compute_type": ("layernorm", "float32"),
              "softmax_compute_type": ("softmax", "float32"), "rotary_dtype": ("rotary", "float32"),
              "param_init_type": ("param", "float16")}
_REQUIRED = ("num_layers", "hidden_size", "num_heads", "vocab_size", "seq_length")
_POSITIVE = ("n_kv_heads", "intermediate_size", "multiple_of", "batch_size")


def ffn_width(hidden: int, multiple_of: int, intermediate_size: int | None, multiplier: float | None) -> int:
    """LlamaFeedForward's hidden size, as MindFormers 1.9 computes it (llama_layer.py)."""
    if intermediate_size:
        return intermediate_size
    width = 4 * hidden
    if multiplier is not None:
        width = int((multiplier + 0.01) * width)
    width = int(2 * width / 3)
    return multiple_of * ((width + multiple_of - 1) // multiple_of)


def model_spec(source: Source, issues: list[ConfigIssue]) -> ModelSpec | None:
    model = source.get(MODEL_CONFIG) or {}
    if not isinstance(model, dict):
        model = {}
    outside = _outside_scope(source)
    if outside is not None:
        issues.append(outside)
        return None
    before = len(issues)
    for key in _REQUIRED:
        value = model.get(key)
        if value is None:
            issues.append(source.issue((*MODEL_CONFIG, key), "missing: the estimate needs it",
                                       f"set model.model_config.{key}"))
        elif not positive_int(value):
            issues.append(source.issue((*MODEL_CONFIG, key), f"expected a positive integer, got {value!r}",
                                       "the estimate needs the model's size"))
    for key in _POSITIVE:
        value = model.get(key)
        if value is not None and not positive_int(value):
            issues.append(source.issue((*MODEL_CONFIG, key), f"expected a positive integer, got {value!r}",
                                       f"remove {key} or set a positive integer"))
    if len(issues) > before:
        return None
    return _model(source, model)


def _outside_scope(source: Source) -> ConfigIssue | None:
    """One line for a legacy model the estimate does not model: anything but a dense LlamaConfig Llama."""
    for path, modelled in (((*MODEL_CONFIG, "type"), "LlamaConfig"), (("model", "arch", "type"), "LlamaForCausalLM")):
        name = source.get(path)
        if isinstance(name, str) and name != modelled:
            return source.issue(path, f"`{name}` is not modelled: the estimate of MindFormers' legacy models covers "
                                "the dense Llama (LlamaConfig) only, and does not price another model as one",
                                "validate, plan and the launcher apply to it; measure its memory by training it")
    experts = source.get(("moe_config", "expert_num"), 1)
    if isinstance(experts, int) and experts > 1:
        return source.issue(("moe_config", "expert_num"), f"a legacy MoE model ({experts} experts) is not modelled: "
                            "the estimate of MindFormers' legacy models covers the dense Llama only",
                            "validate, plan and the launcher apply to it; measure its memory by training it")
    return None


def resolved_dtypes(model: dict[str, Any]) -> dict[str, str]:
    """Every dtype key of the model, MindFormers' default where the YAML has none."""
    return {key: dtype_name(model[key]) if model.get(key) is not None else default
            for key, (_, default) in DTYPE_KEYS.items()}


def _model(source: Source, model: dict[str, Any]) -> ModelSpec:
    hidden, heads = model["hidden_size"], model["num_heads"]
    dtypes = resolved_dtypes(model)
    by_role = {DTYPE_KEYS[key][0]: name for key, name in dtypes.items()}
    return ModelSpec(
        num_layers=model["num_layers"], hidden=hidden, heads=heads, kv_heads=model.get("n_kv_heads") or heads,
        ffn=ffn_width(hidden, model.get("multiple_of", 256), model.get("intermediate_size"),
                      model.get("ffn_dim_multiplier")),
        vocab=model["vocab_size"], seq=model["seq_length"],
        batch=source.get(("runner_config", "batch_size")) or model.get("batch_size", 1),
        compute_bytes=DTYPE_BYTES[by_role["compute"]], param_bytes=DTYPE_BYTES[by_role["param"]],
        softmax_bytes=DTYPE_BYTES[by_role["softmax"]], layernorm_bytes=DTYPE_BYTES[by_role["layernorm"]],
        rotary_bytes=DTYPE_BYTES[by_role["rotary"]], dtypes=tuple(sorted(dtypes.items())),
        roles=tuple(sorted(by_role.items())),
        flash_attention=bool(model.get("use_flash_attention", False)),
        tie_embeddings=bool(model.get("tie_word_embeddings", False)),
        clip_grad=step_form(source).clip_grad, fused_linears=bool(model.get("qkv_concat", False)))
