"""Cross-section checks: the constraints swap puts on the rest of the training YAML (static graph, jit level,
no SOMAS, lazy_inline; docs/configuration.md)."""

from __future__ import annotations

from ..document.errors import ConfigIssue, did_you_mean
from ..document.source import KeyPath, Source
from ..family import ModelFamily
from .family_rules import rules_of

_SECTIONS = ("recompute_config", "swap_config")
_GRAPH_MODES = (0, "GRAPH_MODE")


def context_issues(source: Source, family: ModelFamily) -> list[ConfigIssue]:
    issues = _misspelt_sections(source)
    if source.get(("swap_config", "swap")) is True:
        issues += _swap_constraints(source)
        issues += rules_of(family).swap_scope_issues(source)
    return issues


def _misspelt_sections(source: Source) -> list[ConfigIssue]:
    issues = []
    for key in source.data:
        # Only near-misses of our own sections: the rest of the YAML belongs to MindFormers.
        if key in _SECTIONS or not isinstance(key, str) or not ("swap" in key or "recomp" in key):
            continue
        hint = did_you_mean(key, [name for name in _SECTIONS if name not in source.data])
        if hint:
            issues.append(source.issue((key,), f"unknown top-level section `{key}` is ignored", hint,
                                       severity="warning"))
    return issues


def _swap_constraints(source: Source) -> list[ConfigIssue]:
    issues = []
    mode = source.get(("context", "mode"), 0)
    if mode not in _GRAPH_MODES:
        issues.append(source.issue(("context", "mode"), "swap needs static graph mode",
                                   "set context.mode: 0 (GRAPH_MODE)"))
    for path in (("context", "jit_config", "jit_level"), ("context", "jit_level")):
        if source.get(path) == "O2":
            issues.append(source.issue(path, "swap supports jit_level O0 or O1 only", "set jit_level: O0"))
    level_path: KeyPath = ("context", "memory_optimize_level")
    if source.get(level_path) == "O1":
        issues.append(source.issue(
            level_path, "swap cannot run with memory_optimize_level O1: SOMAS does not support "
            "heterogeneous (host + device) memory", "set context.memory_optimize_level: O0"))
    return issues
