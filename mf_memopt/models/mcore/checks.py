"""An mcore model's cross-key rules, checked before anything is built (MindFormers checks them while building)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ...config.differences import layers_text, note
from ...config.family_rules import ConfigRules
from ...document.errors import ConfigIssue
from ...document.source import KeyPath, Source
from ...document.tree import RecordedCell
from ...family import AutoCells
from .keys import ARCHITECTURES, MODEL, architecture, mcore_view, model_value
from .layers import layer_tree

if TYPE_CHECKING:
    from ...config.plan import Plan

_TP: KeyPath = ("parallel_config", "model_parallel")


def model_issues(source: Source) -> list[ConfigIssue]:
    issues = _architecture_issues(source)
    heads, kv_heads = _count(model_value(source, "num_attention_heads")), _count(
        model_value(source, "num_key_value_heads"))
    tp = _count(source.get(_TP, 1))
    if model_value(source, "multi_latent_attention"):
        kv_heads = None         # multi-latent attention gives every query head its own key and value
    if heads and kv_heads and heads % kv_heads:
        issues.append(source.issue((*MODEL, "num_key_value_heads"), f"num_attention_heads ({heads}) is not a "
                                   f"multiple of num_key_value_heads ({kv_heads})",
                                   "each key/value head serves num_attention_heads / num_key_value_heads query heads"))
    refused = _no_compression(source)
    if source.get(("compress_config", "compress")) is True and refused:
        issues.append(source.issue(_TP, f"compress_config with {refused}", "use model_parallel: 1 with compression, "
                                   "or recompute the MLP instead"))
    for name, value in (("num_attention_heads", heads), ("num_key_value_heads", kv_heads)):
        if value and tp and value % tp:
            issues.append(source.issue(_TP, f"{name} ({value}) is not a multiple of model_parallel ({tp})",
                                       "MindFormers splits the attention heads evenly over model_parallel"))
    return issues + _build_issues(source, heads, kv_heads) + _moe_issues(source) + _tying_issues(source)


def _no_compression(source: Source) -> str | None:
    """Why this mcore model may not be compressed (under tensor parallelism), or None."""
    tp = _count(source.get(_TP, 1))
    if not tp or tp <= 1:
        return None
    return (f"model_parallel {tp}: an mcore compressed linear computes its matmul outside MindFormers' Morph, which "
            "holds the tensor-parallel reduction and sharding")


def _build_issues(source: Source, heads: int | None, kv_heads: int | None) -> list[ConfigIssue]:
    """Attention keys MindFormers 1.9's mcore build stops on (read from its source, and seen on CPU)."""
    issues = []
    hidden = _count(model_value(source, "hidden_size"))
    if hidden and heads and not model_value(source, "multi_latent_attention") and hidden % heads:
        # Attention.__init__ checks this whatever head_dim says (transformer/attention.py)
        issues.append(source.issue((*MODEL, "hidden_size"), f"hidden_size ({hidden}) is not a multiple of "
                                   f"num_attention_heads ({heads}), even with head_dim set (MindFormers' attention "
                                   "stops: \"'hidden_size' must be a multiple of 'num_heads'\")",
                                   "make hidden_size a multiple of num_attention_heads"))
    if str(model_value(source, "rotary_dtype")).lower() == "float16":
        # GPTModel.__init__ (base_models/gpt/gpt_model.py)
        issues.append(source.issue((*MODEL, "rotary_dtype"), "MindFormers' GPT models refuse a float16 rotary "
                                   "embedding (\"rotary_dtype `float16` is not supported now.\")",
                                   "use float32, MindFormers' default"))
    if model_value(source, "use_flash_attention") is False and heads and kv_heads and kv_heads < heads:
        # Attention._repeat_kv reads the key as (batch, heads, seq, dim); the layer holds (seq, batch, heads, dim)
        issues.append(source.issue((*MODEL, "use_flash_attention"), f"without flash attention MindFormers repeats "
                                   f"the {kv_heads} key/value heads for the {heads} query heads as if they were laid "
                                   "out (batch, heads, seq, dim), while its layer holds them (seq, batch, heads, "
                                   "dim): the compile stops on BatchMatMul's shapes",
                                   "set use_flash_attention: True, or num_key_value_heads equal to "
                                   "num_attention_heads"))
    return issues


