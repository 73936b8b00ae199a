"""An mcore model's cross-key rules, checked before anything is built (MindFormers checks them while building)."""

from __future__ import annotations

from ...config.errors import ConfigIssue
from ...config.source import KeyPath, Source
from .keys import ARCHITECTURES, MODEL, architecture, model_value

_TP: KeyPath = ("parallel_config", "model_parallel")


def model_issues(source: Source) -> list[ConfigIssue]:
    issues = _architecture_issues(source)
    heads, kv_heads = _count(model_value(source, "num_attention_heads")), _count(
        model_value(source, "num_key_value_heads"))
    tp = _count(source.get(_TP, 1))
    if heads and kv_heads and heads % kv_heads:
        issues.append(source.issue((*MODEL, "num_key_value_heads"), f"num_attention_heads ({heads}) is not a "
                                   f"multiple of num_key_value_heads ({kv_heads})",
                                   "each key/value head serves num_attention_heads / num_key_value_heads query heads"))
    if source.get(("compress_config", "compress")) is True and tp and tp > 1:
        issues.append(source.issue(_TP, f"compress_config with model_parallel {tp}: an mcore compressed linear "
                                   "computes its matmul outside MindFormers' Morph, which holds the tensor-parallel "
                                   "reduction and sharding", "use model_parallel: 1 with compression, or recompute "
                                   "the MLP instead"))
    for name, value in (("num_attention_heads", heads), ("num_key_value_heads", kv_heads)):
        if value and tp and value % tp:
            issues.append(source.issue(_TP, f"{name} ({value}) is not a multiple of model_parallel ({tp})",
                                       "MindFormers splits the attention heads evenly over model_parallel"))
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
