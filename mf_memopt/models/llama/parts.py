"""The Llama family's `backend` and `estimator` parts (`apply.family.Backend`, `estimate.family.Estimator`)."""

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


class LlamaBackend(Backend):
    def backend_issues(self, model_config: Mapping[str, Any] | None, device_target: str,
                       source: Source | None) -> list[ConfigIssue]:
        return backend.backend_issues(model_config, device_target, source)

    def prepare_build(self, config: Any, device_target: str, log: Callable[[str], None]) -> None:
        backend.prepare_build(config, device_target, log)

    def after_build(self, network: Cell, config: Any, device_target: str, log: Callable[[str], None]) -> list[str]:
        return backend.after_build(network, config, device_target, log)


class LlamaEstimator(Estimator):
    def __init__(self) -> None:
        self.cpu_measured_on: Mapping[str, str] = {"mindspore": "2.9.0", "mindformers": "1.9.0"}
        """The versions whose allocation logs cpu_memory.py was read off."""

    def model_spec(self, source: Source, issues: list[ConfigIssue]) -> ModelSpec | None:
        return spec.model_spec(source, issues)

    def inventory(self, model: ModelSpec, parallel: ParallelSpec, runtime: str) -> list[Saved]:
        return inventory.layer_inventory(model, parallel, runtime)

    def layer_ops(self, model: ModelSpec, parallel: ParallelSpec) -> list[Op]:
        return inventory.layer_ops(model, parallel)

    def cpu_checkpoints(self, model: ModelSpec, effects: list[LayerEffect]) -> list[StagePeak]:
        return cpu_memory.cpu_checkpoints(model, effects)


BACKEND = LlamaBackend()
ESTIMATOR = LlamaEstimator()
