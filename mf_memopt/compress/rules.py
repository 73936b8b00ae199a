"""Normalise `compress_config` into `CompressRule`s (one per pattern, over a set of layers).

`compress_dense` is shorthand: level0 is a lossless `op_compress` of the MLP's `w2` in
every layer (the only MLP input with a lossless saving, see docs/compression.md);
level1 adds an offload of what the compressed cells keep (on Ascend; on CPU nothing moves).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import key_path
from ..forms import layer_indices
from ..source import KeyPath
from .methods import DEFAULT_GROUP_SIZE

COMPRESS: KeyPath = ("compress_config",)
DENSE_PATTERN = r"feed_forward\.w2"
DENSE_METHOD = "lossless"
DENSE_OFFLOAD_PREFETCH = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class CompressRule:
    pattern: str
    method: str
    group_size: int
    layers: frozenset[int]
    origin: Any                    # rules.Origin
    offload: int | None = None     # backward_prefetch of the compressed copy (compress_dense: level1)
    dense: bool = False            # expanded from compress_dense


def compress_rules(reader) -> tuple[CompressRule, ...]:
    """The rules of a schema-valid section; `reader` is rules._Reader (issues, origin, blocked)."""
    section = reader.section(COMPRESS)
    if reader.blocked((*COMPRESS, "compress")):
        return ()
    on = section.get("compress") is True
    if not on:
        _warn_ignored(reader, section)
        return ()
    rules = []
    dense = section.get("compress_dense", False)
    if dense and not reader.blocked((*COMPRESS, "compress_dense")):
        rules.append(_dense_rule(reader, dense))
    for entry, path in _entries(reader, section):
        rules += _op_rules(reader, entry, path)
    if not rules:
        reader.issues.append(reader.source.issue(
            (*COMPRESS, "compress"), "compress is true but neither compress_dense nor op_compress is given: "
            "nothing is compressed", "add compress_dense: level0 or op_compress entries", severity="warning"))
    _reject_overlaps(reader, rules)
    return tuple(rules)


def _dense_rule(reader, level: str) -> CompressRule:
    path = (*COMPRESS, "compress_dense")
    return CompressRule(pattern=DENSE_PATTERN, method=DENSE_METHOD, group_size=DEFAULT_GROUP_SIZE,
                        layers=frozenset(range(reader.layout.num_layers)), origin=reader.origin(path),
                        offload=DENSE_OFFLOAD_PREFETCH if level == "level1" else None, dense=True)


def _entries(reader, section: dict) -> list[tuple[dict, KeyPath]]:
    value = section.get("op_compress")
    if reader.blocked((*COMPRESS, "op_compress")):
        return []
    if isinstance(value, dict):
        listed = [(value, (*COMPRESS, "op_compress"))]
    elif isinstance(value, list):
        listed = [(entry, (*COMPRESS, "op_compress", index)) for index, entry in enumerate(value)]
    else:
        listed = []
    return [(entry, path) for entry, path in listed if isinstance(entry, dict) and not reader.blocked(path)]


def _op_rules(reader, entry: dict, path: KeyPath) -> list[CompressRule]:
    names = entry["op_name"]
    named = [(names, (*path, "op_name"))] if isinstance(names, str) else \
        [(name, (*path, "op_name", position)) for position, name in enumerate(names)]
    layers = _layers(reader, entry["layers"], (*path, "layers"))
    group_size = entry.get("group_size", DEFAULT_GROUP_SIZE)
    if entry["method"] == "lossless" and "group_size" in entry:
        reader.issues.append(reader.source.issue(
            (*path, "group_size"), "ignored: lossless compression has no groups", "remove group_size",
            severity="warning"))
    rules, seen = [], {}
    for name, name_path in named:
        if name in seen:
            reader.issues.append(reader.source.issue(name_path, f"pattern `{name}` is listed twice",
                                                     f"it is already {key_path(seen[name])}"))
            continue
        seen[name] = name_path
        if reader.pattern_ok(name, name_path):
            rules.append(CompressRule(pattern=name, method=entry["method"], group_size=group_size, layers=layers,
                                      origin=reader.origin(path)))
    return rules


def _layers(reader, value: Any, path: KeyPath) -> frozenset[int]:
    if isinstance(value, bool):
        return frozenset(range(reader.layout.num_layers)) if value else frozenset()
    return layer_indices(value, reader.layout.num_layers, source=reader.source, path=path, issues=reader.issues)


def _reject_overlaps(reader, rules: list[CompressRule]) -> None:
    """One method per pattern and layer: a second entry for the same pattern and layer is an error."""
    claimed: dict[tuple[str, int], CompressRule] = {}
    for rule in rules:
        clashes = sorted(layer for layer in rule.layers if (rule.pattern, layer) in claimed)
        if clashes:
            first = claimed[(rule.pattern, clashes[0])]
            reader.issues.append(reader.source.issue(
                rule.origin.path, f"op_name `{rule.pattern}`: layer(s) {clashes} are already compressed by "
                f"{first.origin.describe()}", "list each layer once per pattern; split the entries so they do "
                "not overlap"))
        for layer in rule.layers:
            claimed.setdefault((rule.pattern, layer), rule)


def _warn_ignored(reader, section: dict) -> None:
    for key in ("compress_dense", "op_compress"):
        if section.get(key) not in (None, [], False):
            reader.issues.append(reader.source.issue(
                (*COMPRESS, key), "ignored because compress_config.compress is not true",
                "set compress_config.compress: true to compress activations", severity="warning"))
