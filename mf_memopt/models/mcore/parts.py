"""The mcore family's `backend` and `estimator` parts (`apply.family.Backend`, `estimate.family.Estimator`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ...apply.family import Backend, Cell
from ...document.errors import ConfigIssue
from ...document.source import Source
from ...estimate.family import Estimator
from . import backend, cpu_memory, inventory, spec

if TYPE_CHECKING:
    from ...estimate.effects import LayerEffect
    from ...estimate.inventory import Op, Saved
    from ...estimate.memory import StagePeak
    from ...estimate.spec import ModelSpec, ParallelSpec


class McoreBackend(Backend):
    def backend_issues(self, model_config: Mapping[str, Any] | None, device_target: str,
                       source: Source | None) -> list[ConfigIssue]:
        return backend.backend_issues(model_config, device_target, source)

    def prepare_build(self, config: Any, device_target: str, log: Callable[[str], None]) -> None:
        backend.prepare_build(config, device_target, log)

    def after_build(self, network: Cell, config: Any, device_target: str, log: Callable[[str], None]) -> list[str]:
        return backend.after_build(network, config, device_target, log)

    def follower_layers(self, network: Cell) -> list[Cell]:
        """The multi-token-prediction layers (`model.mtp.layers`): MindFormers' `LayerSetting` gives each the last
        decoder layer's id, so its stage, recompute and swap are that layer's, with patterns matched from the MTP
        layer's own children (`enorm`, `hnorm`, `eh_proj`, `transformer_layer`, `final_layernorm`)."""
        model = getattr(network, "model", None)
        mtp = getattr(model, "mtp", None) if model is not None else None
        layers = getattr(mtp, "layers", None) if mtp is not None else None
        return [layer for _, layer in layers._cells.items() if layer is not None] if layers is not None else []

    def unshare(self, layers: list[Cell]) -> list[str]:
        return backend.unshare_primitives(layers)


class McoreEstimator(Estimator):
    def __init__(self) -> None:
        self.cpu_measured_on: Mapping[str, str] = {"mindspore": "2.9.0", "mindformers": "1.9.0"}
        """The versions whose allocation logs cpu_memory.py was read off."""

    def model_spec(self, source: Source, issues: list[ConfigIssue]) -> ModelSpec | None:
        return spec.model_spec(source, issues)

    def cpu_spec_issues(self, source: Source, model: ModelSpec) -> list[ConfigIssue]:
        return spec.cpu_spec_issues(source, model)

    def inventory(self, model: ModelSpec, parallel: ParallelSpec, runtime: str) -> list[Saved]:
        return inventory.layer_inventory(model, parallel, runtime)

    def layer_ops(self, model: ModelSpec, parallel: ParallelSpec) -> list[Op]:
        return inventory.layer_ops(model, parallel)

    def kept_communication(self, model: ModelSpec, parallel: ParallelSpec) -> list[Saved]:
        return inventory.kept_communication(model, parallel)

    def mtp_inventory(self, model: ModelSpec, parallel: ParallelSpec, runtime: str) -> list[Saved]:
        return inventory.mtp_inventory(model, parallel, runtime)

    def mtp_ops(self, model: ModelSpec, parallel: ParallelSpec) -> list[Op]:
        return inventory.mtp_ops(model, parallel)

    def cpu_checkpoints(self, model: ModelSpec, effects: list[LayerEffect]) -> list[StagePeak]:
        return cpu_memory.cpu_checkpoints(model, effects)


BACKEND = McoreBackend()
ESTIMATOR = McoreEstimator()
