"""Tiny twins of the pipeline YAMLs MindFormers 1.9 ships (`site-packages/configs/`), and of the project's legacy
Llama pipeline configs (`configs/planning/`), built on CPU with MindFormers' own stage assignment: by MindFormers
applying the YAML's sections itself (its `LayerSetting`), or with that handling off for mf_memopt's plan (`build`);
`marks` reads what a built twin carries.

A twin is made by `twin()` from the shipped file itself, so it follows MindFormers' YAML: the shapes shrink and
tensor, expert and data parallelism become 1 (one process builds it); the pipeline stages, the micro-batches, the
interleave and scheduler, the offsets, the MTP layers, the dense first layers, `recompute_config` and `swap_config`
stay. The layer count shrinks to the fewest layers that keep every offset valid (each stage chunk keeps at least
one layer). tests/children/twin_builds.py builds them in a child process (a build switches MindFormers'
process-wide context).
"""

from __future__ import annotations

import copy
import importlib.util
import logging
from pathlib import Path
from mf_memopt.apply.family import backend_of

ROOT = Path(__file__).resolve().parents[2]

WHEEL = Path(importlib.util.find_spec("mindformers").origin).parents[1] / "configs"
MCORE = {"qwen3_32b": "qwen3/pretrain_qwen3_32b_4k.yaml",
         "qwen3_30b_a3b": "qwen3_moe/pretrain_qwen3_30b_a3b_4k.yaml",
         "telechat3_36b": "telechat3/pretrain_telechat3_36b.yaml",
         "deepseek3_671b": "deepseek3/pretrain_deepseek3_671b.yaml",
         "deepseek3_12b": "deepseek3/pretrain_deepseek3_12b_16p_pp16.yaml"}
LEGACY = {"llama2_7b_swap_pp2": "configs/planning/llama2_7b_swap_pp2.yaml",
          "interleave_48l_pp5": "configs/planning/interleave_48l_pp5.yaml",
          "per_stage_counts_pp16": "configs/planning/per_stage_counts_pp16.yaml"}
# A shipped YAML with swap added (in model_config, where MindFormers reads it for mcore models): layer indices, so
# the 61 layers stay; layer 60's plan is the MTP layer's too
VARIANTS = {"deepseek3_671b_swap": ("deepseek3_671b", {
    "recompute_config": {"recompute": [0, 1, 2, 30], "select_recompute": {"mlp\\.shared_experts": [3, 4, 40]},
                         "mp_comm_recompute": True},
    "model_config": {"swap": True, "layer_swap": [{"backward_prefetch": 3, "layers": [2, 5, 60]}],
                     "op_swap": [{"op_name": "self_attention", "backward_prefetch": 2, "layers": [4, 20, 30, 33]},
                                 {"op_name": "mlp\\.experts", "backward_prefetch": 1, "layers": [40, 41]}]}})}
# What a twin keeps of its YAML, by key path (the layer count follows the offsets: `layers()`)
LAYOUT = (("parallel_config", "pipeline_stage"), ("parallel_config", "micro_batch_num"),
          ("parallel", "pipeline_config"), ("recompute_config",), ("swap_config",))
MODEL_LAYOUT = ("pp_interleave_num", "offset", "num_nextn_predict_layers", "mtp_depth", "first_k_dense_replace",
                "architectures", "model_type", "type", "swap", "layer_swap", "op_swap")
FLOAT32 = ("params_dtype", "compute_dtype", "layernorm_compute_dtype", "softmax_compute_dtype", "rotary_dtype")
_SHAPE = {"hidden_size": 64, "intermediate_size": 128, "vocab_size": 128, "seq_length": 32,
          "max_position_embeddings": 32, **dict.fromkeys(FLOAT32, "float32")}
