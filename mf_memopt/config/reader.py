"""The one reader of the three sections (recompute_config, swap_config, compress_config).

It holds what every section needs while it is normalised: the document, the layout, the
model family, the issues found so far and the keys the schema already rejected (which are
not read further), and the helpers the sections share: where a key was written, layer
selections, patterns, list entries, repeats and overlaps.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

from ..document.errors import ConfigIssue, key_path
from ..document.patterns import check_pattern
from ..document.source import KeyPath, Source
from ..family import ModelFamily
from .forms import layer_indices, select_layers
from .layout import Layout
from .rules import Origin

MAX_PATTERNS = 128  # in one document; resolving compares patterns pairwise in every distinct layer


class _Claim(Protocol):
    pattern: str | None
    layers: frozenset[int]
    origin: Origin


class SectionReader:
    """Reads one document; appends every problem to `issues`; skips keys the schema rejected."""

    def __init__(self, source: Source, layout: Layout, family: ModelFamily, issues: list[ConfigIssue],
                 blocked: Callable[[KeyPath], bool]):
        self.source, self.layout, self.family, self.issues, self.blocked = source, layout, family, issues, blocked
        self.swap = source.get(("swap_config", "swap")) is True
        self.patterns_read = 0

    def origin(self, path: KeyPath) -> Origin:
        file = self.source.file_of(path)
        return Origin(path=self.source.written(path), line=self.source.line_of(path),
                      file=file if file != self.source.file else None)

    def section(self, path: KeyPath) -> dict:
        value = self.source.get(path)
        return value if isinstance(value, dict) else {}

    def warn(self, path: KeyPath, message: str, hint: str | None = None) -> None:
        self.issues.append(self.source.issue(path, message, hint, severity="warning"))

    def error(self, path: KeyPath, message: str, hint: str | None = None) -> None:
        self.issues.append(self.source.issue(path, message, hint))

    def layers(self, value: Any, path: KeyPath) -> frozenset[int]:
        """A recompute selection: per-stage counts with swap off, layer indices with swap on."""
        return select_layers(value, self.layout, by_index=self.swap, source=self.source, path=path,
                             issues=self.issues)

    def listed_layers(self, value: Any, path: KeyPath) -> frozenset[int]:
        """`layers` of a swap or compress entry: true (every layer), false, or layer indices."""
        if isinstance(value, bool):
            return self.every_layer() if value else frozenset()
        return layer_indices(value, self.layout.num_layers, source=self.source, path=path, issues=self.issues)

    def every_layer(self) -> frozenset[int]:
        return frozenset(range(self.layout.num_layers))

    def pattern_ok(self, text: str, path: KeyPath) -> bool:
        self.patterns_read += 1
        if self.patterns_read > MAX_PATTERNS:
            if self.patterns_read == MAX_PATTERNS + 1:
                self.error(path, f"the config names more than {MAX_PATTERNS} patterns (select, exclude and op_swap "
                           "together)", "merge patterns with alternation, e.g. `cell\\.(a|b)`")
            return False
        problems = check_pattern(text)
        for problem in problems:
            self.issues.append(self.source.issue(path, problem.message, problem.hint, severity=problem.severity))
        return not any(problem.severity == "error" for problem in problems)

    def entries(self, section_path: KeyPath, key: str) -> list[tuple[dict, KeyPath]]:
        """The schema-valid entries of a list of mappings (a single mapping counts as one entry)."""
        path = (*section_path, key)
        value = self.section(section_path).get(key)
        if isinstance(value, dict):
            listed = [(value, path)]
        elif isinstance(value, list):
            listed = [(entry, (*path, index)) for index, entry in enumerate(value)]
        else:
            listed = []
        return [(entry, where) for entry, where in listed if isinstance(entry, dict) and not self.blocked(where)]

    def op_names(self, entry: dict, path: KeyPath) -> list[tuple[str, KeyPath]]:
        """The valid patterns of an entry's `op_name` (one pattern or a list), each once."""
        names = entry["op_name"]
        named = [(names, (*path, "op_name"))] if isinstance(names, str) else \
            [(name, (*path, "op_name", position)) for position, name in enumerate(names)]
        return [(name, where) for name, where in self.without_repeats(named) if self.pattern_ok(name, where)]

    def without_repeats(self, named: Iterable[tuple[str, KeyPath]]) -> list[tuple[str, KeyPath]]:
        seen: dict[str, KeyPath] = {}
        kept = []
        for pattern, path in named:
            if pattern in seen:
                self.error(path, f"pattern `{pattern}` is listed twice", f"it is already {key_path(seen[pattern])}")
                continue
            seen[pattern] = path
            kept.append((pattern, path))
        return kept

    def reject_overlaps(self, rules: Iterable[_Claim], verb: str) -> None:
        """A layer may be claimed by one entry per pattern (MindFormers silently keeps the first)."""
        claimed: dict[tuple[str | None, int], _Claim] = {}
        for rule in rules:
            clashes = sorted(layer for layer in rule.layers if (rule.pattern, layer) in claimed)
            if clashes:
                first = claimed[(rule.pattern, clashes[0])]
                what = "whole layers" if rule.pattern is None else f"op_name `{rule.pattern}`"
                self.error(rule.origin.path, f"{what}: layer(s) {clashes} are already {verb} by "
                           f"{first.origin.describe()}", "list each layer once per pattern; split the entries so "
                           "they do not overlap")
            for layer in rule.layers:
                claimed.setdefault((rule.pattern, layer), rule)

    def warn_ignored(self, section_path: KeyPath, keys: Iterable[str], empty: tuple, switch: str, hint: str) -> None:
        """Keys written while the section's master switch is off."""
        section = self.section(section_path)
        for key in keys:
            if section.get(key) not in empty:
                self.warn((*section_path, key), f"ignored because {key_path((*section_path, switch))} is not true",
                          hint)
