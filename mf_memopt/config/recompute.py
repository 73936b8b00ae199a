"""`recompute_config` as rules: full recompute of some layers, and pattern rules of four kinds.

A kind written as `true` or counts applies the family's default patterns (MindFormers' own);
a list names patterns for every layer; a mapping gives each pattern its own selection.
"""

from __future__ import annotations

from typing import Any

from ..document.source import KeyPath
from .reader import SectionReader
from .rules import RECOMPUTE, FullRecompute, Kind, PatternRule, RecomputeOptions


def recompute_rules(reader: SectionReader) -> tuple[FullRecompute, tuple[PatternRule, ...], RecomputeOptions]:
    section = reader.section(RECOMPUTE)
    full_path = (*RECOMPUTE, "recompute")
    full_value = False if reader.blocked(full_path) else section.get("recompute", False)
    full = FullRecompute(layers=reader.layers(full_value, full_path), origin=reader.origin(full_path))
    patterns = tuple(rule for kind in Kind if not reader.blocked((*RECOMPUTE, kind.value))
                     for rule in _pattern_rules(reader, kind, section.get(kind.value)))
    options = RecomputeOptions(**{name: section.get(name) for name in RecomputeOptions.__slots__
                                  if not reader.blocked((*RECOMPUTE, name))})
    _warn_unused_options(reader, options, full)
    return full, patterns, options


def _defaults(reader: SectionReader, kind: Kind) -> tuple[str, ...]:
    defaults = reader.family.defaults
    return {Kind.SELECT: defaults.select, Kind.COMM: defaults.comm}.get(kind, ())


def _pattern_rules(reader: SectionReader, kind: Kind, value: Any) -> list[PatternRule]:
    path = (*RECOMPUTE, kind.value)
    if isinstance(value, dict):
        entries = [(pattern, selection, (*path, pattern)) for pattern, selection in value.items()]
        return _rules_for(reader, kind, entries, default=False)
    if isinstance(value, list) and value and all(isinstance(item, str) for item in value):
        named = reader.without_repeats((pattern, (*path, index)) for index, pattern in enumerate(value))
        return _rules_for(reader, kind, [(pattern, True, where) for pattern, where in named], default=False)
    selection = False if value is None else value
    entries = [(pattern, selection, path) for pattern in _defaults(reader, kind)]
    return _rules_for(reader, kind, entries, default=True)


def _rules_for(reader: SectionReader, kind: Kind, entries: list[tuple[str, Any, KeyPath]],
               default: bool) -> list[PatternRule]:
    rules = []
    for pattern, selection, path in entries:
        if not reader.pattern_ok(pattern, path):
            continue
        rules.append(PatternRule(kind=kind, pattern=pattern, layers=reader.layers(selection, path),
                                 origin=reader.origin(path), default=default))
    return rules


def _warn_unused_options(reader: SectionReader, options: RecomputeOptions, full: FullRecompute) -> None:
    if full.layers:
        return
    for name, value in options.kwargs().items():
        if value:
            reader.warn((*RECOMPUTE, name), f"{name} only applies to full-recompute layers, and none are configured",
                        "set recompute_config.recompute, or remove this key")
