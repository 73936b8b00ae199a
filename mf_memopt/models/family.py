"""The family seam: what a model family is made of, declared in one frozen value per family.

Every stage asks the family of the YAML, never the YAML's model section itself, for what depends on the model:
the config keys and their rules, the cell names the default patterns use, what one decoder layer holds, what it
keeps for its backward pass, what can be compressed, what the CPU backend lacks, and how the compiled graph names
a layer. A family (`models/llama`, `models/mcore`) is a `ModelFamily` value: its data (keys, defaults, graph
scopes), and its four parts, each a `Part` reference typed by a Protocol below:

- `rules` (`ConfigRules`): what the config stage checks and says about the model;
- `backend` (`Backend`): building the model, and what a backend cannot run;
- `estimator` (`Estimator`): the model as the estimator sizes it;
- `compression` (`models.compression.Compression`): its compressible cells and their replacements.

A part is imported when a stage first asks for it, so that declaring a family imports no MindSpore and no stage.
The registry (`models/__init__.py`) lists the families; `config.load` chooses the one of a YAML.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, runtime_checkable

from .compression import Compression

if TYPE_CHECKING:
    from ..config.plan import Plan
    from ..document.errors import ConfigIssue
    from ..document.source import KeyPath, Source
    from ..document.tree import RecordedCell
    from ..estimate.effects import LayerEffect
    from ..estimate.inventory import Op, Saved
    from ..estimate.memory import StagePeak
    from ..estimate.spec import ModelSpec, ParallelSpec

Cell = Any
"""A MindSpore cell (or a test's fake with the same attributes): typed by MindSpore, which the seam does not import."""

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


@runtime_checkable
class Backend(Protocol):
    """How the runtime builds a family's model, and what a backend cannot run. A family subclasses it."""

    def backend_issues(self, model_config: Mapping[str, Any] | None, device_target: str,
                       source: Source | None) -> list[ConfigIssue]:
        """Model settings `device_target` cannot run, found before anything is built."""
        ...

    def prepare_build(self, config: Any, device_target: str, log: Callable[[str], None]) -> None:
        """Turn MindFormers' own recompute/swap handling off in `config` (a MindFormerConfig), in every place
        it reads them for this family, and settle what the backend needs before the model is built."""
        ...

    def after_build(self, network: Cell, config: Any, device_target: str, log: Callable[[str], None]) -> list[str]:
        """Install stand-ins for what the backend lacks; the paths of the cells that were replaced."""
        ...

    def decoder_layers(self, network: Cell) -> list[Cell] | None:
        """The decoder layers of a built network, in order; None when it has none."""
        return first_layer_list(network)

    def follower_layers(self, network: Cell) -> list[Cell]:
        """Layers outside the decoder's list that take the last decoder layer's plan (MindFormers' mcore MTP
        layers); empty for most models."""
        return []

    def unshare(self, layers: list[Cell]) -> list[str]:
        """Give each decoder layer its own copy of an operator object the layers share (a mark on a shared object
        would reach every layer); the layer-relative paths of those operators. Called by the build
        (`runtime.build.unshare_layers`), never by apply."""
        return []


@runtime_checkable
class Estimator(Protocol):
    """The model as the estimator sizes it. A family subclasses it."""

    cpu_measured_on: Mapping[str, str]
    """The versions the CPU memory model was read off (`estimate.versions`)."""

    def model_spec(self, source: Source, issues: list[ConfigIssue]) -> ModelSpec | None:
        """The model as the estimator needs it, or None after reporting why."""
        ...

    def cpu_spec_issues(self, source: Source, model: ModelSpec) -> list[ConfigIssue]:
        """Parts of the model the family's CPU memory model does not cover, reported at their keys."""
        return []

    def inventory(self, model: ModelSpec, parallel: ParallelSpec, runtime: str) -> list[Saved]:
        """The tensors one decoder layer keeps for its backward."""
        ...

    def layer_ops(self, model: ModelSpec, parallel: ParallelSpec) -> list[Op]:
        """The matmul-class operators of one layer and their forward FLOPs."""
        ...

    def mtp_inventory(self, model: ModelSpec, parallel: ParallelSpec, runtime: str) -> list[Saved]:
        """The tensors one multi-token-prediction layer keeps (`ModelSpec.mtp_layers`), paths from the MTP layer."""
        return []

    def mtp_ops(self, model: ModelSpec, parallel: ParallelSpec) -> list[Op]:
        """The matmul-class operators of one multi-token-prediction layer."""
        return []

    def kept_communication(self, model: ModelSpec, parallel: ParallelSpec) -> list[Saved]:
        """On Ascend, the outputs of a fully recomputed layer's tensor-parallel communication that
        `mp_comm_recompute: False` keeps for the backward (none unless the family counts them)."""
        return []

    def cpu_checkpoints(self, model: ModelSpec, effects: list[LayerEffect]) -> list[StagePeak]:
        """The moments of a CPU training step whose largest is the memory-pool peak (`estimate.memory`)."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class FamilyParts:
    """Where a family's parts are: each imported on first use."""

    rules: Part[ConfigRules]
    backend: Part[Backend]
    estimator: Part[Estimator]
    compression: Part[Compression]


@dataclass(frozen=True, kw_only=True)
class ModelFamily:
    """One model family: its data, and its parts. The methods below ask the part that answers."""

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

    # --- config stage -------------------------------------------------------------------------
    @property
    def rules(self) -> ConfigRules:
        return self.parts.rules.get()

    def view(self, source: Source) -> tuple[Source, list[ConfigIssue]]:
        return self.rules.view(source)

    def model_issues(self, source: Source) -> list[ConfigIssue]:
        return self.rules.model_issues(source)

    def model_notes(self, source: Source, plan: Plan) -> list[ConfigIssue]:
        return self.rules.model_notes(source, plan)

    def swap_scope_issues(self, source: Source) -> list[ConfigIssue]:
        return self.rules.swap_scope_issues(source)

    def layer_tree(self, source: Source) -> RecordedCell | None:
        return self.rules.layer_tree(source)

    def pattern_hint(self, pattern: str) -> str | None:
        return self.rules.pattern_hint(pattern)

    def default_note(self, pattern: str) -> str | None:
        return self.rules.default_note(pattern)

    def auto_cells_for(self, source: Source) -> AutoCells:
        """The cells `auto` chooses among for this YAML's model (the family's, unless its layers differ)."""
        return self.rules.auto_cells_for(source) or self.auto_cells

    # --- apply stage and runtime --------------------------------------------------------------
    @property
    def backend(self) -> Backend:
        return self.parts.backend.get()

    def decoder_layers(self, network: Cell) -> list[Cell] | None:
        return self.backend.decoder_layers(network)

    def follower_layers(self, network: Cell) -> list[Cell]:
        return self.backend.follower_layers(network)

    def unshare(self, layers: list[Cell]) -> list[str]:
        return self.backend.unshare(layers)

    @property
    def compression(self) -> Compression:
        """The family's compression targets and replacement cells."""
        return self.parts.compression.get()

    def backend_issues(self, model_config: Mapping[str, Any] | None, device_target: str,
                       source: Source | None) -> list[ConfigIssue]:
        return self.backend.backend_issues(model_config, device_target, source)

    def prepare_build(self, config: Any, device_target: str, log: Callable[[str], None]) -> None:
        self.backend.prepare_build(config, device_target, log)

    def after_build(self, network: Cell, config: Any, device_target: str, log: Callable[[str], None]) -> list[str]:
        return self.backend.after_build(network, config, device_target, log)

    # --- estimate --------------------------------------------------------------------------------
    @property
    def estimator(self) -> Estimator:
        return self.parts.estimator.get()

    @property
    def cpu_measured_on(self) -> Mapping[str, str]:
        return self.estimator.cpu_measured_on

    def model_spec(self, source: Source, issues: list[ConfigIssue]) -> ModelSpec | None:
        return self.estimator.model_spec(source, issues)

    def cpu_spec_issues(self, source: Source, model: ModelSpec) -> list[ConfigIssue]:
        return self.estimator.cpu_spec_issues(source, model)

    def inventory(self, model: ModelSpec, parallel: ParallelSpec, runtime: str) -> list[Saved]:
        return self.estimator.inventory(model, parallel, runtime)

    def layer_ops(self, model: ModelSpec, parallel: ParallelSpec) -> list[Op]:
        return self.estimator.layer_ops(model, parallel)

    def mtp_inventory(self, model: ModelSpec, parallel: ParallelSpec, runtime: str) -> list[Saved]:
        return self.estimator.mtp_inventory(model, parallel, runtime)

    def mtp_ops(self, model: ModelSpec, parallel: ParallelSpec) -> list[Op]:
        return self.estimator.mtp_ops(model, parallel)

    def kept_communication(self, model: ModelSpec, parallel: ParallelSpec) -> list[Saved]:
        return self.estimator.kept_communication(model, parallel)

    def cpu_checkpoints(self, model: ModelSpec, effects: list[LayerEffect]) -> list[StagePeak]:
        return self.estimator.cpu_checkpoints(model, effects)


def first_layer_list(network: Cell) -> list[Cell] | None:
    """The first child cell list named `layers`, breadth first: a decoder's layers, in order."""
    pending = [network]
    while pending:
        current = pending.pop(0)
        for name, child in _children(current):
            if name == "layers" and _children(child):
                return [layer for _, layer in _children(child)]
            pending.append(child)
    return None


def _children(cell: Cell) -> list[tuple[str, Cell]]:
    return [(name, child) for name, child in cell._cells.items() if child is not None]
