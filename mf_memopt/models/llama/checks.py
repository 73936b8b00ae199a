"""The legacy Llama's cross-key rules, which MindFormers checks only when it builds the model.

The schema bounds each key on its own (so the estimate never divides by zero); these are the
divisibility rules of MindFormers' attention (`hidden_size % num_heads`, heads over
`model_parallel`), reported before anything is built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...config.differences import OPTIONS, note
from ...config.family_rules import ConfigRules
from ...document.errors import ConfigIssue
from ...document.source import KeyPath, Source
from ...document.tree import RecordedCell
from .layers import layer_tree

if TYPE_CHECKING:
    from ...config.plan import Plan

_MODEL: KeyPath = ("model", "model_config")
_MP: KeyPath = ("parallel_config", "model_parallel")


def model_issues(source: Source) -> list[ConfigIssue]:
    hidden, heads = _count(source, (*_MODEL, "hidden_size")), _count(source, (*_MODEL, "num_heads"))
    kv_heads, mp = _count(source, (*_MODEL, "n_kv_heads")), _count(source, _MP)
    issues = []
    if hidden and heads and hidden % heads:
        issues.append(source.issue((*_MODEL, "num_heads"), f"hidden_size ({hidden}) is not a multiple of num_heads "
                                   f"({heads})", "MindFormers' attention gives every head hidden_size / num_heads "
                                   "dimensions"))
    if heads and kv_heads and heads % kv_heads:
        issues.append(source.issue((*_MODEL, "n_kv_heads"), f"num_heads ({heads}) is not a multiple of n_kv_heads "
                                   f"({kv_heads})", "each key/value head serves num_heads / n_kv_heads query heads"))
    for name, value in (("num_heads", heads), ("n_kv_heads", kv_heads)):
        if value and mp and value % mp:
            issues.append(source.issue(_MP, f"{name} ({value}) is not a multiple of model_parallel ({mp})",
                                       "MindFormers splits the attention heads evenly over model_parallel"))
    return issues


def _count(source: Source, path: KeyPath) -> int | None:
    value = source.get(path)
    return value if type(value) is int and value >= 1 else None


def swap_scope_issues(source: Source) -> list[ConfigIssue]:
    """Swap is documented for Llama-family dense models: say so for others."""
    issues = []
    for path in (("model", "model_config", "type"), ("model", "arch", "type")):
        name = source.get(path)
        if isinstance(name, str) and "llama" not in name.lower():
            issues.append(source.issue(
                path, f"swap is documented for Llama-family dense models; `{name}` is outside that scope",
                "check the swapped operators exist in this model (mf_memopt verify)", severity="warning"))
            break
    experts = source.get(("moe_config", "expert_num"), 1)
    if isinstance(experts, int) and experts > 1:
        issues.append(source.issue(("moe_config", "expert_num"),
                                   "swap is not yet supported for MoE models", None, severity="warning"))
    return issues


def model_notes(source: Source, plan: Plan) -> list[ConfigIssue]:
    """Where MindFormers' Llama marks more than LayerSetting: with flash attention off, its attention recomputes
    its score, mask and softmax operators whenever select_recompute is set (config.differences)."""
    if not source.get((*OPTIONS, "select_recompute")) or source.get((*_MODEL, "use_flash_attention")):
        return []
    return [note(source, (*OPTIONS, "select_recompute"), "llama-attention-core",
                 "with select_recompute set and flash attention off, MindFormers' Llama attention recomputes its "
                 "score, mask and softmax operators in every layer; mf_memopt recomputes only what select_recompute "
                 "names")]


DEFAULT_SWAP = r".*\.flash_attention"
DEFAULT_COMM = r".*\.norm"
# Hints for the patterns mf_memopt applies by default, when the model does not have their target.
_PATTERN_HINTS = {
    DEFAULT_SWAP: "the default swap strategy swaps attention.flash_attention, which exists only with "
                   "model.model_config.use_flash_attention: True; or list what to swap in op_swap",
    DEFAULT_COMM: "the default comm pattern names RmsNorm's fused `norm` operator, which exists only with "
                   "model.model_config.fused_rms_norm: True (not on CPU); name the operators instead, "
                   "e.g. 'attention_norm\\.mul2'",
}


class LlamaRules(ConfigRules):
    """The Llama family's `rules` part."""

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


RULES = LlamaRules()
