"""`base_config`: inherit from other YAML files exactly as MindFormers does.

`MindFormerConfig._file2dict` (mindformers/tools/register/config.py) reads a file, pops its
top-level `base_config` (one path or a list), resolves each path against the directory of
the file as it was named, loads the bases recursively, combines them with a top-level
`dict.update` (a later base replaces a whole section of an earlier one), then merges the
file into the result: mappings merge key by key, anything else replaces.

Here every value keeps the file and line it came from, so an error points at the file
where the bad value lives. Cycles, which MindFormers follows until RecursionError, are an error.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError, ConfigIssue, key_path, shown

BASE_CONFIG = "base_config"
MAX_CHAIN = 16      # files in one chain of inheritance
MAX_FILES = 64      # files read in all (a diamond of lists could read the same file exponentially often)

KeyPath = tuple[Any, ...]
Location = tuple[str, int]


@dataclass(slots=True)
class Document:
    """A loaded (and possibly merged) config: data and the (file, line) of every key path."""

    data: dict
    locations: dict[KeyPath, Location]


class Inheritance:
    """Follows base_config from one top file; `load` reads and parses one file into a Document."""

    def __init__(self, load, issues: list[ConfigIssue]):
        self.load, self.issues, self.files_read = load, issues, 0

    def document(self, path: str, chain: tuple[str, ...] = ()) -> Document:
        self.files_read += 1
        doc = self.load(path)
        if BASE_CONFIG not in doc.data:
            return doc
        data = dict(doc.data)
        bases = self._bases(path, data.pop(BASE_CONFIG), doc, (*chain, os.path.realpath(path)))
        child = Document(data, {p: loc for p, loc in doc.locations.items() if p[:1] != (BASE_CONFIG,)})
        return merge(child, bases, self.issues)

    def _bases(self, path: str, value: Any, doc: Document, chain: tuple[str, ...]) -> list[Document]:
        listed = value if isinstance(value, list) else [value]
        where = (BASE_CONFIG,) if not isinstance(value, list) else None
        bases = []
        for index, name in enumerate(listed):
            item = where or (BASE_CONFIG, index)
            location = doc.locations.get(item) or doc.locations.get((BASE_CONFIG,), (path, 0))
            base = self._base(path, name, location, item, chain)
            if base is not None:
                bases.append(base)
        return bases

    def _base(self, path: str, name: Any, location: Location, item: KeyPath, chain: tuple[str, ...]) -> Document | None:
        file, line = location
        def report(message: str, hint: str | None = None) -> None:
            self.issues.append(ConfigIssue(file=file, line=line, path=key_path(item), message=message, hint=hint))
        if not isinstance(name, str) or not name:
            report(f"expected the path of a YAML file, got {shown(repr(name))}",
                   "base_config takes a path or a list of paths, relative to this file")
            return None
        base_path = os.path.join(os.path.dirname(path), name)
        if os.path.realpath(base_path) in chain:
            loop = " -> ".join(shown(os.path.basename(step), 80) for step in (*chain, os.path.realpath(base_path)))
            report(f"base_config cycle: {loop}", "a config cannot inherit from itself, directly or through its bases")
            return None
        if len(chain) >= MAX_CHAIN or self.files_read >= MAX_FILES:
            report(f"base_config reads more than {MAX_FILES} files or nests more than {MAX_CHAIN} deep",
                   "inherit from fewer files")
            return None
        try:
            return self.document(base_path, chain)
        except ConfigError as error:
            unreadable = [issue for issue in error.issues if issue.file == base_path and issue.line is None]
            for issue in unreadable:
                report(f"base config `{shown(base_path, 200)}`: {issue.message}", issue.hint)
            self.issues.extend(issue for issue in error.issues if issue not in unreadable)
            return None


def merge(child: Document, bases: list[Document], issues: list[ConfigIssue]) -> Document:
    """MindFormers' merge: bases combined section by section, then `child` merged in key by key."""
    docs = [*bases, child]
    owner: dict[KeyPath, int] = {}
    combined: dict = {}
    for index, base in enumerate(bases):
        for key, value in base.data.items():
            combined[key] = value
            owner[(key,)] = index
    data = _merge_into(child.data, combined, (), docs, owner, issues)
    return Document(data, _locations(docs, owner))


def _merge_into(a: dict, b: dict, path: KeyPath, docs: list[Document], owner: dict[KeyPath, int],
                issues: list[ConfigIssue], b_owner: int | None = None) -> dict:
    """MindFormerConfig._merge_a_into_b: values of `a` (the child) override those of `b`."""
    child = len(docs) - 1
    result = dict(b)
    if b_owner is not None:
        for key in b:
            owner[(*path, key)] = b_owner
    for key, value in a.items():
        here = (*path, key)
        inherited = b.get(key)
        source = owner.get(here) if b_owner is None else b_owner
        if isinstance(value, dict) and key in b and isinstance(inherited, dict):
            result[key] = _merge_into(value, inherited, here, docs, owner, issues, source)
        elif isinstance(value, dict) and key in b and inherited is not None:
            _cannot_merge(docs, here, source, inherited, issues)
        else:
            result[key] = value
        owner[here] = child
    return result


def _cannot_merge(docs: list[Document], path: KeyPath, source: int | None, inherited: Any,
                  issues: list[ConfigIssue]) -> None:
    file, line = _locate(docs[-1].locations, path)
    origin = _locate(docs[source].locations, path) if source is not None else (None, None)
    kind = type(inherited).__name__
    issues.append(ConfigIssue(
        file=file, line=line, path=key_path(path),
        message=f"a mapping cannot override the inherited {kind} (from {shown(origin[0], 200)}:{origin[1]}): "
                "MindFormers fails to merge them", hint="write the value in the same form as in the base config"))


def _locate(locations: dict[KeyPath, Location], path: KeyPath) -> tuple[str | None, int | None]:
    for end in range(len(path), 0, -1):
        found = locations.get(path[:end])
        if found is not None:
            return found
    return None, None


def _locations(docs: list[Document], owner: dict[KeyPath, int]) -> dict[KeyPath, Location]:
    """Each key path takes its location from the document whose value the merge kept there."""
    kept: dict[KeyPath, Location] = {}
    for index, doc in enumerate(docs):
        for path, location in doc.locations.items():
            if _owner_of(path, owner) == index:
                kept[path] = location
    return kept


def _owner_of(path: KeyPath, owner: dict[KeyPath, int]) -> int | None:
    for end in range(len(path), 0, -1):
        found = owner.get(path[:end])
        if found is not None:
            return found
    return None
