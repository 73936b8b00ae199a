"""How MindFormers 1.9 reads an mcore model's YAML keys, so that every stage reads them the same way.

An mcore model (`use_legacy: False`) names its keys Hugging Face style (`num_hidden_layers`,
`num_attention_heads`, ...). MindFormers' converter (`parallel_core/transformer_config_utils.py`)
also knows older aliases for them (`num_layers`, `num_heads`, ...), but the model's own config
class (`Qwen3Config`, `TeleChat3Config`) always fills the Hugging Face key with its default, so an
alias conflicts with it and the build stops ("Mapping Conflicts"). A key the YAML leaves out takes
that class's default (`ARCHITECTURES`), or the `TransformerConfig` default for the dtypes.

A YAML may leave the model's shape to `pretrained_model_dir`, whose Hugging Face `config.json`
MindFormers reads; the keys the YAML does not write are then read from that file (through the same
guarded reader), and reported as its.

Swap has two spellings: the seeds' top-level `swap_config`, and MindFormers' own for these models,
`swap`, `layer_swap`, `op_swap` and `default_prefetch` in `model.model_config`. Plain MindFormers
ignores a top-level `swap_config` for an mcore model. `mcore_view` lets the stages read either as
`swap_config`, and reports the keys by where the user wrote them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ...document.errors import ConfigIssue
from ...document.source import KeyPath, Source, read_as

MODEL: KeyPath = ("model", "model_config")
SWAP_KEYS = ("swap", "layer_swap", "op_swap", "default_prefetch")
# model_config keys MindFormers' converter refuses for mcore models (it reads recompute_config at the top level)
RECOMPUTE_KEYS = ("recompute", "select_recompute", "select_comm_recompute", "select_recompute_exclude",
                  "select_comm_recompute_exclude", "recompute_slice_activation", "mp_comm_recompute",
                  "parallel_optimizer_comm_recompute")
# the key mf_memopt reads -> the aliases MindFormers' converter maps to the same target
ALIASES = {
    "num_hidden_layers": ("num_layers", "n_layer"),
    "num_attention_heads": ("num_heads", "n_head"),
    "num_key_value_heads": ("n_kv_heads", "num_query_groups"),
    "intermediate_size": ("ffn_hidden_size",),
    "head_dim": ("kv_channels",),
    "params_dtype": ("param_init_type",),
    "qk_layernorm": ("use_qk_norm",),
    "pp_interleave_num": ("virtual_pipeline_model_parallel_size",),
    "num_nextn_predict_layers": ("mtp_depth", "mtp_num_layers"),
    "num_experts": ("expert_num", "n_routed_experts", "num_moe_experts"),
    "num_experts_per_tok": ("moe_router_topk",),
    "moe_intermediate_size": ("moe_ffn_hidden_size",),
    "n_shared_experts": ("shared_expert_num",),
    "qk_nope_head_dim": ("qk_head_dim",),
    "qk_rope_head_dim": ("qk_pos_emb_head_dim",),
    "n_group": ("moe_router_num_groups",),
    "topk_group": ("moe_router_group_topk",),
}
# TransformerConfig's dtype defaults (MindFormers 1.9), for keys the YAML leaves out
DTYPE_DEFAULTS = {"params_dtype": "float32", "compute_dtype": "bfloat16", "layernorm_compute_dtype": "float32",
                  "softmax_compute_dtype": "float32", "rotary_dtype": "float32"}


@dataclass(frozen=True, slots=True)
class Architecture:
    """A model class MindFormers 1.9 builds for `use_legacy: False`, and its config class's defaults."""

    name: str                   # model_config.architectures
    model_type: str             # model_config.model_type
    trains: bool                # MindFormers builds it in train mode (others raise NotImplementedError)
    moe: bool
    defaults: dict[str, Any]    # the config class's defaults of the keys mf_memopt reads
    own_names: tuple[tuple[str, str], ...] = ()   # (key mf_memopt reads, the config class's own name for it)
    ties: bool = False          # its training model shares the embedding and output matrix (tie_word_embeddings)


_HF = {"hidden_size": 4096, "intermediate_size": 22016, "num_hidden_layers": 32, "num_attention_heads": 32,
       "num_key_value_heads": 32, "head_dim": 128, "seq_length": 4096, "tie_word_embeddings": False}
