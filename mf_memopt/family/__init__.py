"""The family declaration: what a model family is, in one frozen value per family, and the registry of them.

Every stage asks the family of the YAML, never the YAML's model section itself, for what depends on the model.
A family (`models/llama`, `models/mcore`) is a `ModelFamily` value: plain data (its keys, defaults, the cells
`auto` chooses among, graph scopes) and four parts, each a `Part` reference to an object in the family's own
package. A part is imported when a stage first asks for it, so that declaring a family imports no MindSpore and
no stage. Each stage owns the contract its part fills in, and reaches the part through its own accessor:

- `rules`: `config.family_rules.ConfigRules` (`rules_of`), what the config stage checks and says about the model;
- `backend`: `apply.family.Backend` (`backend_of`), building the model and what a backend cannot run;
- `estimator`: `estimate.family.Estimator` (`estimator_of`), the model as the estimator sizes it;
- `compression`: `compress.family.Compression` (`compression_of`), its compressible cells and their replacements.

The registry (`REGISTRY`) names each family by a lazy reference, so that this floor imports no family;
`config.load` chooses the family of a YAML, once (`family_of`), and the plan carries it to the later stages.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from ..document.source import KeyPath, Source

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Part(Generic[T]):
    """A lazy reference to a value in another module: `module` is imported when the value is first asked for, so
    that declaring a part imports nothing (a part may need MindSpore, or import the stages it implements)."""

    module: str
    name: str

    def get(self) -> T:
        value: T = getattr(importlib.import_module(self.module), self.name)
        return value


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelKeys:
    """Key paths of the model section that the stages read (each family spells them its own way)."""

    num_layers: KeyPath
    interleave: KeyPath
    offset: KeyPath
    seq_length: KeyPath
    vocab_size: KeyPath
    hidden_size: KeyPath
    extra_layers: KeyPath | None = None
    """Layers the pipeline lays out after the decoder layers (legacy MTP)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Defaults:
    """What the sections mean when they name no pattern: MindFormers' own defaults for the family."""

    select: tuple[str, ...]
    """select_recompute: true / counts."""
    comm: tuple[str, ...]
    """select_comm_recompute: true / counts."""
    swap: str
    """swap_config.swap: true with neither layer_swap nor op_swap."""
    compress_dense: str
    """compress_config.compress_dense: the cell whose input is rebuilt losslessly."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AutoCells:
    """The cells `auto` chooses among in a layer, and the path prefix of the attention's tensors."""

    select: tuple[str, ...]
    """Recomputed on their own or together."""
    swap: tuple[str, ...]
    """Swapped on their own, or next to recomputing the other."""
    attention_prefix: str
    """Tensors under it are rebuilt when the attention is recomputed."""
    compress: tuple[tuple[str, str], ...] = ()
    """(cell, op_compress pattern): what `auto` may keep quantised (int8/int4/int2), named by the `select` cell
    whose Linear inputs the pattern matches."""
    lossless: tuple[str, str] | None = None
    """(cell, op_compress pattern) `auto` may compress losslessly (`method: lossless`), or None."""
    no_compress: str = ""
    """Why this YAML's model may not be compressed at all (`compress` and `lossless` are then empty)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FamilyParts:
    """Where a family's parts are: each imported on first use, and typed by the stage that asks for it."""

    rules: Part[Any]
    backend: Part[Any]
    estimator: Part[Any]
    compression: Part[Any]


@dataclass(frozen=True, kw_only=True)
class ModelFamily:
    """One model family: its data, and where its parts are."""

    name: str
    schema: str
    """The JSON Schema of its model keys: mf_memopt/schemas/<schema>.schema.json."""
    keys: ModelKeys
    defaults: Defaults
    auto_cells: AutoCells
    ir_layer_scope: re.Pattern[str]
    """In the compiled graph, group 1: layer index, group 2: the scope below the layer."""
    parts: FamilyParts
    ir_follower_scope: re.Pattern[str] | None = None
    """The same for `follower_layers` (mcore's MTP layers)."""
    vocab_emb_dp: bool = True
    """The family honours parallel_config.vocab_emb_dp (False: always split)."""
    dataset_columns: tuple[str, ...] = ("input_ids",)
    """The columns of a generated dataset (`runtime/data.py`)."""
    cell_outputs: frozenset[str] = field(default_factory=frozenset)
    """Operators whose output is their recomputed cell's output."""
    primitive_recompute: bool = False
    """A select pattern naming a primitive rebuilds its output."""

    def part(self, name: str, kind: type) -> Any:
        """The part `name` of `parts`, imported, refused with a `TypeError` naming the family and the part unless it
        is a `kind` (the stage's contract; each stage's accessor types the result)."""
        reference = getattr(self.parts, name)
        value = reference.get()
        if not isinstance(value, kind):
            article = "an" if kind.__name__[0] in "AEIOU" else "a"
            raise TypeError(f"{self.name}'s {name} part {reference} is not {article} {kind.__name__}")
        return value


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