_GQA = {"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16}
SHAPES = {
    "Qwen3ForCausalLM": {**_SHAPE, **_GQA},
    "TeleChat3ForCausalLM": {**_SHAPE, **_GQA},
    "Qwen3MoeForCausalLM": {**_SHAPE, **_GQA, "num_experts": 4, "num_experts_per_tok": 2,
                            "moe_intermediate_size": 32},
    "DeepseekV3ForCausalLM": {**_SHAPE, "num_attention_heads": 4, "num_key_value_heads": 4, "q_lora_rank": 32,
                              "kv_lora_rank": 16, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16,
                              "n_routed_experts": 4, "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1,
                              "n_shared_experts": 1, "moe_intermediate_size": 32},
    # legacy LlamaConfig keys (its flags stay: the twins are built as Ascend builds them, not compiled)
    "LlamaConfig": {"hidden_size": 64, "num_heads": 4, "n_kv_heads": 2, "intermediate_size": 128,
                    "vocab_size": 128, "seq_length": 32, "batch_size": 1, "compute_dtype": "float32",
                    "layernorm_compute_type": "float32", "softmax_compute_type": "float32",
                    "rotary_dtype": "float32", "param_init_type": "float32", "checkpoint_name_or_path": ""},
}
ONE = {"data_parallel": 1, "model_parallel": 1, "expert_parallel": 1, "context_parallel": 1,
       "use_seq_parallel": False}


def shipped(name: str) -> dict:
    """The YAML as shipped (a variant: its base with the variant's sections)."""
    import yaml

    if name in VARIANTS:
        base, changes = VARIANTS[name]
        data = shipped(base)
        data["recompute_config"] = changes["recompute_config"]
        data["model"]["model_config"].update(changes["model_config"])
        return data
    path = WHEEL / MCORE[name] if name in MCORE else ROOT / LEGACY[name]
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _architecture(model_config: dict) -> str:
    named = model_config.get("architectures") or model_config.get("type")
    return named[0] if isinstance(named, list) else named


def _flat(offset) -> list[int]:
    if isinstance(offset, list):
        return [value for item in offset for value in _flat(item)]
    return [int(offset or 0)]


def layers(data: dict) -> int:
    """The fewest layers with the YAML's offsets, stages and interleave that leave every stage chunk a layer:
    `base * chunks + sum(offsets)`, base the smallest count per chunk that every offset keeps >= 1."""
    model_config = data["model"]["model_config"]
    stages = int(data["parallel_config"].get("pipeline_stage", 1))
    interleave = (data.get("parallel") or {}).get("pipeline_config", {}).get("pipeline_interleave", False)
    chunks = int(model_config.get("pp_interleave_num", 1)) if interleave else 1
    offsets = _flat(model_config.get("offset", 0))
    per_chunk = offsets if len(offsets) == stages * chunks else offsets * (stages * chunks // len(offsets))
    base = max(1, 1 - min(per_chunk))
    return base * stages * chunks + sum(offsets)


def twin(data: dict, output_dir: str) -> dict:
    """The tiny twin of a pipeline YAML (see the module docstring)."""
    data = copy.deepcopy(data)
    model_config = data["model"]["model_config"]
    legacy = data.get("use_legacy", True) is not False
    shape = dict(SHAPES[_architecture(model_config)])
    if model_config.get("use_attn_mask_compression"):
        shape.pop("seq_length")             # MindFormers wants more than 2048 tokens with the compressed mask
        shape.pop("max_position_embeddings")
    model_config.update(shape)
    swap = (data.get("swap_config") or {}).get("swap") is True or model_config.get("swap") is True
    if not swap:                            # with swap on, recompute names layer indices
        model_config["num_layers" if legacy else "num_hidden_layers"] = layers(data)
    model_config.pop("pretrained_model_dir", None)
    data.pop("pretrained_model_dir", None)
    data["parallel_config"] = {**data["parallel_config"], **ONE}
    data["parallel"] = {**(data.get("parallel") or {}), "parallel_mode": 0, "enable_parallel_optimizer": False}
    data["context"] = {**(data.get("context") or {}), "mode": 0, "device_target": "CPU"}
    # written out: MindFormers keeps the last build's choice process-wide when the key is absent
    data.update(use_parallel=False, output_dir=output_dir, run_mode="train", use_legacy=legacy)
    data.pop("load_checkpoint", None)
    return data


def _config(data: dict):
    from mindformers import build_context

    import mindspore as ms
    from mf_memopt.runtime.build import mindformers_config

    config = mindformers_config(data)       # as the launcher reads it: the run mode's template applied
    build_context(config)
    pipeline = (data.get("parallel") or {}).get("pipeline_config") or {}
    # MindFormers sets these with the rest of the parallel context, which a stand-alone build (use_parallel off)
    # skips; its LayerSetting reads the interleave from it
    ms.set_auto_parallel_context(pipeline_config={"pipeline_interleave": bool(pipeline.get("pipeline_interleave")),
                                                  "pipeline_scheduler": pipeline.get("pipeline_scheduler", "1f1b")})
    return config


def build(data: dict, *, ours: bool):
    """The network as MindFormers builds it from `data` (its sections applied), or with them off (`ours`)."""
    from mindformers.core.parallel_config import build_parallel_config
    from mindformers.models.build_model import build_network

    from mf_memopt.models.llama import LLAMA
    from mf_memopt.models.mcore import MCORE

    config = _config(data)
    if ours:
        family = MCORE if data.get("use_legacy") is False else LLAMA
        backend_of(family).prepare_build(config, "CPU", logging.getLogger("twins").info)
    build_parallel_config(config)
    return build_network(config.model, default_args={"parallel_config": config.parallel_config,
                                                     "moe_config": config.moe_config})


MARKS = ("recompute", "recompute_comm_op", "offload", "backward_prefetch", "slice_activation")


def decoder_layers(network) -> list[tuple[str, object]]:
    """(label, cell) of every decoder layer, the MTP layers after them."""
    model = network.model
    decoder = getattr(model, "decoder", None)
    found = [(f"layers.{index}", layer) for index, layer in
             enumerate(decoder.layers if decoder is not None else model.layers)]
    mtp = getattr(model, "mtp", None)
    return found + [(f"mtp.layers.{index}", layer) for index, layer in enumerate(mtp.layers if mtp else [])]


def marks(network) -> dict:
    """{path: marks} of every primitive carrying one and every cell set to recompute, in the decoder (and MTP)
    layers, and each layer's `pipeline_stage`."""
    from mcore_differential import cell_marks

    found: dict[str, dict] = {}
    for label, layer in decoder_layers(network):
        cell_marks(layer, label, found, MARKS)
        found.setdefault(label, {})["pipeline_stage"] = int(layer.pipeline_stage)
    return found
