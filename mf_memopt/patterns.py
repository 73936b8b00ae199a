"""Operator patterns: regex segments separated by the literal `\\.`.

Each segment fully matches the name of a child cell; the last segment may also match a
primitive operator held by the cell. `feed_forward\\.w1\\.activation\\.silu` walks
feed_forward -> w1 -> activation and takes its `silu`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache

SEPARATOR = r"\."
_DUNDER_PROBES = ("__class__", "__dict__", "__init__", "__module__", "__doc__")
_BARE_DOT = re.compile(r"(?<=[A-Za-z0-9_])\.(?=[A-Za-z_])")


@dataclass(frozen=True, slots=True)
class Pattern:
    text: str
    segments: tuple[str, ...]
    compiled: tuple[re.Pattern[str], ...] = field(compare=False, repr=False)

    def segment_matches(self, index: int, name: str) -> bool:
        return self.compiled[index].fullmatch(name) is not None


@dataclass(frozen=True, slots=True)
class PatternProblem:
    message: str
    hint: str | None
    severity: str = "error"


@cache
def compile_pattern(text: str) -> Pattern:
    """Compile a pattern that `check_pattern` accepted."""
    segments = tuple(text.split(SEPARATOR))
    return Pattern(text, segments, tuple(re.compile(segment) for segment in segments))


def check_pattern(text: str) -> list[PatternProblem]:
    problems: list[PatternProblem] = []
    segments = text.split(SEPARATOR)
    if any(segment == "" for segment in segments):
        problems.append(PatternProblem(
            f"pattern `{text}` has an empty segment",
            r"segments are separated by a single `\.`, with no `\.` at either end"))
        return problems
    for segment in segments:
        try:
            re.compile(segment)
        except re.error as exc:
            problems.append(PatternProblem(
                f"segment `{segment}` of pattern `{text}` is not a valid regular expression: {exc}",
                "escape regex characters such as ( [ * + ? with a backslash"))
    if problems:
        return problems
    last = re.compile(segments[-1])
    if any(last.fullmatch(name) for name in _DUNDER_PROBES):
        problems.append(PatternProblem(
            f"the last segment `{segments[-1]}` of `{text}` also matches Python attributes such as "
            "`__class__`; mf_memopt only matches child cells and primitive operators, but MindFormers' "
            "own implementation crashes on such a pattern",
            "name the operators, e.g. `feed_forward\\.(mul|w1)`", "warning"))
    bare = _BARE_DOT.search(text)
    if bare:
        escaped = _BARE_DOT.sub(r"\\.", text)
        problems.append(PatternProblem(
            f"pattern `{text}` has an unescaped `.`, which is a regex wildcard inside one name, "
            "not a separator between cell names",
            f"did you mean `{escaped}`?", "warning"))
    return problems


def covers(outer: str, inner: str) -> bool:
    """True when everything `inner` names lies inside what `outer` names.

    Decided on the pattern text alone: `outer` has no more segments than `inner`, and each
    of its segments fully matches the corresponding segment of `inner` read as a name.
    `feed_forward` covers `feed_forward\\.w1`; `.*\\.mul` covers `feed_forward\\.mul`.
    """
    outer_pattern, inner_pattern = compile_pattern(outer), compile_pattern(inner)
    if len(outer_pattern.segments) > len(inner_pattern.segments):
        return False
    return all(outer_pattern.segment_matches(index, segment)
               for index, segment in enumerate(inner_pattern.segments[:len(outer_pattern.segments)]))
