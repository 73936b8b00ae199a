"""Write the pipeline offsets `auto --balance` chose into the text of the user's YAML.

The text is edited, not re-dumped, so every other line stays as the user wrote it. Where each key and value
starts and ends is read from PyYAML's event stream (an alias's position is its own there, unlike in the composed
tree). An existing offset has its value replaced; otherwise a line is appended after the last entry of the
block mapping that holds it, at the mapping's indentation, or an entry after the last one of a flow mapping.
Either is valid YAML whatever the mapping's other values are (nested blocks, lists, block scalars, comments).

The edited text is read back and compared with the input document with the offsets set; any other difference
is a defect of this writer (`WriterError`), never reported as a problem of the user's file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from ..document.errors import key_path
from ..document.source import KeyPath, Source
from ..document.yamlload import LimitExceeded, build, compose

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_BREAK = re.compile("\r\n|[\r\n\x85\u2028\u2029]")


class WriterError(RuntimeError):
    """The offsets writer produced text that does not read back as the input with the new offsets: a defect of
    `mf_memopt.auto.offsets_writer`, not of the input file."""


@dataclass(slots=True)
class _Span:
    """A node of the YAML text: where it starts, where its content ends (a block collection's trailing comments
    and blank lines excluded), and its column."""

    kind: str                   # "scalar", "alias", "map" or "seq"
    start: int
    end: int
    column: int                 # a block mapping's: its keys' column
    flow: bool = True           # scalars and aliases count as flow: their text is where their marks say
    value: Any = None           # a scalar's text
    children: list[_Span] = field(default_factory=list)     # a mapping's keys and values alternate
    closing: int = -1           # a flow collection's closing bracket
    first: int = -1             # a block collection's first entry (after the collection's anchor or tag)
    block_scalar: bool = False  # its text ends with a block scalar (`|`, `>`)

    def pairs(self) -> list[tuple[_Span, _Span]]:
        return list(zip(self.children[::2], self.children[1::2]))


class _Events:
    """The event stream of a document, read into spans."""

    def __init__(self, text: str):
        self.events = list(yaml.parse(text, Loader=_LOADER))
        self.at = 0

    def root(self) -> _Span | None:
        while self.at < len(self.events) and not isinstance(self.events[self.at], yaml.NodeEvent):
            if isinstance(self.events[self.at], yaml.DocumentEndEvent):
                return None
            self.at += 1
        return self.node() if self.at < len(self.events) else None

    def node(self) -> _Span:
        event = self.events[self.at]
        self.at += 1
        start, end = event.start_mark, event.end_mark
        if isinstance(event, yaml.ScalarEvent):
            return _Span("scalar", start.index, end.index, start.column, value=event.value,
                         block_scalar=event.style in ("|", ">"))
        if isinstance(event, yaml.AliasEvent):
            return _Span("alias", start.index, end.index, start.column)
        children = []
        while not isinstance(self.events[self.at], yaml.CollectionEndEvent):
            children.append(self.node())
        closing = self.events[self.at]
        self.at += 1
        kind = "map" if isinstance(event, yaml.MappingStartEvent) else "seq"
        if event.flow_style:
            return _Span(kind, start.index, closing.end_mark.index, start.column, children=children,
                         closing=closing.start_mark.index)
        last = max(children, key=lambda child: child.end)     # a block collection is never empty
        # a block collection's start event ends where its first entry starts (its anchor or tag come before)
        return _Span(kind, start.index, last.end, end.column, flow=False, children=children, first=end.index,
                     block_scalar=last.block_scalar)


def _entry(mapping: _Span, key: Any) -> tuple[_Span, _Span] | None:
    """The key and value spans of `key` in a mapping (the last, as PyYAML keeps the last of repeated keys)."""
    found = None
    for name, value in mapping.pairs():
        if name.kind == "scalar" and name.value == key:
            found = (name, value)
    return found


def _mapping_at(text: str, path: KeyPath) -> _Span | None:
    """The span of the mapping at `path` in the text (None when the text has no mapping there of its own: the
    section is inherited, or an alias of another)."""
    node = _Events(text).root() if text.strip() else None
    for part in path:
        if node is None or node.kind != "map":
            return None
        entry = _entry(node, part)
        node = entry[1] if entry is not None else None
    return node if node is not None and node.kind == "map" else None


def offsets_writable(source: Source, key: KeyPath) -> bool:
    """Whether the top file's text holds the mapping the offset key belongs in (it may hold the key or not)."""
    try:
        return _mapping_at(source.text, source.written(key)[:-1]) is not None
    except yaml.YAMLError:
        return False


