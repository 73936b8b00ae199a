"""The legacy Llama on a backend: the model keys CPU cannot run, and the model built with MindFormers' handling off.

On the CPU backend (MindSpore 2.9, MindFormers 1.9, measured here):
- bfloat16 has no CPU kernels: a Llama with `compute_dtype: bfloat16` fails in kernel selection
  (`Select CPU operator[Reshape] fail! ... input[BFloat16 Int64]`) after the model was built;
- in a Llama (`type: LlamaConfig`), the fused RmsNorm kernel is Ascend's (`fused_rms_norm`, default True in
  LlamaConfig);
- without `use_rope_slice` (default False) the rotary embedding needs a broadcasting BatchMatMul
  that CPU does not implement;
- `FlashAttentionScore` has no CPU kernel: each layer's `attention.flash_attention` is replaced by
  `CPUFlashAttention` under the same name (cpu_attention.py).

Exactly one implementation may set recompute and offload attributes. MindFormers sets them
in two places while building a Llama: `LayerSetting` (from recompute_config/swap_config)
and `LLamaAttention.__init__`, which recomputes the attention core of every layer whenever
`select_recompute` is truthy and flash attention is off. Both are turned off by building
from a config whose sections say "nothing"; mf_memopt's plan is applied afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ...document.errors import ConfigIssue
from ...document.source import Source, issue_at
from .spec import DTYPE_KEYS, MODEL_CONFIG

# key: (value CPU needs, value LlamaConfig takes when the key is absent, why)
CPU_FLAGS = {
    "fused_rms_norm": (False, True, "the fused RmsNorm kernel has no CPU implementation"),
    "use_rope_slice": (True, False, "without it the rotary embedding needs a broadcasting BatchMatMul, "
                                    "which has no CPU implementation"),
}
SECTIONS_OFF = {
    "recompute_config": {"recompute": False, "select_recompute": False, "select_comm_recompute": False,
                         "select_recompute_exclude": False, "select_comm_recompute_exclude": False,
                         "parallel_optimizer_comm_recompute": False, "mp_comm_recompute": False,
                         "recompute_slice_activation": False},
    "swap_config": {"swap": False},
}
ATTENTION_CORE_NOTE = (
    "MindFormers' own Llama attention also recomputes its score, mask and softmax operators in every layer "
    "whenever select_recompute is set and flash attention is off; mf_memopt applies only what recompute_config "
    "names. To keep that behaviour, add 'attention\\.(batch_matmul_q_k|mul|add|cast_attn|softmax|batch_matmul|"
    "tile_kv|apply_rotary_emb)' to select_recompute")


def backend_issues(model_config: Mapping[str, Any] | None, device_target: str,
                   source: Source | None) -> list[ConfigIssue]:
    """Keys of `model.model_config` that `device_target` cannot run (nothing to say off CPU)."""
    if device_target != "CPU" or not isinstance(model_config, Mapping):
        return []
    issues = []
    for key, (_, default) in {**DTYPE_KEYS, "embedding_init_type": (None, None)}.items():
        value = model_config.get(key, default)
        if isinstance(value, str) and value.lower() == "bfloat16":
            issues.append(issue_at(source, (*MODEL_CONFIG, key), "bfloat16 has no CPU kernels in MindSpore (kernel "
                                   "selection fails, e.g. Reshape of BFloat16)",
                                   "use float32 (or float16) on CPU; bfloat16 runs on Ascend"))
    if model_config.get("type") != "LlamaConfig":
        return issues
    for key, (needed, default, why) in CPU_FLAGS.items():
        value = model_config.get(key, default)
        if value != needed:
            written = "" if key in model_config else " (LlamaConfig's default: the key is not written)"
            issues.append(issue_at(source, (*MODEL_CONFIG, key), f"is {value}{written}: {why}",
                                   f"set {key}: {needed} on CPU"))
    return issues


def prepare_build(config: Any, device_target: str, log: Callable[[str], None]) -> None:
    model_config = config.model.model_config
    if _truthy(config.recompute_config, "select_recompute") and not model_config.use_flash_attention:
        log(ATTENTION_CORE_NOTE)
    for section, off in SECTIONS_OFF.items():
        config[section] = dict(off)
    if device_target == "CPU":
        # MindFormers turns lazy_inline on whenever the job is not stand-alone; lazy_inline
        # graphs do not run on the CPU backend.
        model_config.disable_lazy_inline = True


def after_build(network: Any, config: Any, device_target: str, log: Callable[[str], None]) -> list[str]:
    if device_target != "CPU" or not config.model.model_config.use_flash_attention:
        return []
    from .cpu_attention import replace_flash_attention

    replaced = replace_flash_attention(network)
    log(f"FlashAttentionScore has no {device_target} kernel: {len(replaced)} flash_attention cells "
        "(attention.flash_attention of each layer) were replaced by CPUFlashAttention, the same "
        "attention computed with CPU kernels, under the same name")
    return replaced


def _truthy(section: Any, key: str) -> bool:
    return bool(section) and bool(section.get(key))