def _group_issues(source: Source, experts: int | None, top_k: int | None) -> list[ConfigIssue]:
    """Group-limited routing (`n_group` groups of experts, the best `topk_group` of them): TransformerConfig's
    checks, which stop MindFormers' build."""
    groups, best = _count(model_value(source, "n_group")), _count(model_value(source, "topk_group"))
    if not best:
        return []
    at = (*MODEL, "topk_group")
    if not groups:
        return [source.issue(at, "group-limited routing (topk_group) needs the number of groups",
                             "set model_config.n_group")]
    issues = []
    if experts and experts % groups:
        issues.append(source.issue((*MODEL, "n_group"), f"{experts} experts do not split into {groups} groups",
                                   "n_group must divide the number of experts"))
    if best > groups:
        issues.append(source.issue(at, f"the best {best} of {groups} groups asked", "topk_group must be at most "
                                   "n_group"))
    if top_k and top_k % best:
        issues.append(source.issue((*MODEL, "num_experts_per_tok"), f"{top_k} experts per token do not split "
                                   f"evenly over the {best} groups each token uses (MindFormers stops: "
                                   "\"`moe_router_topk` must be divisible by `moe_router_group_topk`\")",
                                   "make num_experts_per_tok a multiple of topk_group"))
    return issues


def _tying_issues(source: Source) -> list[ConfigIssue]:
    """Tying keys MindFormers' training model does not read: said, since the estimate counts what it builds."""
    arch, _ = architecture(source)
    if arch is None:
        return []
    issues = []
    if source.get((*MODEL, "tie_word_embeddings")) is True and not arch.ties:
        issues.append(source.issue((*MODEL, "tie_word_embeddings"), f"{arch.name}'s training model builds its own "
                                   "output layer whatever tie_word_embeddings says: the embedding and the output "
                                   "matrix are two parameters (the estimate counts both)",
                                   "remove the key, or use a model whose training model ties them (Qwen3, "
                                   "Qwen3-MoE)", severity="warning"))
    untie = source.get((*MODEL, "untie_embeddings_and_output_weights"))
    tie = bool(model_value(source, "tie_word_embeddings"))
    if isinstance(untie, bool) and untie == tie:
        issues.append(source.issue((*MODEL, "untie_embeddings_and_output_weights"), f"untie_embeddings_and_output_"
                                   f"weights: {untie} contradicts tie_word_embeddings: {tie}, and MindFormers' mcore "
                                   "training models read only tie_word_embeddings",
                                   f"remove it, or set it to {not tie}", severity="warning"))
    return issues


def _moe_issues(source: Source) -> list[ConfigIssue]:
    """MindFormers' TransformerConfig checks of an MoE model's keys (raised while it builds the model)."""
    arch, _ = architecture(source)
    if arch is None or not arch.moe:
        return []
    issues = []
    experts, top_k = _count(model_value(source, "num_experts")), _count(model_value(source, "num_experts_per_tok"))
    layers, dense = _count(model_value(source, "num_hidden_layers")), model_value(source, "first_k_dense_replace")
    if experts and top_k and top_k > experts:
        issues.append(source.issue((*MODEL, "num_experts_per_tok"), f"each token is routed to {top_k} experts, but "
                                   f"the model has {experts}", "num_experts_per_tok must be at most num_experts"))
    if layers and type(dense) is int and dense > layers:
        issues.append(source.issue((*MODEL, "first_k_dense_replace"), f"{dense} dense layers asked, but the model "
                                   f"has {layers}", "first_k_dense_replace must be at most num_hidden_layers"))
    score = model_value(source, "moe_router_score_function") or model_value(source, "scoring_func") or "softmax"
    softmax = score == "softmax"
    if top_k == 1 and softmax and not source.get((*MODEL, "moe_router_pre_softmax")):
        # a softmax over the one chosen expert's score would be 1, with a zero gradient
        issues.append(source.issue((*MODEL, "num_experts_per_tok"), "one expert per token with the softmax router "
                                   "needs the softmax before the top-k (MindFormers stops: \"Please use "
                                   "--moe-router-pre-softmax when topk is 1\")",
                                   "set model_config.moe_router_pre_softmax: True"))
    if source.get((*MODEL, "add_bias_linear")) is True:
        issues.append(source.issue((*MODEL, "add_bias_linear"), "MindFormers' MoE layers have no linear biases "
                                   "(it stops: \"Bias is not supported for MoE\")", "set add_bias_linear: False"))
    issues += _group_issues(source, experts, top_k)
    ep = _count(source.get(("parallel_config", "expert_parallel"), 1))
    if experts and ep and experts % ep:
        issues.append(source.issue(("parallel_config", "expert_parallel"), f"num_experts ({experts}) is not a "
                                   f"multiple of expert_parallel ({ep})",
                                   "MindFormers places the same number of experts on each expert-parallel rank"))
    return issues


