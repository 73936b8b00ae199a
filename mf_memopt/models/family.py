"""What a model family decides, asked through one object per family.

Every stage asks the family of the YAML, never the YAML's model section itself, for what
depends on the model: the config keys and their rules, the cell names the default patterns
use, what one decoder layer holds, what it keeps for its backward pass, what can be
compressed, what the CPU backend lacks, and how the compiled graph names a layer. A family
module (`models/llama`, ...) subclasses `ModelFamily`; `models.family_of` picks one from the
YAML once, and the plan carries it to the later stages.

Nothing here imports MindSpore: the config stage reads families too. What needs MindSpore
(stand-in cells, replacement cells) is imported inside the methods that build it. A family
package holds, by name, `backend.py` (`backend_issues`, `prepare_build`, `after_build`),
`compression.py` (`COMPRESSION`), `spec.py` (`model_spec`), `layers.py` (`layer_tree`),
`inventory.py` (`layer_inventory`, `layer_ops`) and `cpu_memory.py` (`cpu_checkpoints`); the base
class imports them from the family's package when a stage first asks.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from ..config.errors import ConfigIssue
    from ..config.plan import Plan
    from ..config.source import KeyPath, Source


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
    extra_layers: KeyPath | None = None   # layers the pipeline lays out after the decoder layers (legacy MTP)


@dataclass(frozen=True, slots=True, kw_only=True)
class Defaults:
    """What the sections mean when they name no pattern: MindFormers' own defaults for the family."""

    select: tuple[str, ...]        # select_recompute: true / counts
    comm: tuple[str, ...]          # select_comm_recompute: true / counts
    swap: str                      # swap_config.swap: true with neither layer_swap nor op_swap
    compress_dense: str            # compress_config.compress_dense: the cell whose input is rebuilt losslessly


@dataclass(frozen=True, slots=True, kw_only=True)
class AutoCells:
    """The cells `auto` chooses among in a layer, and the path prefix of the attention's tensors."""

    select: tuple[str, ...]        # recomputed on their own or together
    swap: tuple[str, ...]          # swapped on their own, or next to recomputing the other
    attention_prefix: str          # tensors under it are rebuilt when the attention is recomputed


