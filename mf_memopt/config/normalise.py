"""Normalise the three sections into `Rules`, through one `SectionReader`."""

from __future__ import annotations

from collections.abc import Callable

from ..document.errors import ConfigIssue
from ..document.source import KeyPath, Source
from ..family import ModelFamily
from .compress import compress_rules
from .layout import Layout
from .reader import SectionReader
from .recompute import recompute_rules
from .rules import Rules
from .swap import swap_rules


def normalise(source: Source, layout: Layout, family: ModelFamily, issues: list[ConfigIssue],
              blocked: Callable[[KeyPath], bool]) -> Rules:
    """The rules of the three sections; problems go to `issues`."""
    reader = SectionReader(source, layout, family, issues, blocked)
    full, patterns, options = recompute_rules(reader)
    return Rules(swap=reader.swap, full=full, patterns=patterns, swaps=swap_rules(reader), options=options,
                 compresses=compress_rules(reader))
