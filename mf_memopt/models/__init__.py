"""The family seam: the interface every model family fills in (`family.py`, `compression.py`) and the registry
of the families that exist.

The registry names each family by a lazy `(module, name)` reference, so that the seam imports no family: a
family imports the stages it implements, and a stage meets a family only through this seam or the plan.
`config.load` chooses the family of a YAML, once (`family_of`); the plan carries it to the later stages.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .family import ModelFamily, Part

if TYPE_CHECKING:
    from ..document.source import Source

REGISTRY: dict[str, Part[ModelFamily]] = {
    "llama": Part("mf_memopt.models.llama", "LLAMA"),
    "mcore": Part("mf_memopt.models.mcore", "MCORE"),
}
"""Every family, by name: a family module is imported when a YAML of its family is first read."""


def families() -> tuple[ModelFamily, ...]:
    """Every registered family, in the registry's order."""
    return tuple(part.get() for part in REGISTRY.values())


def family_named(name: str) -> ModelFamily:
    """The registered family called `name`; an unknown name is refused with the names that exist."""
    if name not in REGISTRY:
        raise KeyError(f"no model family {name!r}: the families are {', '.join(REGISTRY)}")
    return REGISTRY[name].get()


def family_of(source: Source) -> ModelFamily:
    """The family a YAML's model belongs to: MindFormers builds its mcore models when `use_legacy` is false, and
    its legacy ones (which share the Llama's keys) otherwise, as its own `is_legacy_model()` decides. Called by
    the loader (`config.load`) only."""
    return family_named("mcore" if source.get(("use_legacy",), True) is False else "llama")


__all__ = ["REGISTRY", "ModelFamily", "Part", "families", "family_named", "family_of"]
