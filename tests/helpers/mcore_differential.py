"""The tiny mcore models (Qwen3, TeleChat3, Qwen3-MoE, DeepSeek-V3) and the cases of the mcore differential tests:
a case's YAML (`document`), the model built from it by MindFormers applying the YAML's sections itself (its mcore
`LayerSetting`) or with that handling off for mf_memopt's plan (`build`), and what a built model carries (`marks`,
`parameters`). Swap is written in MindFormers' own spelling (`model_config: {swap, layer_swap, op_swap}`), which is
what MindFormers reads for these models; recompute in the top-level section.

tests/children/mcore_builds.py builds them in a child process (an mcore build switches MindFormers' process-wide
context).
"""

from __future__ import annotations

import copy
import logging

MARKS = ("recompute", "recompute_comm_op", "offload", "backward_prefetch")
_MODEL = {"num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
          "head_dim": 16, "intermediate_size": 128, "vocab_size": 128, "seq_length": 32, "max_position_embeddings": 32,
          "hidden_act": "swiglu", "add_bias_linear": False, "qkv_concat": True, "use_flash_attention": True,
          "position_embedding_type": "rope", "qk_layernorm": True, "params_dtype": "float32",
          "compute_dtype": "float32", "layernorm_compute_dtype": "float32", "softmax_compute_dtype": "float32",
          "rotary_dtype": "float32", "model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"]}
# The two dense mcore architectures: TeleChat3 has no q/k layernorm.
MODELS = {"qwen3": _MODEL,
          "telechat3": {**_MODEL, "qk_layernorm": False, "model_type": "telechat3",
                        "architectures": ["TeleChat3ForCausalLM"]},
          # an MoE layer: router, 4 experts of which each token takes 2, the experts' Swiglu (mcore_builds.py --model)
          "qwen3_moe": {**_MODEL, "hidden_act": "silu", "model_type": "qwen3_moe",
                        "architectures": ["Qwen3MoeForCausalLM"], "num_experts": 4, "num_experts_per_tok": 2,
                        "moe_intermediate_size": 32, "router_dense_type": "float32", "moe_grouped_gemm": True,
                        "norm_topk_prob": True},
          # DeepSeek-V3: multi-latent attention, a dense first layer, MoE layers with a shared expert, group-limited
          # sigmoid routing with an expert bias, one MTP layer (3 decoder layers)
          "deepseek3": {"model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"],
                        "num_hidden_layers": 3, "hidden_size": 64, "intermediate_size": 128,
                        "moe_intermediate_size": 32, "num_attention_heads": 4, "num_key_value_heads": 4,
                        "q_lora_rank": 32, "kv_lora_rank": 16, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8,
                        "v_head_dim": 16, "vocab_size": 128, "seq_length": 32, "max_position_embeddings": 32,
                        "n_routed_experts": 4, "num_experts_per_tok": 2, "n_shared_experts": 1,
                        "first_k_dense_replace": 1, "n_group": 2, "topk_group": 1, "routed_scaling_factor": 2.5,
                        "norm_topk_prob": True, "num_nextn_predict_layers": 1, "mtp_loss_factor": 0.3,
                        "moe_router_score_function": "sigmoid", "moe_router_enable_expert_bias": True,
                        "moe_router_load_balancing_type": "seq_aux_loss", "moe_aux_loss_coeff": 0.0001,
                        "moe_router_dtype": "float32", "gated_linear_unit": True, "moe_grouped_gemm": True,
                        "use_pad_tokens": False, "moe_token_dispatcher_type": "alltoall", "add_bias_linear": False,
                        "use_flash_attention": True, "use_attn_mask_compression": False,
                        "multi_latent_attention": True, "mla_qkv_concat": False, "qk_layernorm": True,
                        "hidden_act": "silu", "params_dtype": "float32", "compute_dtype": "float32",
                        "layernorm_compute_dtype": "float32", "softmax_compute_dtype": "float32",
                        "rotary_dtype": "float32"}}
