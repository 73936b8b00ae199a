"""Operator patterns: regex segments separated by the literal `\\.`.

Each segment fully matches the name of a child cell; the last segment may also match a
primitive operator held by the cell. `mlp\\.gate\\.activation\\.silu` walks
mlp -> gate -> activation and takes its `silu`.

Regex work is bounded: a pattern is at most `MAX_PATTERN_LENGTH` characters; a segment that
could backtrack exponentially (a repeated group that itself repeats or alternates, such as
`(a+)+b`) or polynomially with a high degree (more than `MAX_REPEATS` repetitions) is refused
before it is ever matched; user regexes are only matched against names (cell and operator
names, or literal segments of other patterns, at most `MAX_NAME_LENGTH` characters), and
every result is cached.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache, lru_cache
from re import _parser as sre_parse

from .errors import shown

MAX_PATTERN_LENGTH = 256
MAX_REPEATS = 4
MAX_NAME_LENGTH = 128
_REPEATS = {sre_parse.MAX_REPEAT, sre_parse.MIN_REPEAT, sre_parse.POSSESSIVE_REPEAT}
_COMPILE_FAILURES = (re.error, RecursionError, OverflowError, ValueError, MemoryError)

SEPARATOR = r"\."
_DUNDER_PROBES = ("__class__", "__dict__", "__init__", "__module__", "__doc__")
_BARE_DOT = re.compile(r"(?<=[A-Za-z0-9_])\.(?=[A-Za-z_])")


@dataclass(frozen=True, slots=True)
class Pattern:
    text: str
    segments: tuple[str, ...]
    compiled: tuple[re.Pattern[str], ...] = field(compare=False, repr=False)

    def segment_matches(self, index: int, name: str) -> bool:
        return _fullmatch(self.segments[index], name)


@lru_cache(maxsize=1 << 16)
def _fullmatch(segment: str, name: str) -> bool:
    if len(name) > MAX_NAME_LENGTH:
        return False  # no cell or operator name is this long; do not hand the regex unbounded text
    return _compiled(segment).fullmatch(name) is not None


@cache
def _compiled(segment: str) -> re.Pattern[str]:
    return re.compile(segment)


@dataclass(frozen=True, slots=True)
class PatternProblem:
    message: str
    hint: str | None
    severity: str = "error"


@cache
def compile_pattern(text: str) -> Pattern:
    """Compile a pattern that `check_pattern` accepted."""
    segments = tuple(text.split(SEPARATOR))
    return Pattern(text, segments, tuple(_compiled(segment) for segment in segments))


def check_pattern(text: str) -> list[PatternProblem]:
    return list(_check(text))


@lru_cache(maxsize=4096)
def _check(text: str) -> tuple[PatternProblem, ...]:
    if len(text) > MAX_PATTERN_LENGTH:
        return (PatternProblem(f"pattern `{shown(text)}` is {len(text)} characters long; at most "
                               f"{MAX_PATTERN_LENGTH} are allowed", "name the cells and operators, not more"),)
    if not text.isprintable():
        return (PatternProblem(f"pattern `{shown(text)}` contains a control character or line break",
                               "cell and operator names are printable; check the quoting"),)
    segments = text.split(SEPARATOR)
    if any(segment == "" for segment in segments):
        return (PatternProblem(
            f"pattern `{text}` has an empty segment",
            r"segments are separated by a single `\.`, with no `\.` at either end"),)
    problems = [problem for segment in segments for problem in _segment_problems(segment, text)]
    if problems:
        return tuple(problems)
    return tuple(_warnings(text, segments))


def _segment_problems(segment: str, text: str) -> list[PatternProblem]:
    try:
        _compiled(segment)
        tree = sre_parse.parse(segment)
    except _COMPILE_FAILURES as exc:
        reason = exc if isinstance(exc, re.error) else "it is too deeply nested or too large"
        return [PatternProblem(
            f"segment `{shown(segment)}` of pattern `{shown(text)}` is not a valid regular expression: {reason}",
            "escape regex characters such as ( [ * + ? with a backslash")]
    nested, repeats = _repetition(tree, inside=False)
    if nested:
        return [PatternProblem(
            f"segment `{shown(segment)}` of pattern `{shown(text)}` repeats a group that itself repeats or "
            "alternates, which can take exponential time to match",
            "write the names out, e.g. `(a+)+` as `a+` and `(up|gate)+` as `(up|gate)`")]
    if repeats > MAX_REPEATS:
        return [PatternProblem(
            f"segment `{shown(segment)}` of pattern `{shown(text)}` has {repeats} repetitions (*, +, {{m,n}}); "
            f"at most {MAX_REPEATS} are allowed, since each one multiplies the time to match a name",
            "split it into several patterns")]
    return []


def _repetition(tree, *, inside: bool) -> tuple[bool, int]:
    """(a repeated sub-pattern contains a repetition or an alternation, number of repetitions)."""
    nested, count = False, 0
    for op, arg in tree:
        if op in _REPEATS and arg[1] > 1:
            if inside:
                return True, count + 1
            inner_nested, inner = _repetition(arg[2], inside=True)
            nested, count = nested or inner_nested, count + 1 + inner
        elif op is sre_parse.BRANCH:
            if inside:
                return True, count
            for branch in arg[1]:
                inner_nested, inner = _repetition(branch, inside=inside)
                nested, count = nested or inner_nested, count + inner
        else:
            for child in _children(op, arg):
                inner_nested, inner = _repetition(child, inside=inside)
                nested, count = nested or inner_nested, count + inner
    return nested, count


def _children(op, arg) -> list:
    if op is sre_parse.SUBPATTERN:
        return [arg[3]]
    if op in _REPEATS:
        return [arg[2]]
    if op in (sre_parse.ASSERT, sre_parse.ASSERT_NOT):
        return [arg[1]]
    if op is sre_parse.ATOMIC_GROUP:
        return [arg]
    if op is sre_parse.GROUPREF_EXISTS:
        return [branch for branch in arg[1:] if branch is not None]
    return []


def _warnings(text: str, segments: list[str]) -> list[PatternProblem]:
    problems = []
    if any(_fullmatch(segments[-1], name) for name in _DUNDER_PROBES):
        problems.append(PatternProblem(
            f"the last segment `{segments[-1]}` of `{text}` also matches Python attributes such as "
            "`__class__`; mf_memopt only matches child cells and primitive operators, but MindFormers' "
            "own implementation crashes on such a pattern",
            f"name the operators, e.g. `{SEPARATOR.join([*segments[:-1], '(mul|add)'])}`", "warning"))
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
    `mlp` covers `mlp\\.gate`; `.*\\.mul` covers `mlp\\.mul`.
    """
    return _covers(outer, inner)


