"""Load a training YAML and remember the file and line of every key, so errors can point at it.

`load_source` reads the file safely (`reading`), parses it with bounded cost (`yamlload`)
and follows `base_config` as MindFormers does (`inherit`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from .errors import ConfigError, ConfigIssue, Severity, key_path, shown
from .inherit import Document, Inheritance
from .reading import decode, read_bytes
from .yamlload import LimitExceeded, build, compose

KeyPath = tuple[str | int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Source:
    """A parsed YAML document with the line of every key and list item (1-based).

    `files` names the file of key paths that were inherited through `base_config`; every
    other path is in `file`. `warnings` are what loading noticed (an encoding MindFormers
    cannot read, ...).
    """

    file: str
    data: dict[str, Any]
    lines: Mapping[KeyPath, int] = field(default_factory=dict)
    files: Mapping[KeyPath, str] = field(default_factory=dict)
    warnings: tuple[ConfigIssue, ...] = ()
    text: str = ""              # the top file's text, as read (what `auto` rewrites)
    renames: Mapping[KeyPath, KeyPath] = field(default_factory=dict)   # read at -> written at (`read_as`)

    def written(self, path: KeyPath) -> KeyPath:
        """Where the user wrote `path`: a key a family reads under another name is reported by its own."""
        for end in range(len(path), 0, -1):
            moved = self.renames.get(tuple(path[:end]))
            if moved is not None:
                return (*moved, *path[end:])
        return tuple(path)

    def _located(self, path: KeyPath) -> KeyPath | None:
        for end in range(len(path), 0, -1):
            if tuple(path[:end]) in self.lines:
                return tuple(path[:end])
        return None

    def _from_other_file(self, path: KeyPath) -> KeyPath | None:
        """The nearest ancestor of `path` (itself included) read from a file without lines (a JSON file), if it is
        nearer than any with a line."""
        for end in range(len(path), 0, -1):
            prefix = tuple(path[:end])
            if prefix in self.lines:
                return None
            if prefix in self.files:
                return prefix
        return None

    def line_of(self, path: KeyPath) -> int | None:
        """The line of `path`, or of its nearest ancestor that has one."""
        if self._from_other_file(path) is not None:
            return None
        found = self._located(path)
        return self.lines[found] if found is not None else None

    def file_of(self, path: KeyPath) -> str:
        """The file that holds `path` (a base config's, when it was inherited)."""
        other = self._from_other_file(path)
        if other is not None:
            return self.files[other]
        found = self._located(path)
        return self.files.get(found, self.file) if found is not None else self.file

    def get(self, path: KeyPath, default: Any = None) -> Any:
        node: Any = self.data
        for part in path:
            in_mapping = isinstance(node, Mapping) and part in node
            if in_mapping or (isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)):
                node = node[part]
            else:
                return default
        return node

    def has(self, path: KeyPath) -> bool:
        marker = object()
        return self.get(path, marker) is not marker

    def issue(self, path: KeyPath, message: str, hint: str | None = None, *,
              severity: Severity = "error") -> ConfigIssue:
        return ConfigIssue(file=self.file_of(path), line=self.line_of(path), path=key_path(self.written(path)),
                           message=message, hint=hint, severity=severity)


def issue_at(source: Source | None, path: KeyPath, message: str, hint: str | None = None) -> ConfigIssue:
    """An error at `path` of `source`, or, when a stage checks a config it was handed without its file (a
    MindFormerConfig), at `path` of "<config>"."""
    if source is not None:
        return source.issue(path, message, hint)
    return ConfigIssue(file="<config>", line=None, path=key_path(path), message=message, hint=hint)


def read_as(source: Source, moves: Mapping[KeyPath, KeyPath]) -> Source:
    """`source` with each written key (a value of `moves`) also readable at its key (the path it is read at),
    with its lines, and reported by its written path. A family whose YAML spells a key or section its own way
    (an alias, a section kept in model_config) is read by every stage as the common spelling."""
    data, lines, files, renames = dict(source.data), dict(source.lines), dict(source.files), dict(source.renames)
    for read_at, written_at in moves.items():
        if not source.has(written_at) or tuple(read_at) == tuple(written_at):
            continue
        data = _put(data, read_at, source.get(written_at))
        size = len(written_at)
        for path, line in source.lines.items():
            if path[:size] == tuple(written_at):
                lines[(*read_at, *path[size:])] = line
                if path in source.files:
                    files[(*read_at, *path[size:])] = source.files[path]
        renames[tuple(read_at)] = tuple(written_at)
    return replace(source, data=data, lines=lines, files=files, renames=renames)