# multi-latent attention's shape as DeepseekV3Config and TeleChat3MoeConfig default it; only DeepseekV3Config turns
# it on (`multi_latent_attention`, TransformerConfig's default False)
_MLA = {"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128}
ARCHITECTURES = {arch.name: arch for arch in (
    Architecture("Qwen3ForCausalLM", "qwen3", True, False, {**_HF, "vocab_size": 151936, "qk_layernorm": True},
                 ties=True),
    Architecture("TeleChat3ForCausalLM", "telechat3", True, False, {**_HF, "vocab_size": 131072,
                                                                     "qk_layernorm": False}),
    Architecture("Qwen3MoeForCausalLM", "qwen3_moe", True, True, {
        **_HF, "vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 24,
        "num_key_value_heads": 4, "qk_layernorm": True, "num_experts": 128, "num_experts_per_tok": 8,
        "moe_intermediate_size": 768, "n_shared_experts": 0, "first_k_dense_replace": 0}, ties=True),
    Architecture("DeepseekV3ForCausalLM", "deepseek_v3", True, True, {
        **_HF, "vocab_size": 129280, "hidden_size": 7168, "intermediate_size": 18432, "num_hidden_layers": 61,
        "num_attention_heads": 128, "num_key_value_heads": 128, "qk_layernorm": False, "num_experts": 256,
        "num_experts_per_tok": 8, "moe_intermediate_size": 2048, "n_shared_experts": 1, "first_k_dense_replace": 3,
        "num_nextn_predict_layers": 1, **_MLA, "multi_latent_attention": True, "scoring_func": "sigmoid",
        "n_group": 8, "topk_group": 4},
        (("num_experts", "n_routed_experts"),)),
    Architecture("TeleChat3MoeForCausalLM", "telechat3_moe", True, True, {
        **_HF, "vocab_size": 131072, "hidden_size": 2560, "intermediate_size": 7680, "num_hidden_layers": 4,
        "qk_layernorm": False, "num_experts": 192, "num_experts_per_tok": 8, "moe_intermediate_size": 1536,
        "n_shared_experts": 1, "first_k_dense_replace": 3, "num_nextn_predict_layers": 1, **_MLA,
        "scoring_func": "sigmoid", "n_group": 8, "topk_group": 4}, (("num_experts", "n_routed_experts"),)),
    Architecture("Qwen2ForCausalLM", "qwen2", False, False, {}),
    Architecture("Glm4ForCausalLM", "glm4", False, False, {}),
    Architecture("Glm4MoeForCausalLM", "glm4_moe", False, True, {}),
    Architecture("TeleChat2ForCausalLM", "telechat2", False, False, {}),
)}
_BY_TYPE = {arch.model_type: arch for arch in ARCHITECTURES.values()}


def architecture(source: Source) -> tuple[Architecture | None, KeyPath]:
    """The architecture the YAML names (`architectures`, else `model_type`), and the key that names it."""
    named = source.get((*MODEL, "architectures"))
    if isinstance(named, list) and named:
        named = named[0]
    if isinstance(named, str):
        return ARCHITECTURES.get(named), (*MODEL, "architectures")
    kind = source.get((*MODEL, "model_type"))
    if isinstance(kind, str):
        return _BY_TYPE.get(kind), (*MODEL, "model_type")
    return None, (*MODEL, "architectures")


# keys of a Hugging Face config.json that a YAML's model_config may leave to it
HF_KEYS = ("architectures", "model_type", "num_hidden_layers", "hidden_size", "num_attention_heads",
           "num_key_value_heads", "head_dim", "intermediate_size", "vocab_size", "max_position_embeddings",
           "tie_word_embeddings", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
           "num_nextn_predict_layers", "n_routed_experts", "n_shared_experts", "first_k_dense_replace", "q_lora_rank",
           "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


def mcore_view(source: Source) -> tuple[Source, list[ConfigIssue]]:
    """The YAML as the stages read it (aliases under their Hugging Face names, MindFormers' swap spelling as
    `swap_config`, what it leaves to pretrained_model_dir's config.json), and what is wrong with how it spells
    them."""
    issues: list[ConfigIssue] = []
    source = _with_pretrained(source, issues)
    model = source.get(MODEL)
    model = model if isinstance(model, dict) else {}
    moves: dict[KeyPath, KeyPath] = {}
    arch, _ = architecture(source)
    for key, aliases in ALIASES.items():
        written = [name for name in (key, *aliases) if name in model]
        if len(written) > 1:
            issues.append(source.issue((*MODEL, written[1]), f"{' and '.join(written)} are one key to MindFormers "
                                       f"(`{key}`); giving both stops its build (Mapping Conflicts)",
                                       f"keep only {key}"))
        elif written and written[0] != key:
            alias = written[0]
            if arch is not None and key in arch.defaults and dict(arch.own_names).get(key) != alias:
                issues.append(source.issue((*MODEL, alias), f"`{alias}` conflicts with `{key}`, which "
                                           f"{arch.name}'s config always sets (default {arch.defaults[key]}): "
                                           "MindFormers stops its build (Mapping Conflicts)", f"rename it to {key}"))
            moves[(*MODEL, key)] = (*MODEL, alias)
    for key in RECOMPUTE_KEYS:
        if key in model:
            issues.append(source.issue((*MODEL, key), "MindFormers refuses recompute keys in model_config for "
                                       "mcore models (its converter stops the build)",
                                       f"move it to the top-level recompute_config: recompute_config.{key}"))
    if "cpu_offloading" in model:
        issues.append(source.issue((*MODEL, "cpu_offloading"), "cpu_offloading conflicts with `swap`, which "
                                   "MindFormers always sets for mcore models (Mapping Conflicts)",
                                   "write model_config.swap: true, or a top-level swap_config"))
    in_model = [key for key in SWAP_KEYS if key in model]
    if in_model and source.has(("swap_config",)):
        issues.append(source.issue((*MODEL, in_model[0]), "swap is set twice: in the top-level swap_config and in "
                                   f"model.model_config ({', '.join(in_model)})",
                                   "keep one: model_config (MindFormers' own spelling for mcore models) or "
                                   "swap_config"))
    elif in_model:
        moves.update({("swap_config", key): (*MODEL, key) for key in in_model})
    elif isinstance(source.get(("swap_config",)), dict) and source.get(("swap_config", "swap")) is True:
        issues.append(source.issue(("swap_config",), "plain MindFormers ignores the top-level swap_config for mcore "
                                   "models (use_legacy: False); mf_memopt applies it",
                                   "to run the same YAML without mf_memopt, write swap, layer_swap and op_swap in "
                                   "model.model_config", severity="warning"))
    view = read_as(source, moves)
    if in_model and not source.has(("swap_config",)):
        lines = dict(view.lines)
        lines[("swap_config",)] = source.line_of((*MODEL, in_model[0])) or 0
        view = replace(view, lines=lines, renames={**view.renames, ("swap_config",): MODEL})
    return view, issues


def _with_pretrained(source: Source, issues: list[ConfigIssue]) -> Source:
    """The model keys the YAML leaves to `pretrained_model_dir/config.json`, read from it (the YAML wins)."""
    import json
    from pathlib import Path

    from ...document.errors import ConfigError
    from ...document.reading import read_bytes

    directory = source.get(("pretrained_model_dir",))
    if not isinstance(directory, str) or not directory:
        return source
    file = Path(directory) / "config.json"
    try:
        data = json.loads(read_bytes(file))
    except ConfigError as error:
        # reported at model_config: the shape keys it should hold are not read further
        issues.append(source.issue(MODEL, f"the model's shape is left to pretrained_model_dir's {file}: "
                                   f"{error.issues[0].message.rstrip('.')}",
                                   "point pretrained_model_dir at the model's directory, or write "
                                   "model.model_config.num_hidden_layers and the other shape keys in the YAML"))
        return source
    except ValueError as error:
        issues.append(source.issue(MODEL, f"the model's shape is left to pretrained_model_dir's {file}, which is "
                                   f"not JSON: {error}",
                                   "give the directory of a Hugging Face model (its config.json)"))
        return source
    model = source.get(MODEL)
    model = model if isinstance(model, dict) else {}
    taken = {key: data[key] for key in HF_KEYS if isinstance(data, dict) and key in data and key not in model}
    if not taken:
        return source
    files = dict(source.files)
    files.update({(*MODEL, key): str(file) for key in taken})
    return replace(source, data={**source.data, "model": {**(source.get(("model",)) or {}),
                                                          "model_config": {**model, **taken}}}, files=files)


def model_value(view: Source, key: str) -> Any:
    """A model key as MindFormers builds it: the YAML's value, else the architecture's default."""
    value = view.get((*MODEL, key))
    if value is not None:
        return value
    if key in DTYPE_DEFAULTS:
        return DTYPE_DEFAULTS[key]
    arch, _ = architecture(view)
    return arch.defaults.get(key) if arch is not None else None
