"""What a candidate config changes against its base, what that change must keep, and its lossy parts.

A memory plan lives in three sections (`recompute_config`, `swap_config`, `compress_config`). A
candidate that differs from its base anywhere else (a learning rate, a dtype, a batch size) would
make any numerical difference meaningless, so `compare` refuses it, naming each key. The keys are
read through the family's view, so an mcore model's swap keys written under `model.model_config`
count as `swap_config`. `output_dir` may differ: each run writes to a directory of its own.

What the candidate must keep follows from what it changes: recompute, swap and lossless
compression run the same arithmetic, so the two runs must be bit-identical; quantised compression
(int8, int4, int2) rounds stochastically, so its loss may drift within a stated tolerance.

Nothing here imports MindSpore.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..config.load import Document
from ..config.plan import Plan
from ..document.errors import ConfigError, ConfigIssue
from ..document.source import KeyPath, Source

PLAN_SECTIONS = ("recompute_config", "swap_config", "compress_config")
PER_RUN = (("output_dir",),)              # each run writes to its own directory
_MISSING = object()


@dataclass(frozen=True, slots=True, order=True)
class LossyUse:
    """One quantised compression in one layer: the unit `compare` bisects over when the loss drifts."""

    layer: int
    pattern: str
    method: str
    group_size: int

    def label(self) -> str:
        return f"layer {self.layer} {self.pattern} ({self.method})"


def check_only_plan_changes(base: Document, candidate: Document) -> None:
    """ConfigError naming every key outside the plan's sections whose value differs between the two."""
    base_view, candidate_view = base.view, candidate.view
    left, right = dict(leaves(base_view.data)), dict(leaves(candidate_view.data))
    elsewhere = _plan_keys_written_elsewhere(base_view) | _plan_keys_written_elsewhere(candidate_view)
    issues = []
    for path in sorted(set(left) | set(right), key=by_text):
        if (path[0] in PLAN_SECTIONS or path in PER_RUN or any(path[:len(at)] == at for at in elsewhere)
                or left.get(path, _MISSING) == right.get(path, _MISSING)):
            continue
        issues.append(_difference(path, base_view, candidate_view, left.get(path, _MISSING),
                                  right.get(path, _MISSING)))
    if issues:
        raise ConfigError(issues)


def _plan_keys_written_elsewhere(view: Source) -> set[KeyPath]:
    """Where the YAML wrote keys the view reads as a plan section (an mcore model's swap keys in model_config)."""
    return {written for read, written in view.renames.items() if read[0] in PLAN_SECTIONS and len(read) > 1}


def _difference(path: KeyPath, base: Source, candidate: Source, before: Any, after: Any) -> ConfigIssue:
    hint = (f"compare changes only {', '.join(PLAN_SECTIONS)}: give the candidate {base.file}'s value, "
            "or compare against a base that has this one")
    if after is _MISSING:
        return base.issue(path, f"set here ({before!r}) but not in the candidate {candidate.file}", hint)
    where = f"{base.file} has {before!r}" if before is not _MISSING else f"{base.file} does not set it"
    return candidate.issue(path, f"differs from the base: {after!r} here, {where}", hint)


def by_text(path: KeyPath) -> tuple[str, ...]:
    return tuple(map(str, path))


def leaves(node: Any, path: KeyPath = ()) -> Iterable[tuple[KeyPath, Any]]:
    """(key path, value) of every leaf; a list or an empty mapping is one leaf."""
    if isinstance(node, Mapping) and node:
        for key, value in node.items():
            yield from leaves(value, (*path, key))
    else:
        yield path, node


def lossy_uses(plan: Plan) -> list[LossyUse]:
    """The candidate's quantised compressions, one per layer and pattern; empty when it must be bit-identical."""
    return sorted(LossyUse(layer=layer.layer, pattern=use.pattern, method=use.method, group_size=use.group_size)
                  for layer in plan.layers for use in layer.op_compress if use.method != "lossless")


def with_lossy_uses(document: Mapping[str, Any], uses: Iterable[LossyUse]) -> dict[str, Any]:
    """The candidate's document with only `uses` of its quantised compressions (its lossless ones all kept)."""
    result = copy.deepcopy(dict(document))
    result.pop("base_config", None)          # the document is already merged
    section = dict(result.get("compress_config") or {})
    kept = [entry for entry in section.get("op_compress") or [] if entry.get("method") == "lossless"]
    grouped: dict[tuple[str, str, int], list[int]] = {}
    for use in uses:
        grouped.setdefault((use.pattern, use.method, use.group_size), []).append(use.layer)
    kept += [{"op_name": pattern, "method": method, "group_size": group_size, "layers": sorted(layers)}
             for (pattern, method, group_size), layers in sorted(grouped.items())]
    section["op_compress"] = kept
    section["compress"] = bool(kept) or bool(section.get("compress_dense"))
    result["compress_config"] = section
    return result
