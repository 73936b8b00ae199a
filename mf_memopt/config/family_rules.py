"""What the config stage asks a model family (its `rules` part), and the one accessor that reaches it.

A family fills the contract in by subclassing `ConfigRules` (for its defaults) in its own package; the stage reaches
it through `rules_of(family)`, never by importing the family.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ..document.errors import ConfigIssue
    from ..document.source import Source
    from ..document.tree import RecordedCell
    from ..family import AutoCells, ModelFamily
    from .plan import Plan


@runtime_checkable
class ConfigRules(Protocol):
    """What the config stage asks a family (no MindSpore). A family subclasses it for the defaults."""

    def view(self, source: Source) -> tuple[Source, list[ConfigIssue]]:
        """The YAML as the stages read it (a family that spells keys or sections its own way presents them in the
        common spelling, reported where they were written), and what is wrong with that spelling."""
        return source, []

    def model_issues(self, source: Source) -> list[ConfigIssue]:
        """Cross-key rules MindFormers checks only when it builds the model (divisibility ...)."""
        ...

    def model_notes(self, source: Source, plan: Plan) -> list[ConfigIssue]:
        """Where mf_memopt's marks on this family's models differ from MindFormers' on purpose, besides
        LayerSetting's options (`config.differences`): one note per documented rule the plan meets."""
        return []

    def swap_scope_issues(self, source: Source) -> list[ConfigIssue]:
        """Warnings when swap is asked for a model outside the documented scope."""
        ...

    def layer_tree(self, source: Source) -> RecordedCell | None:
        """The decoder layer the YAML builds, as recorded from a real model, or None when the family has not
        recorded it: `validate` matches the patterns against it."""
        ...

    def pattern_hint(self, pattern: str) -> str | None:
        """A hint for a default pattern that matches nothing in this model (why, and what to name)."""
        ...

    def default_note(self, pattern: str) -> str | None:
        """What to say when a default pattern matches something it does not act on (an operator never run)."""
        return None

    def auto_cells_for(self, source: Source) -> AutoCells | None:
        """The cells `auto` chooses among for this YAML's model when they differ from the family's own."""
        return None


def rules_of(family: ModelFamily) -> ConfigRules:
    """The family's config rules."""
    rules: ConfigRules = family.part("rules", ConfigRules)
    return rules


def auto_cells_for(family: ModelFamily, source: Source) -> AutoCells:
    """The cells `auto` chooses among for this YAML's model (the family's, unless its layers differ)."""
    return rules_of(family).auto_cells_for(source) or family.auto_cells
