"""A stage's peak as a function of what its layers keep, in the shape the search (`solver.py`) states as rows.

* ascend: the estimator's `ascend_peak` depends on a stage's layers only through the sum of
  the bytes they keep, the largest layer rebuilt in the backward and the swapped bytes still
  on the device at the forward/backward turn (none: `auto` never swaps a layer whose
  release would fall after the turn). So the estimator's own function is called with one
  synthetic layer carrying those sums: the planner's peak is the estimator's peak, and for
  each value of the largest rebuilt layer `kept_cap` finds, in integers, the most kept bytes
  the budget holds.
* cpu: the memory-pool peak is the largest of the estimator's checkpoints
  (the family's `cpu_checkpoints`: the start of the step, the end of the forward, the
  backward and the attention backward of each layer, the optimizer step). `cpu_terms` reads
  the search's terms off those checkpoints by probing the estimator: what a layer's choice adds
  to each kind of per-layer checkpoint of the layers before it, to its own, and to those of
  the layers after it, and to each whole-stage checkpoint; and the shared term (the causal
  mask, kept once when some attention is rebuilt). So a change of the estimator reaches the
  search without being restated here. The terms are checked against the estimator on whole
  plans when they are made (`PlannerMismatch` if the estimator grows a term of another shape:
  the planner then estimates plans whole, `planner._exhaustive`), and a test checks them on
  random plans.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from ..estimate.effects import LayerEffect, TensorFate
from ..estimate.family import cpu_pool_peak, estimator_of
from ..estimate.inventory import Saved
from ..estimate.memory import StageParams, ascend_peak
from ..estimate.spec import ModelSpec, OptimizerSpec, ParallelSpec
from ..estimate.transfer import LayerTransfer
from ..family import ModelFamily

INFINITE = float("inf")


def synthetic_layer(kept: int, rebuilt: int) -> LayerEffect:
    """One layer keeping `kept` bytes and rebuilding `rebuilt` in the backward: the sums a stage's peak reads."""
    tensors = (TensorFate(saved=Saved(path="kept", what="kept", nbytes=kept), fate="kept"),
               TensorFate(saved=Saved(path="rebuilt", what="rebuilt", nbytes=rebuilt), fate="recomputed"))
    return LayerEffect(layer=0, tensors=tensors, recompute_flops=0)


AWAY = LayerTransfer(layer=0, nbytes=0, transfer_s=0.0, forward_s=0.0, backward_s=0.0, forward_stall_s=0.0,
                     backward_stall_s=0.0, on_device_at_turn=False)
"""A swap whose tensors have left the device by the forward/backward turn (the only kind `auto` writes)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AscendStage:
    model: ModelSpec
    parallel: ParallelSpec
    optimizer: OptimizerSpec
    params: StageParams
    factor: float
    first: bool
    last: bool
    positions: int

    def peak_of(self, kept: int, rebuilt: int) -> int:
        return ascend_peak(self.model, self.parallel, self.optimizer, params=self.params,
                           effects=[synthetic_layer(kept, rebuilt)], transfers=[AWAY], factor=self.factor,
                           first=self.first, last=self.last).peak

    def peak(self, options: list) -> int:
        return self.peak_of(sum(option.kept for option in options), max(option.rebuilt for option in options))

    def host(self, options: list) -> int:
        return round(self.factor * sum(option.swapped for option in options))

    def kept_cap(self, rebuilt: int, budget: int) -> int:
        """The most kept bytes with the peak within `budget` when the largest layer rebuilt is `rebuilt` (-1 if
        none): the peak grows with the kept bytes."""
        return _kept_cap(self, rebuilt, budget)


@functools.lru_cache(maxsize=4096)
def _kept_cap(stage: AscendStage, rebuilt: int, budget: int) -> int:
    return most_kept(stage.peak_of, rebuilt, budget)


def most_kept(peak_of: Callable[[int, int], int], rebuilt: int, budget: int) -> int:
    """The most kept bytes with `peak_of(kept, rebuilt)` within `budget` (-1 if none), for a peak that grows with the
    kept bytes: doubling, then bisection, in integers."""
    if peak_of(0, rebuilt) > budget:
        return -1
    low, high = 0, max(1, budget)
    while peak_of(high, rebuilt) <= budget:
        low, high = high, high * 2
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if peak_of(middle, rebuilt) <= budget else (low, middle)
    return low


class PlannerMismatch(RuntimeError):
    """The estimator's cpu checkpoints no longer have the shape the search relies on."""


Key = tuple[str, int | None]


def _checkpoints(family: ModelFamily, model: ModelSpec, effects: list[LayerEffect]) -> dict[Key, int]:
    """The estimator's cpu checkpoints by (kind, layer index or None)."""
    return {candidate.key: candidate.peak for candidate in estimator_of(family).cpu_checkpoints(model, effects)}


