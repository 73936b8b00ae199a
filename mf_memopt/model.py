"""Build the MindFormers model of a training YAML with MindFormers' own recompute and swap off.

Exactly one implementation may set recompute and offload attributes. MindFormers sets them
in two places while building a Llama: `LayerSetting` (from recompute_config/swap_config)
and `LLamaAttention.__init__`, which recomputes the attention core of every layer whenever
`select_recompute` is truthy and flash attention is off. Both are turned off here by
building from a copy of the config whose sections say "nothing"; mf_memopt's plan is
applied afterwards.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .logs import LOGGER

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


@dataclass
class BuiltModel:
    network: Any
    config: Any                      # the MindFormerConfig, with the sections turned off
    replaced_attention: list[str] = field(default_factory=list)


def read_config(path: str | Path) -> Any:
    from mindformers.tools.register import MindFormerConfig

    return MindFormerConfig(str(path))


def build_model(config: Any, *, device_target: str) -> BuiltModel:
    """Build `config.model` (MindFormers' build_network) without MindFormers' recompute/swap."""
    from mindformers.core.parallel_config import build_parallel_config
    from mindformers.models.build_model import build_network

    model_config = config.model.model_config
    if _truthy(config.recompute_config, "select_recompute") and not model_config.use_flash_attention:
        LOGGER.info(ATTENTION_CORE_NOTE)
    for section, off in SECTIONS_OFF.items():
        config[section] = dict(off)
    if device_target != "Ascend":
        # MindFormers turns lazy_inline on whenever the job is not stand-alone; lazy_inline
        # graphs do not run on the CPU backend.
        model_config.disable_lazy_inline = True
    with _mindformers_quiet():
        build_parallel_config(config)
        network = build_network(config.model, default_args={"parallel_config": config.parallel_config,
                                                            "moe_config": config.moe_config})
    replaced = []
    if device_target != "Ascend" and model_config.use_flash_attention:
        from .cpu_attention import replace_flash_attention

        replaced = replace_flash_attention(network)
        LOGGER.info(f"FlashAttentionScore has no {device_target} kernel: {len(replaced)} flash_attention cells "
                    "(attention.flash_attention of each layer) were replaced by CPUFlashAttention, the same "
                    "attention computed with CPU kernels, under the same name")
    return BuiltModel(network=network, config=config, replaced_attention=replaced)


def _truthy(section: Any, key: str) -> bool:
    return bool(section) and bool(section.get(key))


@contextmanager
def _mindformers_quiet():
    """Hide MindFormers' INFO lines while it builds: with its sections off it would still print its own
    (all-zero) `Formative ...` lines, next to mf_memopt's, for users who grep them."""
    from mindformers.tools.logger import get_logger

    mindformers_logger = get_logger()
    level = mindformers_logger.level
    mindformers_logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        mindformers_logger.setLevel(level)
