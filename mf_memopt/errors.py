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

Severity = Literal["error", "warning"]


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
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        text = f"{where}: {self.path or '<document>'}: "
        if self.severity == "warning":
            text += "warning: "
        text += self.message
        if self.hint:
            text += f" ({self.hint})"
        return text

    def to_dict(self) -> dict:
        return asdict(self)


class ConfigError(ValueError):
    """Raised once with every error found; nothing has been applied when it is raised."""

    def __init__(self, issues: Sequence[ConfigIssue]):
        self.issues = tuple(sorted(issues, key=_issue_order))
        count = len(self.issues)
        header = f"{count} problem{'s' if count != 1 else ''} in the memory-optimisation config:"
        super().__init__("\n".join([header, *(issue.render() for issue in self.issues)]))

    def render(self) -> str:
        return "\n".join(issue.render() for issue in self.issues)


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
    `recompute_config.select_recompute['feed_forward\\.mul']`.
    """
    text = ""
    for index, part in enumerate(parts):
        if isinstance(part, int):
            text += f"[{part}]"
        elif str(part).isidentifier() and not _is_pattern_key(parts, index):
            text += f".{part}" if text else str(part)
        else:
            text += f"[{str(part)!r}]".replace("\\\\", "\\")
    return text


def _is_pattern_key(parts: Sequence[str | int], index: int) -> bool:
    """Keys of `recompute_config.select_*` mappings are patterns: always shown quoted."""
    return index == 2 and parts[0] == "recompute_config" and str(parts[1]).startswith("select_")