@dataclass(frozen=True, slots=True, kw_only=True)
class CpuTerms:
    """The cpu pool peak split into what the search needs, read off the estimator's own checkpoints.

    A per-layer checkpoint of kind k at position i is a constant of the stage (every layer keeping) plus, for
    every layer j, a term fixed by j's choice and by where j sits: `before[k]` for j < i (what the layer keeps
    for its backward, the weight copies it still holds, ...), `at[k]` for j = i, `after[k]` for j > i (what a
    layer adds to every moment of the step, such as the graph's constant inputs of a recomputed cell). A
    whole-stage checkpoint w is a constant plus `whole[w]` of every layer. The one term shared by layers is the
    causal mask, `mask`, counted once when some attention is rebuilt. Every term is relative to "keep" (0 for
    it). They are read by calling the family's `cpu_checkpoints` on three-layer probes (one choice in the
    middle, the others keeping; two attention-rebuilding layers for the mask) and the constants on the stage's
    all-keep plan; `cpu_terms` checks the result against the estimator on whole plans.
    """

    before: dict[str, dict]     # kind -> Choice -> bytes added to that kind's checkpoints of later layers
    at: dict[str, dict]         # kind -> Choice -> bytes added to the layer's own checkpoint of that kind
    after: dict[str, dict]      # kind -> Choice -> bytes added to that kind's checkpoints of earlier layers
    whole: dict[str, dict]      # whole-stage kind -> Choice -> bytes added
    constants: dict             # (kind, index or None) -> bytes with every layer keeping
    mask: dict                  # (kind, index or None) -> bytes of the shared term (causal mask)
    attention: dict             # Choice -> whether it rebuilds some attention tensor (the mask is then kept)

    def checkpoints(self, choices: list) -> dict[Key, int]:
        """Every checkpoint of the plan giving position i `choices[i]`, as the search counts it."""
        masked = any(self.attention[choice] for choice in choices)
        values: dict[Key, int] = {}
        for kind in self.at:
            before, at, after = self.before[kind], self.at[kind], self.after[kind]
            prefix, suffix = 0, sum(after[choice] for choice in choices)
            for index, choice in enumerate(choices):
                suffix -= after[choice]
                values[(kind, index)] = self._base((kind, index), masked) + prefix + at[choice] + suffix
                prefix += before[choice]
        for kind, by_choice in self.whole.items():
            values[(kind, None)] = self._base((kind, None), masked) + sum(by_choice[choice] for choice in choices)
        return values

    def _base(self, key: Key, masked: bool) -> int:
        return self.constants[key] + (self.mask[key] if masked else 0)


def cpu_terms(family: ModelFamily, model: ModelSpec, effects: dict, attention: dict, positions: int) -> CpuTerms:
    """`effects`: Choice -> LayerEffect (the first one is "keep"); `attention`: Choice -> bool. Raises
    `PlannerMismatch` when the terms do not add up to the estimator's checkpoints on whole plans."""
    choices = list(effects)
    keep = choices[0]

    def values(picks: list) -> dict[Key, int]:
        return _checkpoints(family, model, [effects[choice] for choice in picks])

    base = values([keep] * 3)
    rebuilding = [choice for choice in choices if attention[choice]]
    mask: dict[Key, int] = {key: 0 for key in base}
    if rebuilding:
        a = rebuilding[0]
        both, first, last = values([a, keep, a]), values([a, keep, keep]), values([keep, keep, a])
        mask = {key: first[key] + last[key] - base[key] - both[key] for key in base}
    per_layer = sorted({kind for kind, index in base if index is not None})
    whole_kinds = sorted(kind for kind, index in base if index is None)
    before: dict = {kind: {} for kind in per_layer}
    at: dict = {kind: {} for kind in per_layer}
    after: dict = {kind: {} for kind in per_layer}
    whole: dict = {kind: {} for kind in whole_kinds}
    for choice in choices:
        probe = values([keep, choice, keep])
        delta = {key: probe[key] - base[key] - (mask[key] if attention[choice] else 0) for key in base}
        for kind in per_layer:
            after[kind][choice], at[kind][choice], before[kind][choice] = (delta[(kind, index)] for index in range(3))
        for kind in whole_kinds:
            whole[kind][choice] = delta[(kind, None)]
    everyone = values([keep] * positions)
    middle = {kind: mask[(kind, 1)] for kind in per_layer}
    terms = CpuTerms(before=before, at=at, after=after, whole=whole, constants=everyone,
                     mask={(kind, index): mask[(kind, None)] if index is None else middle[kind]
                           for kind, index in everyone},
                     attention=dict(attention))
    _check(family, model, terms, effects, positions)
    return terms


def _check(family: ModelFamily, model: ModelSpec, terms: CpuTerms, effects: dict, positions: int) -> None:
    """Whole plans of the stage (each choice everywhere; the choices in turn, both ways round; each choice in
    the first half and another in the second) through the estimator and through the terms: every checkpoint
    must agree, or the estimator has a term of a new shape."""
    choices = list(effects)
    plans = [[choice] * positions for choice in choices]
    plans += [[choices[index % len(choices)] for index in range(positions)],
              [choices[-1 - index % len(choices)] for index in range(positions)]]
    half = positions // 2
    plans += [[first] * half + [second] * (positions - half) for first in choices for second in choices
              if first != second]
    for plan in plans:
        expected = _checkpoints(family, model, [effects[choice] for choice in plan])
        if terms.checkpoints(plan) != expected:
            raise PlannerMismatch("the cpu terms read off the estimator's checkpoints do not add up to its peak on "
                                  f"the plan {[choice.name for choice in plan]}")


@dataclass(frozen=True, slots=True, kw_only=True)
class CpuStage:
    """The cpu pool peak (`estimate.memory.cpu_pool_peak`) as the search sees it: `terms` of a stage of
    `positions` layers."""

    family: ModelFamily
    model: ModelSpec
    terms: CpuTerms
    positions: int

    def checkpoints(self, choices: list) -> dict[Key, int]:
        return self.terms.checkpoints(choices)

    def peak(self, options: list) -> int:
        return max(self.checkpoints([option.choice for option in options]).values())

    def host(self, options: list) -> int:
        return 0


def check_cpu_peak(model: ModelSpec, effects: list[LayerEffect], stage: CpuStage,
                          options: list) -> tuple[int, int]:
    """(the search's peak, the estimator's peak) of one plan, for the test that keeps the two equal."""
    return stage.peak(options), cpu_pool_peak(stage.family, model, effects).peak