CASES = {
    "full recompute by per-stage count": {"recompute": {"recompute": [2]}},
    "full recompute of every layer": {"recompute": {"recompute": True}},
    "select recompute, default patterns, with full recompute": {"recompute": {"recompute": [1],
                                                                              "select_recompute": True}},
    "select recompute by pattern dict": {"recompute": {"select_recompute": {
        "mlp\\.linear_fc1": [3], "self_attention\\.linear_qkv\\.matmul": True}}},
    "select recompute of cells by list": {"recompute": {"select_recompute": ["mlp", "self_attention\\.q_layernorm"]}},
    "comm recompute": {"recompute": {"select_comm_recompute": {"input_layernorm\\.cast": True,
                                                              ".*_layernorm\\.norm": [2]}}},
    "exclude inside a recomputed cell": {"recompute": {
        "select_recompute": ["mlp"], "select_recompute_exclude": ["mlp\\.activation_func\\.mul"],
        "select_comm_recompute": [".*_layernorm\\.norm"],
        "select_comm_recompute_exclude": {"pre_mlp_layernorm\\.norm": [2]}}},
    "layer swap": {"swap": {"swap": True, "layer_swap": [{"backward_prefetch": 20, "layers": [0, 3]}]}},
    "op swap": {"swap": {"swap": True, "op_swap": [
        {"op_name": "self_attention", "backward_prefetch": 20, "layers": [0, 1, 2]},
        {"op_name": "self_attention", "backward_prefetch": 10, "layers": [3]},
        {"op_name": "mlp", "backward_prefetch": 15, "layers": [1, 2]}]}},
    "op swap of an operator": {"swap": {"swap": True, "op_swap": [
        {"op_name": "self_attention\\.core_attention\\.flash_attention", "backward_prefetch": 2, "layers": [1]}]}},
    "swap with select recompute": {"recompute": {"select_recompute": {"mlp": [0, 3]}}, "swap": {
        "swap": True, "op_swap": [{"op_name": "self_attention", "backward_prefetch": 20, "layers": [0, 1, 2]},
                                  {"op_name": "mlp", "backward_prefetch": 15, "layers": [1, 2]}]}},
    "swap with full recompute by layer index": {"recompute": {"recompute": [1]}, "swap": {
        "swap": True, "op_swap": [{"op_name": ["self_attention\\.linear_qkv", "self_attention\\.linear_proj"],
                                   "backward_prefetch": "Auto", "layers": [0, 2]}]}},
    "default swap strategy": {"swap": {"swap": True, "default_prefetch": 10}},
    "pipeline stages": {"stages": 2, "recompute": {"recompute": [1, 1], "select_recompute": [0, 2],
                                                   "select_comm_recompute": {"pre_mlp_layernorm\\.norm": [1, 0]}}},
}
# Cases that name MoE, MLA or MTP cells, run for those models only (`mcore_builds.py --model qwen3_moe|deepseek3 CASE ...`)
MOE_CASES = {
    "select recompute of the router and the experts": {"recompute": {"select_recompute": [
        "mlp\\.router", "mlp\\.experts"]}},
    "select recompute of MoE operators by dict": {"recompute": {"select_recompute": {
        "mlp\\.router\\.linear": [1], "mlp\\.experts\\.morphed_forward": [2],
        "mlp\\.local_reshape_permute": True}}},
    # MindFormers' own LayerSetting stops on these (see test_differential_moe.py)
    "select recompute of the routers' gating activation": {"recompute": {"select_recompute": {
        "mlp\\.router\\.gating_activation": [2]}}},
    "select recompute of the experts' Swiglu": {"recompute": {"select_recompute": {
        "mlp\\.experts\\.swiglu": [1]}}},
    "exclude the router inside a recomputed MoE block": {"recompute": {
        "select_recompute": ["mlp"], "select_recompute_exclude": ["mlp\\.router\\.linear"]}},
    "select recompute of the shared experts and the MLA projections": {"recompute": {"select_recompute": [
        "mlp\\.shared_experts", "self_attention\\.linear_q_down_proj", "self_attention\\.linear_kv_up_proj"]}},
    "full recompute of the layers before the last": {"recompute": {"recompute": [2]}},
    "select recompute inside the MTP layer": {"recompute": {"select_recompute": {
        "transformer_layer\\.mlp\\.shared_experts": True, "eh_proj": True, "mlp\\.experts": True}}},
    "layer swap of the first and last layers": {"swap": {"swap": True, "layer_swap": [
        {"backward_prefetch": 7, "layers": [0, 2]}]}},
    "op swap of the MTP layer's attention": {"swap": {"swap": True, "op_swap": [
        {"op_name": "transformer_layer\\.self_attention", "backward_prefetch": 6, "layers": [2]},
        {"op_name": "self_attention", "backward_prefetch": 4, "layers": [1]}]}},
    "op swap of the experts": {"swap": {"swap": True, "op_swap": [
        {"op_name": "mlp\\.experts", "backward_prefetch": 5, "layers": [0, 2]},
        {"op_name": "mlp\\.router\\.gating_activation", "backward_prefetch": 3, "layers": [1]}]}},
}
ALL_CASES = {**CASES, **MOE_CASES}


