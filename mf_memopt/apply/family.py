"""What building and marking a model asks a model family (its `backend` part), and the one accessor that reaches
it. A family fills the contract in by subclassing `Backend` in its own package; the apply stage and the runtime
reach it through `backend_of(family)`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ..document.errors import ConfigIssue
    from ..document.source import Source
    from ..family import ModelFamily

Cell = Any
"""A MindSpore cell (or a test's fake with the same attributes): typed by MindSpore, which this module does not
import."""


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


def backend_of(family: ModelFamily) -> Backend:
    """The family's backend."""
    backend: Backend = family.part("backend", Backend)
    return backend


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
