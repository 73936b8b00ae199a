"""Model families: everything that depends on which MindFormers model a YAML trains, one module per family.

`family_of(source)` picks the family from the YAML once; the plan carries it to the later stages.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .family import ModelFamily
from .llama import LLAMA

if TYPE_CHECKING:
    from ..config.source import Source

FAMILIES: tuple[ModelFamily, ...] = (LLAMA,)


def family_of(source: Source) -> ModelFamily:
    """The family a YAML's model belongs to (MindFormers' legacy models share the Llama's keys)."""
    return LLAMA


__all__ = ["FAMILIES", "ModelFamily", "family_of"]
