"""The normalised config: every recompute and swap setting as a rule over a set of layers.

`normalise` reads the schema-valid sections once and never looks at the raw YAML again.
Each rule keeps its origin (key path and line) so later stages can name it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from .errors import ConfigIssue, key_path
from .forms import layer_indices, select_layers
from .layout import Layout
from .patterns import check_pattern
from .source import KeyPath, Source
from .compress.rules import CompressRule, compress_rules

Prefetch = int | str  # an int >= 0, or "Auto"

DEFAULT_SELECT = (r"feed_forward\.mul", r"feed_forward\.w1\.activation\.silu")
DEFAULT_COMM = (r".*\.norm",)
DEFAULT_SWAP = r".*\.flash_attention"
DEFAULT_PREFETCH = 1
MAX_PATTERNS = 128  # in one document; resolving compares patterns pairwise in every distinct layer

RECOMPUTE: KeyPath = ("recompute_config",)
SWAP: KeyPath = ("swap_config",)


class Kind(StrEnum):
    SELECT = "select_recompute"
    COMM = "select_comm_recompute"
    EXCLUDE = "select_recompute_exclude"
    COMM_EXCLUDE = "select_comm_recompute_exclude"


DEFAULT_PATTERNS = {Kind.SELECT: DEFAULT_SELECT, Kind.COMM: DEFAULT_COMM, Kind.EXCLUDE: (), Kind.COMM_EXCLUDE: ()}


@dataclass(frozen=True, slots=True, kw_only=True)
class Origin:
    """Where a rule was written: its key path and line in the YAML (and the file, when inherited)."""

    path: KeyPath
    line: int | None
    file: str | None = None     # set when the rule comes from a base_config file

    @property
    def key(self) -> str:
        return key_path(self.path)

    def describe(self) -> str:
        where = f"{self.file} line" if self.file else "line"
        return f"{self.key}, {where} {self.line}" if self.line is not None else self.key

    def to_dict(self) -> dict:
        return {"key": self.key, "line": self.line, **({"file": self.file} if self.file else {})}


@dataclass(frozen=True, slots=True, kw_only=True)
class FullRecompute:
    layers: frozenset[int]
    origin: Origin


@dataclass(frozen=True, slots=True, kw_only=True)
class PatternRule:
    kind: Kind
    pattern: str
    layers: frozenset[int]
    origin: Origin
    default: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class SwapRule:
    """Offload of whole layers (`pattern` None) or of the cells/operators a pattern matches."""

    pattern: str | None
    prefetch: Prefetch
    layers: frozenset[int]
    origin: Origin
    default: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class RecomputeOptions:
    """Keyword options for Cell.recompute on full-recompute layers; None when not written."""

    recompute_slice_activation: bool | None = None
    mp_comm_recompute: bool | None = None
    parallel_optimizer_comm_recompute: bool | None = None

    def kwargs(self) -> dict[str, bool]:
        return {name: value for name in self.__slots__ if (value := getattr(self, name)) is not None}


@dataclass(frozen=True, slots=True, kw_only=True)
class Rules:
    swap: bool
    full: FullRecompute
    patterns: tuple[PatternRule, ...]
    swaps: tuple[SwapRule, ...]
    options: RecomputeOptions
    compresses: tuple[CompressRule, ...] = ()

    def of_kind(self, kind: Kind) -> tuple[PatternRule, ...]:
        return tuple(rule for rule in self.patterns if rule.kind is kind)


class _Reader:
    """Reads one document; appends every problem to `issues`; skips keys the schema rejected."""

    def __init__(self, source: Source, layout: Layout, issues: list[ConfigIssue],
                 blocked: Callable[[KeyPath], bool]):
        self.source, self.layout, self.issues, self.blocked = source, layout, issues, blocked
        self.swap = source.get((*SWAP, "swap")) is True
        self.patterns_read = 0

    def origin(self, path: KeyPath) -> Origin:
        file = self.source.file_of(path)
        return Origin(path=path, line=self.source.line_of(path), file=file if file != self.source.file else None)

    def section(self, path: KeyPath) -> dict:
        value = self.source.get(path)
        return value if isinstance(value, dict) else {}

    def layers(self, value: Any, path: KeyPath) -> frozenset[int]:
        return select_layers(value, self.layout, by_index=self.swap, source=self.source, path=path,
                             issues=self.issues)

    def pattern_ok(self, text: str, path: KeyPath) -> bool:
        self.patterns_read += 1
        if self.patterns_read > MAX_PATTERNS:
            if self.patterns_read == MAX_PATTERNS + 1:
                self.issues.append(self.source.issue(
                    path, f"the config names more than {MAX_PATTERNS} patterns (select, exclude and op_swap together)",
                    "merge patterns with alternation, e.g. `feed_forward\\.(w1|w3)`"))
            return False
        problems = check_pattern(text)
        for problem in problems:
            self.issues.append(self.source.issue(path, problem.message, problem.hint,
                                                 severity=problem.severity))
        return not any(problem.severity == "error" for problem in problems)


def normalise(source: Source, layout: Layout, issues: list[ConfigIssue],
              blocked: Callable[[KeyPath], bool]) -> Rules | None:
    """The rules of both sections; None if a section could not be read."""
    reader = _Reader(source, layout, issues, blocked)
    section = reader.section(RECOMPUTE)
    full_path = (*RECOMPUTE, "recompute")
    full_value = False if blocked(full_path) else section.get("recompute", False)
    full = FullRecompute(layers=reader.layers(full_value, full_path), origin=reader.origin(full_path))
    patterns = tuple(rule for kind in Kind if not blocked((*RECOMPUTE, kind.value))
                     for rule in _pattern_rules(reader, kind, section.get(kind.value)))
    options = RecomputeOptions(**{name: section.get(name) for name in RecomputeOptions.__slots__
                                  if not blocked((*RECOMPUTE, name))})
    _warn_unused_options(reader, options, full)
    swaps = () if blocked((*SWAP, "swap")) else _swap_rules(reader)
    compresses = compress_rules(reader)
    return Rules(swap=reader.swap, full=full, patterns=patterns, swaps=swaps, options=options, compresses=compresses)


def _pattern_rules(reader: _Reader, kind: Kind, value: Any) -> list[PatternRule]:
    path = (*RECOMPUTE, kind.value)
    if isinstance(value, dict):
        entries = [(pattern, selection, (*path, pattern)) for pattern, selection in value.items()]
        return _rules_for(reader, kind, entries, default=False)
    if isinstance(value, list) and value and all(isinstance(item, str) for item in value):
        entries = [(pattern, True, (*path, index)) for index, pattern in enumerate(value)]
        return _rules_for(reader, kind, _without_repeats(reader, entries), default=False)
    selection = False if value is None else value
    entries = [(pattern, selection, path) for pattern in DEFAULT_PATTERNS[kind]]
    return _rules_for(reader, kind, entries, default=True)


def _without_repeats(reader: _Reader, entries: list[tuple[str, Any, KeyPath]]) -> list:
    seen: dict[str, KeyPath] = {}
    kept = []
    for pattern, selection, path in entries:
        if pattern in seen:
            reader.issues.append(reader.source.issue(
                path, f"pattern `{pattern}` is listed twice", f"it is already {key_path(seen[pattern])}"))
            continue
        seen[pattern] = path
        kept.append((pattern, selection, path))
    return kept


def _rules_for(reader: _Reader, kind: Kind, entries: list[tuple[str, Any, KeyPath]],
               default: bool) -> list[PatternRule]:
    rules = []
    for pattern, selection, path in entries:
        if not reader.pattern_ok(pattern, path):
            continue
        rules.append(PatternRule(kind=kind, pattern=pattern, layers=reader.layers(selection, path),
                                 origin=reader.origin(path), default=default))
    return rules


def _warn_unused_options(reader: _Reader, options: RecomputeOptions, full: FullRecompute) -> None:
    if full.layers:
        return
    for name, value in options.kwargs().items():
        if value:
            reader.issues.append(reader.source.issue(
                (*RECOMPUTE, name), f"{name} only applies to full-recompute layers, and none are configured",
                "set recompute_config.recompute, or remove this key", severity="warning"))


def _swap_rules(reader: _Reader) -> tuple[SwapRule, ...]:
    section = reader.section(SWAP)
    layer_entries = _entries(reader, section, "layer_swap")
    op_entries = _entries(reader, section, "op_swap")
    if not reader.swap:
        _warn_ignored(reader, section)
        return ()
    if section.get("layer_swap") is None and section.get("op_swap") is None:
        if reader.blocked((*SWAP, "default_prefetch")):
            return ()
        return (_default_strategy(reader, section),)
    _warn_default_prefetch_unused(reader, section)
    rules = [_layer_swap_rule(reader, entry, path) for entry, path in layer_entries]
    rules += [rule for entry, path in op_entries for rule in _op_swap_rules(reader, entry, path)]
    if not layer_entries and not op_entries:
        reader.issues.append(reader.source.issue(
            SWAP, "swap is true but layer_swap and op_swap are empty: nothing is swapped",
            "remove both to use the default strategy, or list what to swap", severity="warning"))
    _reject_overlaps(reader, rules)
    return tuple(rules)


def _entries(reader: _Reader, section: dict, key: str) -> list[tuple[dict, KeyPath]]:
    """The schema-valid entries of layer_swap/op_swap (a single mapping counts as one entry)."""
    value = section.get(key)
    if isinstance(value, dict):
        listed = [(value, (*SWAP, key))]
    elif isinstance(value, list):
        listed = [(entry, (*SWAP, key, index)) for index, entry in enumerate(value)]
    else:
        listed = []
    return [(entry, path) for entry, path in listed if isinstance(entry, dict) and not reader.blocked(path)]


def _default_strategy(reader: _Reader, section: dict) -> SwapRule:
    prefetch = section.get("default_prefetch", DEFAULT_PREFETCH)
    where = (*SWAP, "default_prefetch") if "default_prefetch" in section else (*SWAP, "swap")
    return SwapRule(pattern=DEFAULT_SWAP, prefetch=prefetch, layers=frozenset(range(reader.layout.num_layers)),
                    origin=reader.origin(where), default=True)


def _layer_swap_rule(reader: _Reader, entry: dict, path: KeyPath) -> SwapRule:
    return SwapRule(pattern=None, prefetch=entry["backward_prefetch"],
                    layers=_swap_layers(reader, entry["layers"], (*path, "layers")), origin=reader.origin(path))


def _op_swap_rules(reader: _Reader, entry: dict, path: KeyPath) -> list[SwapRule]:
    names = entry["op_name"]
    named = [(names, (*path, "op_name"))] if isinstance(names, str) else \
        [(name, (*path, "op_name", position)) for position, name in enumerate(names)]
    layers = _swap_layers(reader, entry["layers"], (*path, "layers"))
    return [SwapRule(pattern=name, prefetch=entry["backward_prefetch"], layers=layers, origin=reader.origin(path))
            for name, _, name_path in _without_repeats(reader, [(n, None, p) for n, p in named])
            if reader.pattern_ok(name, name_path)]


def _swap_layers(reader: _Reader, value: Any, path: KeyPath) -> frozenset[int]:
    if isinstance(value, bool):
        return frozenset(range(reader.layout.num_layers)) if value else frozenset()
    return layer_indices(value, reader.layout.num_layers, source=reader.source, path=path, issues=reader.issues)


def _reject_overlaps(reader: _Reader, rules: list[SwapRule]) -> None:
    """A layer may be swapped by one entry per pattern (MindFormers silently keeps the first)."""
    claimed: dict[tuple[str | None, int], SwapRule] = {}
    for rule in rules:
        clashes = sorted(layer for layer in rule.layers if (rule.pattern, layer) in claimed)
        if clashes:
            first = claimed[(rule.pattern, clashes[0])]
            what = "whole layers" if rule.pattern is None else f"op_name `{rule.pattern}`"
            reader.issues.append(reader.source.issue(
                rule.origin.path, f"{what}: layer(s) {clashes} are already swapped by {first.origin.describe()}",
                "list each layer once per pattern; split the entries so they do not overlap"))
        for layer in rule.layers:
            claimed.setdefault((rule.pattern, layer), rule)


def _warn_ignored(reader: _Reader, section: dict) -> None:
    for key in ("layer_swap", "op_swap", "default_prefetch"):
        if section.get(key) not in (None, []):
            reader.issues.append(reader.source.issue(
                (*SWAP, key), "ignored because swap_config.swap is not true",
                "set swap_config.swap: true to swap activations", severity="warning"))


def _warn_default_prefetch_unused(reader: _Reader, section: dict) -> None:
    if "default_prefetch" in section:
        reader.issues.append(reader.source.issue(
            (*SWAP, "default_prefetch"), "ignored: default_prefetch only sets the default strategy, "
            "which layer_swap/op_swap replace", "give backward_prefetch in each entry instead",
            severity="warning"))
