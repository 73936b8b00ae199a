"""Model families: everything that depends on which MindFormers model a YAML trains, one module per family.

`family_of(source)` picks the family from the YAML once; the plan carries it to the later stages.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .family import ModelFamily
from .llama import LLAMA
from .mcore import MCORE

if TYPE_CHECKING:
    from ..config.source import Source

FAMILIES: tuple[ModelFamily, ...] = (LLAMA, MCORE)


def family_of(source: Source) -> ModelFamily:
    """The family a YAML's model belongs to: MindFormers builds its mcore models when `use_legacy` is false, and
    its legacy ones (which share the Llama's keys) otherwise, as its own `is_legacy_model()` decides."""
    return MCORE if source.get(("use_legacy",), True) is False else LLAMA


__all__ = ["FAMILIES", "ModelFamily", "family_of"]