def _put(data: dict, path: KeyPath, value: Any) -> dict:
    """A copy of `data` with `value` at `path` (the mappings on the way copied, not changed)."""
    head, *rest = path
    if not rest:
        return {**data, head: value}
    inner = data.get(head)
    return {**data, head: _put(inner if isinstance(inner, dict) else {}, tuple(rest), value)}


def load_source(config: str | Path | Mapping[str, Any]) -> Source:
    """Read a YAML file, with what it inherits through base_config (or wrap a mapping, which has no lines)."""
    if isinstance(config, Mapping):
        return Source(file="<mapping>", data=dict(config))
    top = str(config)
    issues: list[ConfigIssue] = []
    texts: dict[str, str] = {}

    def load(path: str) -> Document:
        text, notes = decode(read_bytes(path), path)
        texts.setdefault(path, text)
        parsed = _parse(text, path, notes, from_file=True)
        issues.extend(parsed[2])
        return Document(parsed[0], {key: (path, line) for key, line in parsed[1].items()})

    document = Inheritance(load, issues).document(top)
    if any(issue.severity == "error" for issue in issues):
        raise ConfigError([issue for issue in issues if issue.severity == "error"])
    lines = {path: line for path, (_, line) in document.locations.items()}
    files = {path: file for path, (file, _) in document.locations.items() if file != top}
    return Source(file=top, data=document.data, lines=lines, files=files,
                  warnings=tuple(issue for issue in issues if issue.severity == "warning"), text=texts[top])


def parse_bytes(raw: bytes, file: str) -> Source:
    """A Source from a file's bytes (any encoding `reading.decode` accepts); base_config is not followed."""
    text, notes = decode(raw, file)
    return _source(text, file, notes)


def parse_yaml(text: str, file: str) -> Source:
    """A Source from YAML text; base_config is not followed."""
    return _source(text, file, [])


def _source(text: str, file: str, notes: list[ConfigIssue]) -> Source:
    data, lines, issues = _parse(text, file, notes, from_file=False)
    errors = [issue for issue in issues if issue.severity == "error"]
    if errors:
        raise ConfigError(errors)
    return Source(file=file, data=data, lines=lines, warnings=tuple(issues), text=text)


def _parse(text: str, file: str, notes: list[ConfigIssue], *, from_file: bool) -> tuple[dict, dict, list[ConfigIssue]]:
    """Data, lines and issues of one document; ConfigError when it cannot be read at all."""
    try:
        parsed = build(compose(text), file)
    except yaml.YAMLError as exc:
        raise ConfigError([_yaml_issue(exc, text, file)]) from None
    except LimitExceeded as limit:
        raise ConfigError([ConfigIssue(file=file, line=limit.line, path=limit.path, message=limit.message,
                                       hint=limit.hint)]) from None
    issues = [*notes, *parsed.issues]
    data = parsed.data
    if not isinstance(data, dict):
        issues.append(ConfigIssue(file=file, line=1, path="", message="the document must be a mapping of sections"))
        return {}, {}, issues
    if from_file and not data and not text.strip(" \t\r\n\ufeff"):
        issues.append(ConfigIssue(file=file, line=None, path="", message="the file is empty",
                                  hint="MindFormers cannot load an empty config"))
    for key in data:
        if not isinstance(key, str):
            issues.append(ConfigIssue(file=file, line=parsed.lines.get((key,)), path=key_path((key,)),
                                      message="a top-level key must be a string",
                                      hint="MindFormers sorts the sections by name"))
    return data, parsed.lines, issues


def _yaml_issue(exc: yaml.YAMLError, text: str, file: str) -> ConfigIssue:
    mark = getattr(exc, "problem_mark", None)
    line = mark.line + 1 if mark is not None else None
    position = getattr(exc, "position", None)  # ReaderError: a character YAML does not allow
    if line is None and isinstance(position, int):
        line = text.count("\n", 0, position) + 1
    problem = getattr(exc, "problem", None) or getattr(exc, "reason", None) or str(exc)
    if isinstance(exc, yaml.reader.ReaderError) and isinstance(exc.character, (str, int)):
        code = exc.character if isinstance(exc.character, int) else ord(exc.character)
        problem = f"the character U+{code:04X} is not allowed in YAML"
    return ConfigIssue(file=file, line=line, path="", message=f"invalid YAML: {shown(problem, 300)}",
                       hint=_yaml_hint(problem))


def _yaml_hint(problem: str) -> str | None:
    if "escape" in problem:
        return "write regex patterns in single quotes, e.g. 'mlp\\.mul'"
    return None
