"""Problems found in a training YAML, as data.

Every stage of the pipeline reports what it finds as `ConfigIssue` values; the public
entry points raise one `ConfigError` that carries all of them, so a user fixes a file
in one pass instead of one error at a time.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Literal

Severity = Literal["error", "warning", "note"]   # a note: a documented difference from MindFormers

MAX_SHOWN_ISSUES = 50   # a rendered error lists this many problems, then says how many more there are
_MAX_FIELD = 2000       # characters of one rendered field (message, hint, key path, file)


def escape(text: str) -> str:
    """`text` with every non-printable character (newline, escape, bidi override ...) written as an escape.

    User text echoed in a message (keys, patterns, tags, file names) then cannot start a new
    output line or disguise itself.
    """
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else char.encode("unicode_escape").decode("ascii") for char in text)


def shown(value: object, limit: int = 60) -> str:
    """User text for a message: escaped, and cut to `limit` characters."""
    text = escape(value if isinstance(value, str) else str(value))
    return text if len(text) <= limit else text[:limit - 3] + "..."


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigIssue:
    """One problem, located at a key path of a YAML file."""

    file: str
    line: int | None
    path: str
    message: str
    hint: str | None = None
    severity: Severity = "error"

    def render(self) -> str:
        """One line: `file:line: key.path: message (hint)`, with user text escaped."""
        file = shown(self.file, _MAX_FIELD)
        where = f"{file}:{self.line}" if self.line is not None else file
        text = f"{where}: {shown(self.path, _MAX_FIELD) or '<document>'}: "
        if self.severity in ("warning", "note"):
            text += f"{self.severity}: "
        text += shown(self.message, _MAX_FIELD)
        if self.hint:
            text += f" ({shown(self.hint, _MAX_FIELD)})"
        return text

    def to_dict(self) -> dict:
        return asdict(self)


class ConfigError(ValueError):
    """Raised once with every error found; nothing has been applied when it is raised."""

    def __init__(self, issues: Sequence[ConfigIssue]):
        self.issues = tuple(sorted(issues, key=_issue_order))
        count = len(self.issues)
        header = f"{count} problem{'s' if count != 1 else ''} in the memory-optimisation config:"
        super().__init__("\n".join([header, self.render()]))

    def render(self, limit: int = MAX_SHOWN_ISSUES) -> str:
        """The first `limit` problems, one per line, then how many more there are."""
        lines = [issue.render() for issue in self.issues[:limit]]
        if len(self.issues) > limit:
            lines.append(f"... and {len(self.issues) - limit} more problem(s)")
        return "\n".join(lines)


def _issue_order(issue: ConfigIssue) -> tuple:
    return (issue.file, issue.line if issue.line is not None else -1, issue.path, issue.message)


def unique(issues: Iterable[ConfigIssue]) -> list[ConfigIssue]:
    """The issues without repeats (one value read for several rules reports its problem once)."""
    return list(dict.fromkeys(issues))


def raise_if_errors(issues: Iterable[ConfigIssue]) -> None:
    errors = [issue for issue in issues if issue.severity == "error"]
    if errors:
        raise ConfigError(errors)


def did_you_mean(word: str, choices: Iterable[str], cutoff: float = 0.6) -> str | None:
    """A hint naming the closest known spelling, or None when nothing is close."""
    matches = difflib.get_close_matches(str(word), sorted(choices), n=1, cutoff=cutoff)
    return f"did you mean `{matches[0]}`?" if matches else None


def key_path(parts: Sequence[str | int]) -> str:
    """Render a key path as users write it: `swap_config.op_swap[1].layers[0]`.

    Pattern keys and keys that are not plain identifiers are quoted:
    `recompute_config.select_recompute['mlp\\.mul']`.
    """
    text = ""
    for index, part in enumerate(parts):
        if isinstance(part, int):
            text += f"[{part}]"
        elif str(part).isidentifier() and not _is_pattern_key(parts, index):
            name = shown(part, 120)
            text += f".{name}" if text else name
        else:
            text += f"[{shown(repr(str(part)), 120)}]".replace("\\\\", "\\")
    return text


def _is_pattern_key(parts: Sequence[str | int], index: int) -> bool:
    """Keys of `recompute_config.select_*` mappings are patterns: always shown quoted."""
    return index == 2 and parts[0] == "recompute_config" and str(parts[1]).startswith("select_")