def document(case: dict, model: str, output_dir: str) -> dict:
    recompute = {"recompute": False, "select_recompute": False, "select_comm_recompute": False,
                 **case.get("recompute", {})}
    return {"use_legacy": False, "run_mode": "train", "use_parallel": False,
            "output_dir": output_dir,
            "context": {"mode": 0, "device_target": "CPU"}, "parallel": {"parallel_mode": 0},
            "parallel_config": {"data_parallel": 1, "model_parallel": 1, "pipeline_stage": case.get("stages", 1)},
            "recompute_config": recompute, "model": {"model_config": {**MODELS[model], **case.get("swap", {})}}}


def build(data: dict, *, ours: bool):
    from mindformers import build_context
    from mindformers.core.parallel_config import build_parallel_config
    from mindformers.models.build_model import build_network
    from mindformers.tools.register import MindFormerConfig

    from mf_memopt.apply.family import backend_of
    from mf_memopt.models.mcore import MCORE

    from mindformers.core.context.build_context import MFContextOperator

    config = MindFormerConfig(**copy.deepcopy(data))
    build_context(config)
    # MindFormers' context is a singleton that keeps the first config of the process: a build after another
    # test's would read that test's use_legacy (and build no mcore model)
    MFContextOperator.get_mf_ctx_instance().set_context(use_legacy=data.get("use_legacy", True))
    if ours:
        backend_of(MCORE).prepare_build(config, "CPU", logging.getLogger("differential").info)
    build_parallel_config(config)
    network = build_network(config.model, default_args={"parallel_config": config.parallel_config,
                                                        "moe_config": config.moe_config})
    if ours:
        from mf_memopt.runtime.build import unshare_layers

        unshare_layers(network, MCORE, logging.getLogger("differential").info)
    return network


def cell_marks(cell, path: str, found: dict, keys: tuple[str, ...] = MARKS) -> None:
    """Add to `found` {path: marks} (the attributes `keys`) of every primitive with one and every cell set to
    recompute under `cell`."""
    if cell._has_config_recompute:
        found[path] = {"cell_recompute": cell._scope.startswith("recompute_")}
    for name, primitive in cell._primitives.items():
        if primitive is None:
            continue
        values = {key: primitive.attrs[key] for key in keys if key in primitive.attrs}
        if values:
            found[f"{path}.{name}"] = values
    for name, child in cell._cells.items():
        if child is not None:
            cell_marks(child, f"{path}.{name}", found, keys)


def marks(network) -> dict:
    """{path: marks} of every primitive with one and every cell set to recompute, in the decoder layers."""
    found: dict[str, dict] = {}
    for index, layer in enumerate(network.model.decoder.layers):
        cell_marks(layer, f"layers.{index}", found)
    mtp = getattr(network.model, "mtp", None)
    for index, layer in enumerate(mtp.layers if mtp is not None else []):
        cell_marks(layer, f"mtp.layers.{index}", found)
    return found


def parameters(network) -> dict[str, int]:
    """Trainable parameter elements of the built network per decoder layer (`layers.N`), per MTP layer
    (`mtp.layers.N`) and the rest (`model`: embedding, final norm, output head)."""
    counts: dict[str, int] = {}
    for parameter in network.trainable_params():
        parts = parameter.name.split(".")
        if "decoder" in parts and "layers" in parts:
            at = parts.index("layers")
            group = f"layers.{parts[at + 1]}"
        elif "mtp" in parts and "layers" in parts:
            at = parts.index("layers")
            group = f"mtp.layers.{parts[at + 1]}"
        else:
            group = "model"
        size = 1
        for extent in parameter.shape:
            size *= int(extent)
        counts[group] = counts.get(group, 0) + size
    return counts
