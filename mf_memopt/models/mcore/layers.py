"""The mcore decoder layer as recorded from real models, so `validate` matches patterns without MindSpore.

MindFormers 1.9 builds every dense layer of an architecture from one fixed layer spec: the YAML's
keys change sizes, not cells (Qwen3 always has q_layernorm and k_layernorm, TeleChat3 never). So one
recorded layer per architecture, from a tiny model built with MindFormers 1.9, is what `validate`
matches against. Qwen3-MoE's layers are all alike too (router and experts, no shared experts); the
MoE models whose first layers are dense and whose attention is multi-latent (DeepSeek-V3,
TeleChat3-MoE) are not recorded: their patterns are checked when the model is built.

    python -m mf_memopt.models.mcore.layers     # records layers.json again (needs MindFormers)
"""

from __future__ import annotations

import json
import os
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

from ...document.source import Source
from ...document.tree import RecordedCell
from .keys import ARCHITECTURES, architecture

LAYERS = Path(__file__).with_name("layers.json")
RECORDED = ("Qwen3ForCausalLM", "TeleChat3ForCausalLM", "Qwen3MoeForCausalLM")
_TINY_MOE = {"hidden_act": "silu", "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
             "router_dense_type": "float32", "moe_grouped_gemm": True}
_TINY = {"num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
         "head_dim": 16, "intermediate_size": 128, "vocab_size": 128, "seq_length": 32,
         "max_position_embeddings": 32, "hidden_act": "swiglu", "add_bias_linear": False, "qkv_concat": True,
         "use_flash_attention": True, "position_embedding_type": "rope", "params_dtype": "float32",
         "compute_dtype": "float32", "layernorm_compute_dtype": "float32", "softmax_compute_dtype": "float32",
         "rotary_dtype": "float32"}


@cache
def _recorded() -> dict[str, dict]:
    return json.loads(LAYERS.read_text(encoding="utf-8"))


def layer_tree(source: Source) -> RecordedCell | None:
    arch, _ = architecture(source)
    recorded = _recorded().get(arch.name) if arch is not None else None
    return RecordedCell.from_dict(recorded) if recorded is not None else None


def record_architecture(name: str) -> dict:
    """Build a one-layer model of the architecture with MindFormers and record its decoder layer."""
    from mindformers import build_context
    from mindformers.core.parallel_config import build_parallel_config
    from mindformers.models.build_model import build_network
    from mindformers.tools.register import MindFormerConfig

    from ...document.tree import record

    arch = ARCHITECTURES[name]
    with tempfile.TemporaryDirectory(prefix="mf_memopt_record_") as tmp:
        config = MindFormerConfig(**{
            "use_legacy": False, "run_mode": "train", "output_dir": tmp, "use_parallel": False,
            "context": {"mode": 0, "device_target": "CPU"}, "parallel": {"parallel_mode": 0},
            "parallel_config": {"data_parallel": 1, "model_parallel": 1, "pipeline_stage": 1},
            "model": {"model_config": {**_TINY, **(_TINY_MOE if arch.moe else {}), "model_type": arch.model_type,
                                       "architectures": [name],
                                       "qk_layernorm": arch.defaults.get("qk_layernorm", False)}}})
        build_context(config)
        build_parallel_config(config)
        network = build_network(config.model, default_args={"parallel_config": config.parallel_config,
                                                            "moe_config": config.moe_config})
    from .compression import RECORDED_ATTRIBUTES

    return record(network.model.decoder.layers[0], RECORDED_ATTRIBUTES)


def record_all() -> dict[str, Any]:
    return {name: record_architecture(name) for name in RECORDED}


if __name__ == "__main__":
    os.environ.setdefault("GLOG_v", "3")
    LAYERS.write_text(json.dumps(record_all(), indent=1) + "\n", encoding="utf-8")
    print(f"recorded {len(_recorded.__wrapped__())} mcore layers in {LAYERS}")