def flow(value: Any) -> str:
    """A list of integers (or of lists) in YAML flow style: `[1, -1]`, `[[1, 0], [0, -1]]`."""
    if isinstance(value, list):
        return "[" + ", ".join(flow(item) for item in value) + "]"
    return str(value)


def write_offsets(source: Source, key: KeyPath, offsets: Any) -> str:
    """The top file's text with the offset key set to `offsets`; `WriterError` when the edit does not read back as
    the input with only the offsets changed."""
    path = source.written(key)
    mapping = _mapping_at(source.text, path[:-1])
    if mapping is None:
        raise WriterError(f"internal error in mf_memopt.auto.offsets_writer: {source.file} has no "
                          f"{key_path(path[:-1])} mapping of its own to write the offsets into; callers check "
                          "`offsets_writable` first")
    entry = _entry(mapping, path[-1])
    value = flow(offsets)
    if entry is not None:
        text = _replaced(source.text, entry[0], entry[1], value)
    elif mapping.flow:
        text = _added_to_flow(source.text, mapping, f"{path[-1]}: {value}")
    else:
        text = _added_to_block(source.text, mapping, f"{path[-1]}: {value}")
    _check(source, path, offsets, text)
    return text


def _newline(text: str) -> str:
    found = _BREAK.search(text)
    return found.group() if found else "\n"


def _at_line_start(text: str, index: int) -> bool:
    return index == 0 or _BREAK.match(text[index - 1]) is not None


def _replaced(text: str, name: _Span, value: _Span, written: str) -> str:
    """The key's value replaced, from the end of the key to the end of the old value's content (a value that
    ended with its line break, a block scalar, keeps one)."""
    end = max(name.end, value.end)
    tail = _newline(text) if end > name.end and _at_line_start(text, end) else ""
    return text[:name.end] + ": " + written + tail + text[end:]


def _added_to_block(text: str, mapping: _Span, entry: str) -> str:
    """A line after the line where the mapping's content ends (after any comment on it), at its indentation; before
    its first entry when a line break after its content would change a block scalar."""
    newline, at = _newline(text), mapping.end
    if not _at_line_start(text, at):
        found = _BREAK.search(text, at)
        if found is None and mapping.block_scalar:
            # a block scalar ends the file without a line break: a line after it would add one to its value
            return text[:mapping.first] + entry + newline + " " * mapping.column + text[mapping.first:]
        if found is None:
            text, at = text + newline, len(text) + len(newline)
        else:
            at = found.end()
    return text[:at] + " " * mapping.column + entry + newline + text[at:]


def _added_to_flow(text: str, mapping: _Span, entry: str) -> str:
    """An entry after the flow mapping's last one (before its closing brace when it has none)."""
    if not mapping.children:
        return text[:mapping.closing] + entry + text[mapping.closing:]
    at = max(child.end for child in mapping.children[-2:])
    return text[:at] + ", " + entry + text[at:]


def _check(source: Source, path: KeyPath, offsets: Any, text: str) -> None:
    """`text` must read back as the top file's document with `offsets` at `path` and nothing else changed."""
    expected = build(compose(source.text), source.file).data
    parent = expected
    for part in path[:-1]:
        parent = parent.get(part) if isinstance(parent, dict) else None
    if not isinstance(parent, dict):
        raise WriterError(f"internal error in mf_memopt.auto.offsets_writer: it found {key_path(path[:-1])} in the "
                          f"text of {source.file}, but the document read from it has no mapping there")
    parent[path[-1]] = offsets
    try:
        got = build(compose(text), source.file).data
    except (yaml.YAMLError, LimitExceeded) as error:
        raise WriterError(f"internal error in mf_memopt.auto.offsets_writer: writing {key_path(path)}: "
                          f"{flow(offsets)} into the text of {source.file} gave YAML that does not parse ({error}); "
                          f"{source.file} itself reads correctly") from None
    if not _same(got, expected):
        raise WriterError(f"internal error in mf_memopt.auto.offsets_writer: writing {key_path(path)}: "
                          f"{flow(offsets)} into the text of {source.file} changed more than that key; "
                          f"{source.file} itself reads correctly")


def _same(a: Any, b: Any) -> bool:
    """Equal values of the same types (`1` is not `True` or `1.0`; NaN equals NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[name], b[name]) for name in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return bool(a == b or (a != a and b != b))