@lru_cache(maxsize=1 << 16)
def _covers(outer: str, inner: str) -> bool:
    outer_segments, inner_segments = outer.split(SEPARATOR), inner.split(SEPARATOR)
    if len(outer_segments) > len(inner_segments):
        return False
    return all(_segment_covers(a, b) for a, b in zip(outer_segments, inner_segments))


def _segment_covers(outer: str, inner: str) -> bool:
    """A literal inner segment is a name, matched by the outer regex; a regex one only by itself or `.*`.

    The outer regex is never run on the text of another regex: that text can be anything, and
    decides nothing about the names either one matches.
    """
    if outer == inner or _is_universal(outer):
        return True
    name = _literal(inner)
    return name is not None and _fullmatch(outer, name)


@lru_cache(maxsize=4096)
def _literal(segment: str) -> str | None:
    """The name a segment spells when it has no regex operator (`mlp`, `gate`), else None."""
    try:
        tree = sre_parse.parse(segment)
    except _COMPILE_FAILURES:
        return None
    if all(op is sre_parse.LITERAL for op, _ in tree):
        return "".join(chr(code) for _, code in tree)
    return None


@lru_cache(maxsize=4096)
def _is_universal(segment: str) -> bool:
    """`.*` (or `.+`: names are never empty): matches every name."""
    try:
        tree = list(sre_parse.parse(segment))
    except _COMPILE_FAILURES:
        return False
    return (len(tree) == 1 and tree[0][0] in _REPEATS and tree[0][1][0] <= 1 and tree[0][1][1] == sre_parse.MAXREPEAT
            and list(tree[0][1][2]) == [(sre_parse.ANY, None)])
