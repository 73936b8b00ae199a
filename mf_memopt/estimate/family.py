"""What the estimate asks a model family (its `estimator` part), the one accessor that reaches it, and the two
readings that ask it: the model's spec (`read_spec`) and the CPU memory-pool peak (`cpu_pool_peak`).

A family fills the contract in by subclassing `Estimator` in its own package.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from .memory import StagePeak
from .spec import ModelSpec, OptimizerSpec, ParallelSpec, cpu_dtype_issues, optimizer_spec, parallel_spec

if TYPE_CHECKING:
    from ..document.errors import ConfigIssue
    from ..document.source import Source
    from ..family import ModelFamily
    from .effects import LayerEffect
    from .inventory import Op, Saved


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


def estimator_of(family: ModelFamily) -> Estimator:
    """The family's estimator."""
    estimator: Estimator = family.part("estimator", Estimator)
    return estimator


def read_spec(source: Source, family: ModelFamily, issues: list[ConfigIssue],
              runtime: str = "ascend") -> tuple[ModelSpec, ParallelSpec, OptimizerSpec] | None:
    """The model (read by its family), the parallelism and the optimizer; None after reporting what is missing.
    With the cpu runtime, also what the CPU memory model does not cover (dtypes without CPU kernels, layers the
    family's CPU terms were not read off)."""
    model = estimator_of(family).model_spec(source, issues)
    if model is None:
        return None
    if runtime == "cpu":
        issues += cpu_dtype_issues(source, model) + estimator_of(family).cpu_spec_issues(source, model)
    parallel = parallel_spec(source)
    return model, replace(parallel, vocab_emb_dp=parallel.vocab_emb_dp and family.vocab_emb_dp), optimizer_spec(source)


def cpu_pool_peak(family: ModelFamily, model: ModelSpec, effects: list[LayerEffect]) -> StagePeak:
    """The largest of the family's checkpoints of a CPU training step; every term in the config's dtypes."""
    return max(estimator_of(family).cpu_checkpoints(model, effects), key=lambda candidate: candidate.peak)