def _architecture_issues(source: Source) -> list[ConfigIssue]:
    arch, path = architecture(source)
    if arch is None and source.get(("pretrained_model_dir",)) and not source.has(path):
        return []               # left to pretrained_model_dir's config.json, which the view could not read
    if arch is None:
        named = source.get(path)
        named = named[0] if isinstance(named, list) and named else named
        known = ", ".join(name for name, item in ARCHITECTURES.items() if item.trains)
        what = f"`{named}` is not" if named is not None else "no architecture is named:"
        return [source.issue(path, f"{what} one of the mcore models MindFormers 1.9 trains",
                             f"set model.model_config.architectures to one of {known}, or use_legacy: True for "
                             "a legacy model")]
    if not arch.trains:
        return [source.issue(path, f"MindFormers 1.9 does not train {arch.name} (NotImplementedError in train mode)",
                             "validate, plan and estimate apply; training needs another model", severity="warning")]
    return []


def _count(value: object) -> int | None:
    return value if type(value) is int and value >= 1 else None


def swap_scope_issues(source: Source) -> list[ConfigIssue]:
    arch, path = architecture(source)
    if arch is not None and arch.moe:
        return [source.issue(path, f"swap of {arch.name}'s MoE layers is outside the documented scope (dense "
                             "models)", "check what the swapped patterns match with mf_memopt verify",
                             severity="warning")]
    return []


def model_notes(source: Source, plan: Plan) -> list[ConfigIssue]:
    """Where mf_memopt's marks on an mcore model differ from MindFormers' (config.differences): a swap on an MoE
    model reaches the routers' shared gating activation only in the layers it names, and the default swap
    strategy offloads what MindFormers' default pattern cannot name."""
    notes = []
    swapped = [layer.layer for layer in plan.layers if layer.layer_swap is not None or layer.op_swap]
    arch, _ = architecture(source)
    if swapped and arch is not None and arch.moe:
        notes.append(note(source, plan.rules.swaps[0].origin.path, "unshared-operators",
                          "MindFormers' MoE routers share one gating activation object, so a swap that reaches it "
                          "in one layer offloads it in every layer; mf_memopt gives each layer its own before the "
                          f"plan, and offloads it only in the {layers_text(swapped)} swapped"))
    default = next((rule for rule in plan.rules.swaps if rule.default), None)
    if default is not None:
        notes.append(note(source, default.origin.path, "mcore-default-swap",
                          f"the default swap strategy offloads `{default.pattern}` in every layer, where "
                          "MindFormers' swaps nothing"))
    return notes


# MindFormers' own default patterns for mcore models (parallel_core/training_graph/transformer/utils.py)
DEFAULT_SELECT = (r"mlp\.shared_experts\.mul", r"mlp\.shared_experts\.activation_func\.silu", r"mlp\.mul",
                  r"mlp\.activation_func\.silu")
