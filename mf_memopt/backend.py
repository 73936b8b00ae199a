"""Model settings a backend cannot run, found before anything is built or compiled.

On the CPU backend (MindSpore 2.9, MindFormers 1.9, measured here):
- bfloat16 has no CPU kernels: a Llama with `compute_dtype: bfloat16` fails in kernel selection
  (`Select CPU operator[Reshape] fail! ... input[BFloat16 Int64]`) after the model was built;
- in a Llama (`type: LlamaConfig`), the fused RmsNorm kernel is Ascend's (`fused_rms_norm`, default True in LlamaConfig);
- without `use_rope_slice` (default False) the rotary embedding needs a broadcasting BatchMatMul
  that CPU does not implement.

`backend_issues(model_config, device_target)` returns one ConfigIssue per such key, naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import ConfigIssue
from .source import Source

MODEL_CONFIG = ("model", "model_config")
# LlamaConfig's dtype keys and their defaults (MindFormers 1.9).
DTYPE_KEYS = {"compute_dtype": "float16", "layernorm_compute_type": "float32", "softmax_compute_type": "float32",
              "rotary_dtype": "float32", "param_init_type": "float16", "embedding_init_type": None}
# key: (value CPU needs, value LlamaConfig takes when the key is absent, why)
CPU_FLAGS = {
    "fused_rms_norm": (False, True, "the fused RmsNorm kernel has no CPU implementation"),
    "use_rope_slice": (True, False, "without it the rotary embedding needs a broadcasting BatchMatMul, "
                                    "which has no CPU implementation"),
}
CPU_DTYPES = ("float32", "float16")


def backend_issues(model_config: Mapping[str, Any] | None, device_target: str, *,
                   source: Source | None = None) -> list[ConfigIssue]:
    """Keys of `model.model_config` that `device_target` cannot run (nothing to say off CPU)."""
    if device_target != "CPU" or not isinstance(model_config, Mapping):
        return []
    issues = []
    for key, default in DTYPE_KEYS.items():
        value = model_config.get(key, default)
        if isinstance(value, str) and value.lower() == "bfloat16":
            issues.append(_issue(source, key, "bfloat16 has no CPU kernels in MindSpore (kernel selection fails, "
                                              "e.g. Reshape of BFloat16)", "use float32 (or float16) on CPU; "
                                                                              "bfloat16 runs on Ascend"))
    if model_config.get("type") != "LlamaConfig":
        return issues
    for key, (needed, default, why) in CPU_FLAGS.items():
        value = model_config.get(key, default)
        if value != needed:
            written = "" if key in model_config else " (LlamaConfig's default: the key is not written)"
            issues.append(_issue(source, key, f"is {value}{written}: {why}", f"set {key}: {needed} on CPU"))
    return issues


def _issue(source: Source | None, key: str, message: str, hint: str) -> ConfigIssue:
    path = (*MODEL_CONFIG, key)
    if source is not None:
        return source.issue(path, message, hint)
    return ConfigIssue(file="<config>", line=None, path=".".join(path), message=message, hint=hint)