class ModelFamily:
    """The base of every family: the questions the stages ask, with no answers of its own."""

    name: str = ""
    schema: str = ""                         # the JSON Schema of its model keys: mf_memopt/schemas/<schema>.schema.json
    keys: ModelKeys
    defaults: Defaults
    auto_cells: AutoCells
    ir_layer_scope: re.Pattern[str]          # group 1: layer index, group 2: the scope below the layer
    ir_follower_scope: re.Pattern[str] | None = None  # the same for `follower_layers` (mcore's MTP layers)
    vocab_emb_dp: bool = True                # the family honours parallel_config.vocab_emb_dp (False: always split)

    # --- config stage -------------------------------------------------------------------------
    def view(self, source: Source) -> tuple[Source, list[ConfigIssue]]:
        """The YAML as the stages read it (a family that spells keys or sections its own way presents them in the
        common spelling, reported where they were written), and what is wrong with that spelling."""
        return source, []

    def model_issues(self, source: Source) -> list[ConfigIssue]:
        """Cross-key rules MindFormers checks only when it builds the model (divisibility ...)."""
        raise NotImplementedError

    def model_notes(self, source: Source, plan: Plan) -> list[ConfigIssue]:
        """Where mf_memopt's marks on this family's models differ from MindFormers' on purpose, besides
        LayerSetting's options (`config.differences`): one note per documented rule the plan meets."""
        return []

    def swap_scope_issues(self, source: Source) -> list[ConfigIssue]:
        """Warnings when swap is asked for a model outside the documented scope."""
        raise NotImplementedError

    def layer_tree(self, source: Source) -> Any:
        """The decoder layer the YAML builds, as recorded from a real model (`config.tree.RecordedCell`), or None
        when the family has not recorded it: `validate` matches the patterns against it."""
        return self._part("layers").layer_tree(source)

    def pattern_hint(self, pattern: str) -> str | None:
        """A hint for a default pattern that matches nothing in this model (why, and what to name)."""
        raise NotImplementedError

    def default_note(self, pattern: str) -> str | None:
        """What to say when a default pattern matches something it does not act on (an operator never run)."""
        return None

    def _part(self, name: str) -> Any:
        """A module of the family's package (`backend`, `compression`, `spec`, ...), imported on first use."""
        return importlib.import_module(f"{type(self).__module__}.{name}")

    def auto_cells_for(self, source: Source) -> AutoCells:
        """The cells `auto` chooses among for this YAML's model (the family's, unless its layers differ)."""
        return self.auto_cells

    # --- apply stage ---------------------------------------------------------------------------
    def decoder_layers(self, network: Any) -> list[Any] | None:
        """The decoder layers of a built network, in order; None when it has none."""
        return first_layer_list(network)

    def follower_layers(self, network: Any) -> list[Any]:
        """Layers outside the decoder's list that take the last decoder layer's plan (MindFormers' mcore MTP
        layers); empty for most models."""
        return []

    def unshare(self, layers: list[Any]) -> list[str]:
        """Give each decoder layer its own copy of an operator object the layers share (a mark on a shared object
        would reach every layer); the layer-relative paths of those operators. Called by the build
        (`runtime.build.unshare_layers`), never by apply."""
        return []

    @property
    def compression(self) -> Any:
        """The family's compression targets (`models.compression.Compression`)."""
        return self._part("compression").COMPRESSION

    # --- runtime ---------------------------------------------------------------------------------
    def backend_issues(self, model_config: Any, device_target: str, source: Source | None) -> list[ConfigIssue]:
        """Model settings `device_target` cannot run, found before anything is built."""
        return self._part("backend").backend_issues(model_config, device_target, source)

    def prepare_build(self, config: Any, device_target: str, log: Callable[[str], None]) -> None:
        """Turn MindFormers' own recompute/swap handling off in `config` (a MindFormerConfig), in every place
        it reads them for this family, and settle what the backend needs before the model is built."""
        self._part("backend").prepare_build(config, device_target, log)

    def after_build(self, network: Any, config: Any, device_target: str, log: Callable[[str], None]) -> list[str]:
        """Install stand-ins for what the backend lacks; the paths of the cells that were replaced."""
        return self._part("backend").after_build(network, config, device_target, log)

    # --- estimate --------------------------------------------------------------------------------
    def model_spec(self, source: Source, issues: list[ConfigIssue]) -> Any:
        """The model as the estimator needs it (`estimate.spec.ModelSpec`), or None after reporting why."""
        return self._part("spec").model_spec(source, issues)

    def cpu_spec_issues(self, source: Source, model: Any) -> list[ConfigIssue]:
        """Parts of the model the family's CPU memory model does not cover, reported at their keys."""
        return []

    def inventory(self, model: Any, parallel: Any, runtime: str) -> list[Any]:
        """The tensors one decoder layer keeps for its backward (`estimate.inventory.Saved`)."""
        return self._part("inventory").layer_inventory(model, parallel, runtime)

    def layer_ops(self, model: Any, parallel: Any) -> list[Any]:
        """The matmul-class operators of one layer and their forward FLOPs (`estimate.inventory.Op`)."""
        return self._part("inventory").layer_ops(model, parallel)

    def mtp_inventory(self, model: Any, parallel: Any, runtime: str) -> list[Any]:
        """The tensors one multi-token-prediction layer keeps (`ModelSpec.mtp_layers`), paths from the MTP layer."""
        return self._part("inventory").mtp_inventory(model, parallel, runtime)

    def mtp_ops(self, model: Any, parallel: Any) -> list[Any]:
        """The matmul-class operators of one multi-token-prediction layer."""
        return self._part("inventory").mtp_ops(model, parallel)

    dataset_columns: tuple[str, ...] = ("input_ids",)   # the columns of a generated dataset (`runtime/data.py`)
    cell_outputs: frozenset[str] = frozenset()   # operators whose output is their recomputed cell's output
    primitive_recompute = False                  # a select pattern naming a primitive rebuilds its output
    cpu_measured_on: dict[str, str] = {}         # the versions the CPU memory model was read off (`estimate.versions`)

    def cpu_checkpoints(self, model: Any, effects: list[Any]) -> list[Any]:
        """The moments of a CPU training step whose largest is the memory-pool peak (`estimate.memory`)."""
        return self._part("cpu_memory").cpu_checkpoints(model, effects)


def first_layer_list(network: Any) -> list[Any] | None:
    """The first child cell list named `layers`, breadth first: a decoder's layers, in order."""
    pending = [network]
    while pending:
        current = pending.pop(0)
        for name, child in _children(current):
            if name == "layers" and _children(child):
                return [layer for _, layer in _children(child)]
            pending.append(child)
    return None


def _children(cell: Any) -> list[tuple[str, Any]]:
    return [(name, child) for name, child in cell._cells.items() if child is not None]