DEFAULT_COMM = r".*\.norm"
# MindFormers' default swap pattern is `.*\.flash_attention`, which names nothing in an mcore layer (the primitive
# is one level deeper). mf_memopt's default strategy swaps what it means: the flash attention's output.
DEFAULT_SWAP = r"self_attention\.core_attention\.flash_attention"
_MOE_HINT = ("an MoE layer's mlp is MindFormers' MoELayer (router, experts): name mlp.experts, mlp.router or mlp "
             "(the experts' activation is mlp.experts.swiglu)")
_PATTERN_HINTS = {
    r"mlp\.mul": "MindFormers' default pattern mlp\\.mul names MLPInterleaved's `mul`, which a SwiGlu MLP never "
                 "runs (SwiGlu multiplies in its own mlp.activation_func.mul); " + _MOE_HINT,
    r"mlp\.activation_func\.silu": "the default pattern names a dense MLP's SiLU; " + _MOE_HINT,
    r"mlp\.shared_experts\.mul": "the default shared-experts patterns name cells only MoE models with shared "
                                 "experts have",
    r"mlp\.shared_experts\.activation_func\.silu": "the default shared-experts patterns name cells only MoE models "
                                                   "with shared experts have",
    DEFAULT_COMM: "the default comm pattern names a `norm` operator: an mcore layer's FusedRMSNorm cells hold one "
                  "(input_layernorm.norm, ...)",
}


AUTO_CELLS = AutoCells(select=("mlp", "self_attention"), swap=("self_attention", "mlp"),
                        attention_prefix="self_attention.",
                        compress=(("mlp", r"mlp\.(linear_fc1|linear_fc2)"),))
# an MoE layer: the experts alone (their activations are most of the block's), the whole block, the attention
_MOE_AUTO_CELLS = AutoCells(select=("mlp", "self_attention", r"mlp\.experts"), swap=("self_attention", "mlp"),
                            attention_prefix="self_attention.")


class McoreRules(ConfigRules):
    """The mcore family's `rules` part."""

    def view(self, source: Source) -> tuple[Source, list[ConfigIssue]]:
        return mcore_view(source)

    def auto_cells_for(self, source: Source) -> AutoCells | None:
        """This YAML's cells: a dense model's are `AUTO_CELLS`; an MoE model's are the MoE block, the attention, the
        experts, and the shared experts where it has them; under tensor parallelism none is compressed (the rule
        `model_issues` checks). Not offered: the router (recomputing it saves nothing: its input is kept for the
        experts, measured on the tiny Qwen3-MoE) and the projections of a multi-latent attention (their outputs are
        not kept for the backward, so recomputing one saves nothing; the attention cell as a whole is offered)."""
        view = mcore_view(source)[0]
        arch, _ = architecture(view)
        cells = AUTO_CELLS
        if arch is not None and arch.moe:
            cells = _MOE_AUTO_CELLS
            if (model_value(view, "n_shared_experts") or 0) > 0:
                cells = replace(cells, select=(*cells.select, r"mlp\.shared_experts"))
        refused = _no_compression(source)
        if refused and (cells.compress or cells.lossless):      # the rule `model_issues` checks
            cells = replace(cells, compress=(), lossless=None, no_compress=refused)
        return cells

    def model_issues(self, source: Source) -> list[ConfigIssue]:
        return model_issues(source)

    def model_notes(self, source: Source, plan: Plan) -> list[ConfigIssue]:
        return model_notes(source, plan)

    def swap_scope_issues(self, source: Source) -> list[ConfigIssue]:
        return swap_scope_issues(source)

    def layer_tree(self, source: Source) -> RecordedCell | None:
        return layer_tree(source)

    def pattern_hint(self, pattern: str) -> str | None:
        return _PATTERN_HINTS.get(pattern)

    def default_note(self, pattern: str) -> str | None:
        if pattern == r"mlp\.mul":
            return ("names MLPInterleaved's `mul`, which a SwiGlu MLP never runs (SwiGlu multiplies in "
                    "mlp.activation_func.mul): it recomputes nothing")
        return None


RULES = McoreRules()
