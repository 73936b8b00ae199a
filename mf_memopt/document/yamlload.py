"""YAML text -> plain data and the line of every key, with every cost bounded.

PyYAML's composer already shares aliased nodes; the data built here shares them too (each
node is built once), so an alias bomb costs what its text costs. Limits turn what would
be a hang, a RecursionError or a MemoryError into one clear error:

* nesting: at most `MAX_DEPTH` levels, counted through aliases, and MindFormers' own rule
  (at most 10 nested mappings, which its loader checks before reading a file);
* alias expansion: a document whose aliases expand to more than `MAX_VALUES` values is
  refused, since MindFormers and the launcher walk the expanded tree;
* tags: only the plain YAML types are accepted (`yaml.safe_load`, which MindFormers uses,
  refuses `!!python/...` tags, but only once the launcher is running);
* merge keys (`<<`) are applied here, key by key, so nested merges cannot multiply.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from .errors import ConfigIssue, key_path, shown

KeyPath = tuple[Any, ...]

MAX_DEPTH = 64
MAX_VALUES = 100_000
MINDFORMERS_MAX_MAPPING_DEPTH = 10     # mindformers.tools.check_rules.YAML_MAX_NESTING_DEPTH
MAX_INT_BITS = 1024                    # larger integers cannot be printed (Python's 4300-digit limit)
MEMORY_SECTIONS = ("recompute_config", "swap_config", "compress_config")   # the sections mf_memopt owns

_Y = "tag:yaml.org,2002:"
_SCALAR_TAGS = {_Y + name for name in ("null", "bool", "int", "float", "str", "timestamp", "binary")}
_MAP, _SEQ, _MERGE = _Y + "map", _Y + "seq", _Y + "merge"


class LimitExceeded(Exception):
    """A bound was hit; parsing stops at once with this single issue."""

    def __init__(self, line: int | None, path: str, message: str, hint: str | None = None):
        super().__init__(message)
        self.line, self.path, self.message, self.hint = line, path, message, hint


class _DepthLimit:
    """A composer that stops at MAX_DEPTH instead of recursing until RecursionError."""

    _depth = 0

    def compose_node(self, parent, index):
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise LimitExceeded(mark.line + 1, "", f"the YAML is nested more than {MAX_DEPTH} levels deep",
                                    "a training config is a few levels deep; check the brackets and indentation")
            return yaml.composer.Composer.compose_node(self, parent, index)
        finally:
            self._depth -= 1


class _PyLoader(_DepthLimit, yaml.SafeLoader):
    pass


try:
    from yaml._yaml import CParser
except ImportError:  # PyYAML built without libyaml
    CParser = None

if CParser is not None:
    class _CLoader(_DepthLimit, CParser, yaml.composer.Composer, yaml.constructor.SafeConstructor,
                   yaml.resolver.Resolver):
        """libyaml's scanner and parser (iterative, about 6x faster) under PyYAML's composer and resolver.

        Scanning is what makes pure-Python PyYAML slow (~50 KiB/s on dense flow lists); the
        composer, resolver and constructors are the same ones `yaml.safe_load` uses.
        """

        def __init__(self, stream: str):
            CParser.__init__(self, stream)
            yaml.composer.Composer.__init__(self)
            yaml.constructor.SafeConstructor.__init__(self)
            yaml.resolver.Resolver.__init__(self)

        compose_document = yaml.composer.Composer.compose_document
        get_single_node = yaml.composer.Composer.get_single_node
        check_node = yaml.composer.Composer.check_node
        get_node = yaml.composer.Composer.get_node

_Loader = _CLoader if CParser is not None else _PyLoader


@dataclass(slots=True)
class _Built:
    value: Any
    height: int          # nesting levels below and including this node, aliases expanded
    mappings: int        # MindFormers' depth: nested mappings, not counting through lists
    size: int            # values after alias expansion
    key_lines: dict = field(default_factory=dict)


@dataclass(slots=True)
class Parsed:
    data: Any
    lines: dict[KeyPath, int]
    issues: list[ConfigIssue]


def compose(text: str) -> yaml.Node | None:
    try:
        return _compose(_Loader, text)
    except yaml.YAMLError:
        if _Loader is _PyLoader:
            raise
        # Report the error in the words of PyYAML's own parser, which MindFormers uses.
        return _compose(_PyLoader, text)


def _compose(loader_class, text: str) -> yaml.Node | None:
    loader = loader_class(text)
    try:
        return loader.get_single_node()
    finally:
        loader.dispose()


def build(node: yaml.Node | None, file: str) -> Parsed:
    """The data of a composed document; structural limits raise LimitExceeded."""
    builder = _Builder(file)
    if node is None:
        return Parsed({}, {}, [])
    built = builder.node(node, ())
    _check_totals(built, node, builder)
    return Parsed(built.value, builder.lines, builder.issues)


def _check_totals(root: _Built, node: yaml.Node, builder: _Builder) -> None:
    if root.height > MAX_DEPTH:
        raise LimitExceeded(*_worst(node, builder, "height"), f"the YAML is nested more than {MAX_DEPTH} levels "
                            "deep once aliases are expanded", "use fewer nested aliases")
    if root.mappings > MINDFORMERS_MAX_MAPPING_DEPTH:
        raise LimitExceeded(*_worst(node, builder, "mappings"), f"mappings are nested {root.mappings} deep; "
                            f"MindFormers refuses configs nested more than {MINDFORMERS_MAX_MAPPING_DEPTH} mappings "
                            "deep", "flatten the nested mappings")


def _worst(node: yaml.Node, builder: _Builder, measure: str) -> tuple[int | None, str]:
    """The line and key of the top-level section that is the deepest by `measure`, to point the error at."""
    if not builder.sections:
        return node.start_mark.line + 1, ""
    key = max(builder.sections, key=lambda name: getattr(builder.sections[name], measure))
    return builder.lines.get((key,)), key_path((key,))


class _Builder:
    def __init__(self, file: str):
        self.file = file
        self.lines: dict[KeyPath, int] = {}
        self.issues: list[ConfigIssue] = []
        self.done: dict[int, _Built] = {}
        self.active: set[int] = set()
        self.sections: dict[Any, _Built] = {}  # the top-level values, to say which one broke a limit

    def issue(self, node: yaml.Node, path: KeyPath, message: str, hint: str | None = None, *,
              severity: str = "error") -> None:
        self.issues.append(ConfigIssue(file=self.file, line=node.start_mark.line + 1, path=key_path(path),
                                       message=message, hint=hint, severity=severity))

    def node(self, node: yaml.Node, path: KeyPath) -> _Built:
        known = self.done.get(id(node))
        if known is not None:
            return known
        if id(node) in self.active:
            raise LimitExceeded(node.start_mark.line + 1, key_path(path),
                                "a YAML alias refers to a node that contains it (a recursive structure)",
                                "an anchor cannot be used inside its own value")
        self.active.add(id(node))
        try:
            built = self._build(node, path)
        finally:
            self.active.discard(id(node))
        self.done[id(node)] = built
        return built

    def _build(self, node: yaml.Node, path: KeyPath) -> _Built:
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, path)
        if isinstance(node, yaml.SequenceNode):
            return self._sequence(node, path)
        return _Built(self._scalar(node, path), 1, 0, 1)

    def _tag_ok(self, node: yaml.Node, path: KeyPath, allowed: set[str] | str) -> bool:
        if node.tag == allowed or node.tag in allowed:
            return True
        hint = ("MindFormers loads configs with yaml.safe_load, which refuses Python tags" if "python/" in node.tag
                else "remove the tag; a training config holds plain values, lists and mappings")
        tag = "!!" + node.tag[len(_Y):] if node.tag.startswith(_Y) else node.tag
        self.issue(node, path, f"the YAML tag `{shown(tag, 80)}` is not allowed", hint)
        return False

    def _scalar(self, node: yaml.Node, path: KeyPath) -> Any:
        if not self._tag_ok(node, path, _SCALAR_TAGS):
            return None
        try:
            value = self._loader_construct(node)
        except Exception as exc:  # noqa: BLE001 - PyYAML's scalar constructors raise what they meet (`!!timestamp x`)
            problem = getattr(exc, "problem", None) or str(exc)
            self.issue(node, path, f"cannot read the value `{shown(node.value, 60)}`: {shown(problem, 200)}")
            return None
        if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > MAX_INT_BITS:
            self.issue(node, path, f"the integer is too large ({value.bit_length()} bits)",
                       "MindSpore stores integers in 64 bits")
            return None
        return value

    _constructor = yaml.SafeLoader("")

    def _loader_construct(self, node: yaml.ScalarNode) -> Any:
        return self._constructor.yaml_constructors[node.tag](self._constructor, node)

    def _sequence(self, node: yaml.SequenceNode, path: KeyPath) -> _Built:
        if not self._tag_ok(node, path, _SEQ):
            return _Built(None, 1, 0, 1)
        items, height, size = [], 0, 1
        for index, item_node in enumerate(node.value):
            child = (*path, index)
            self.lines.setdefault(child, item_node.start_mark.line + 1)
            built = self.node(item_node, child)
            items.append(built.value)
            height, size = max(height, built.height), size + built.size
            self._guard(size, node, path)
        return _Built(items, height + 1, 0, size)

    def _guard(self, size: int, node: yaml.Node, path: KeyPath) -> None:
        # Stop early: once a node is past the cap, the document is refused whatever follows.
        if size > MAX_VALUES:
            top = path[:1]
            raise LimitExceeded(self.lines.get(top, node.start_mark.line + 1), key_path(top),
                                f"YAML aliases expand this document to more than {MAX_VALUES} values (an alias bomb?)",
                                "write the values out, or nest fewer aliases")

    def _mapping(self, node: yaml.MappingNode, path: KeyPath) -> _Built:
        if not self._tag_ok(node, path, _MAP):
            return _Built(None, 1, 1, 1)
        result: dict[Any, Any] = {}
        key_lines: dict[Any, int] = {}
        height = mappings = 0
        size = 1
        merged: list[tuple[_Built, dict]] = []
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE and isinstance(key_node, yaml.ScalarNode):
                merged += self._merge_sources(value_node, path)
                continue
            key = self._key(key_node, path)
            if key is _NO_KEY:
                continue
            child = (*path, key)
            line = key_node.start_mark.line + 1
            if key in key_lines:
                # In the memory sections a repeated key is a mistake to fix; elsewhere it is MindFormers'
                # business, which keeps the last value as YAML does.
                if child[0] in MEMORY_SECTIONS:
                    self.issue(key_node, child, "duplicate key: YAML keeps only the last value",
                               f"the first one is on line {key_lines[key]}; remove one of them")
                else:
                    self.issue(key_node, child, "duplicate key: YAML keeps the last value, as MindFormers does; the "
                               f"one on line {key_lines[key]} is ignored", "remove one of them", severity="warning")
            key_lines[key] = line
            self.lines[child] = line
            built = self.node(value_node, child)
            result[key] = built.value
            height, mappings = max(height, built.height), max(mappings, built.mappings)
            size += 1 + built.size
            self._guard(size, node, path)
            if not path:
                self.sections[key] = built
        for built, lines in merged:  # explicit keys win; earlier merged mappings win over later ones
            for key, value in built.value.items():
                if key not in result:
                    result[key] = value
                    self.lines.setdefault((*path, key), lines.get(key))
            height, mappings = max(height, built.height - 1), max(mappings, built.mappings - 1)
            size += built.size
            self._guard(size, node, path)
        return _Built(result, height + 1, mappings + 1, size, key_lines)

    def _merge_sources(self, value_node: yaml.Node, path: KeyPath) -> list[tuple[_Built, dict]]:
        nodes = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
        sources = []
        for source in nodes:
            built = self.node(source, path) if isinstance(source, yaml.MappingNode) else None
            if built is None or not isinstance(built.value, dict):
                self.issue(source, path, "a merge key `<<` takes a mapping or a list of mappings")
                continue
            sources.append((built, built.key_lines))
        return sources

    def _key(self, key_node: yaml.Node, path: KeyPath) -> Any:
        if not isinstance(key_node, yaml.ScalarNode):
            self.issue(key_node, path, "a mapping key must be a plain scalar, not a list or a mapping")
            return _NO_KEY
        key = self._scalar(key_node, path)
        if key is not None and not isinstance(key, (str, int, float, bool)):
            self.issue(key_node, path, f"a mapping key must be a string or a number, got `{shown(key_node.value, 60)}`")
            return _NO_KEY
        return key


_NO_KEY = object()
