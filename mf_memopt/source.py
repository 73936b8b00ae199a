"""Load a training YAML and remember the line of every key, so errors can point at it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .errors import ConfigError, ConfigIssue, key_path

KeyPath = tuple[str | int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Source:
    """A parsed YAML document with the line of every key and list item (1-based)."""

    file: str
    data: dict[str, Any]
    lines: Mapping[KeyPath, int] = field(default_factory=dict)

    def line_of(self, path: KeyPath) -> int | None:
        """The line of `path`, or of its nearest ancestor that has one."""
        for end in range(len(path), 0, -1):
            line = self.lines.get(tuple(path[:end]))
            if line is not None:
                return line
        return None

    def get(self, path: KeyPath, default: Any = None) -> Any:
        node: Any = self.data
        for part in path:
            if isinstance(node, Mapping) and part in node:
                node = node[part]
            elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
                node = node[part]
            else:
                return default
        return node

    def has(self, path: KeyPath) -> bool:
        marker = object()
        return self.get(path, marker) is not marker

    def issue(self, path: KeyPath, message: str, hint: str | None = None, *,
              severity: str = "error") -> ConfigIssue:
        return ConfigIssue(file=self.file, line=self.line_of(path), path=key_path(path),
                           message=message, hint=hint, severity=severity)


def load_source(config: str | Path | Mapping[str, Any]) -> Source:
    """Read a YAML file (or wrap an in-memory mapping, which has no lines)."""
    if isinstance(config, Mapping):
        return Source(file="<mapping>", data=dict(config))
    path = Path(config)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([ConfigIssue(file=str(path), line=None, path="",
                                       message=f"cannot read the file: {exc.strerror or exc}")]) from None
    return parse_yaml(text, str(path))


def parse_yaml(text: str, file: str) -> Source:
    loader = None
    try:
        loader = yaml.SafeLoader(text)
        node = loader.get_single_node()
        lines: dict[KeyPath, int] = {}
        issues: list[ConfigIssue] = []
        data = _build(loader, node, (), lines, issues, file) if node is not None else {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError([ConfigIssue(file=file, line=line, path="",
                                       message=f"invalid YAML: {problem}",
                                       hint=_yaml_hint(problem))]) from None
    finally:
        if loader is not None:
            loader.dispose()
    if not isinstance(data, dict):
        issues.append(ConfigIssue(file=file, line=1, path="",
                                  message="the document must be a mapping of sections"))
    if issues:
        raise ConfigError(issues)
    return Source(file=file, data=data, lines=lines)


def _yaml_hint(problem: str) -> str | None:
    if "escape" in problem:
        return "write regex patterns in single quotes, e.g. 'feed_forward\\.mul'"
    return None


def _build(loader: yaml.SafeLoader, node: yaml.Node, path: KeyPath, lines: dict[KeyPath, int],
           issues: list[ConfigIssue], file: str) -> Any:
    if isinstance(node, yaml.MappingNode):
        loader.flatten_mapping(node)
        result: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int, float, bool)) and key is not None:
                issues.append(ConfigIssue(file=file, line=key_node.start_mark.line + 1, path=key_path(path),
                                          message="a mapping key must be a plain scalar"))
                continue
            child = (*path, key)
            if key in result:
                issues.append(ConfigIssue(
                    file=file, line=key_node.start_mark.line + 1, path=key_path(child),
                    message="duplicate key: YAML keeps only the last value",
                    hint=f"the first one is on line {lines.get(child)}; remove one of them"))
            lines[child] = key_node.start_mark.line + 1
            result[key] = _build(loader, value_node, child, lines, issues, file)
        return result
    if isinstance(node, yaml.SequenceNode):
        items = []
        for index, item_node in enumerate(node.value):
            lines[(*path, index)] = item_node.start_mark.line + 1
            items.append(_build(loader, item_node, (*path, index), lines, issues, file))
        return items
    return loader.construct_object(node, deep=True)
