"""A stage's peak as a function of what its layers keep, in the shape the solver can search.

* ascend: the estimator's `ascend_peak` depends on a stage's layers only through the sum of
  the bytes they keep, the largest layer rebuilt in the backward and the swapped bytes still
  on the device at the forward/backward turn (none: `auto` never swaps a layer whose
  release would fall after the turn). So the estimator's own function is called with one
  synthetic layer carrying those sums: the planner's peak is the estimator's peak.
* cpu: the memory-pool peak is the largest of the end of the forward (every kept tensor),
  the backward of each layer i (what layers before i keep, plus terms fixed by i) and the
  optimizer step (`estimate/memory.py`). The terms fixed by i are restated here; a test
  checks that this restatement equals `cpu_pool_peak` on random plans.

Both split the search into runs: ascend by the largest rebuilt layer, cpu by whether some
attention is rebuilt (the causal mask is then kept for every layer). Inside a run the
constraints are a cap on each prefix sum of kept bytes and one on the total.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

from ..estimate.effects import LayerEffect, TensorFate
from ..estimate.inventory import FP32, Saved, dims
from ..estimate.memory import _optimizer_step, ascend_peak, cpu_pool_peak
from ..estimate.spec import ModelSpec, OptimizerSpec, ParallelSpec
from ..estimate.transfer import LayerTransfer

INFINITE = float("inf")


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    """One part of the search: which options it admits and how its constraints read."""

    admits: Callable[[object], bool]        # Option -> bool
    prefix_caps: tuple[float, ...]          # kept bytes before position i must be <= prefix_caps[i]
    total_cap: float                        # kept bytes of the whole stage must be <= this
    host_cap: float                         # swapped bytes of the whole stage must be <= this


def _synthetic(kept: int, rebuilt: int) -> LayerEffect:
    tensors = (TensorFate(saved=Saved(path="kept", what="kept", nbytes=kept), fate="kept"),
               TensorFate(saved=Saved(path="rebuilt", what="rebuilt", nbytes=rebuilt), fate="recomputed"))
    return LayerEffect(layer=0, tensors=tensors, recompute_flops=0)


_AWAY = LayerTransfer(layer=0, nbytes=0, transfer_s=0.0, forward_s=0.0, backward_s=0.0, forward_stall_s=0.0,
                      backward_stall_s=0.0, on_device_at_turn=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class AscendStage:
    model: ModelSpec
    parallel: ParallelSpec
    optimizer: OptimizerSpec
    params: int
    factor: float
    first: bool
    last: bool
    positions: int

    def peak_of(self, kept: int, rebuilt: int) -> int:
        return ascend_peak(self.model, self.parallel, self.optimizer, params=self.params,
                           effects=[_synthetic(kept, rebuilt)], transfers=[_AWAY], factor=self.factor,
                           first=self.first, last=self.last).peak

    def peak(self, options: list) -> int:
        return self.peak_of(sum(option.kept for option in options), max(option.rebuilt for option in options))

    def host(self, options: list) -> int:
        return round(self.factor * sum(option.swapped for option in options))

    def runs(self, rebuilt_values: set[int], budget: int, host_budget: float) -> list[Run]:
        runs: list[Run] = []
        caps = {rebuilt: self._kept_cap(rebuilt, budget) for rebuilt in sorted(rebuilt_values)}
        for rebuilt, cap in caps.items():
            if cap < 0 or any(cap == other and rebuilt < limit for limit, other in caps.items()):
                continue   # a run with a larger limit and the same cap admits more
            runs.append(Run(admits=lambda option, limit=rebuilt: option.rebuilt <= limit,
                            prefix_caps=(INFINITE,) * self.positions, total_cap=cap,
                            host_cap=host_budget / self.factor if self.factor else INFINITE))
        return runs

    def _kept_cap(self, rebuilt: int, budget: int) -> int:
        return _kept_cap(self, rebuilt, budget)


@functools.lru_cache(maxsize=4096)
def _kept_cap(stage: AscendStage, rebuilt: int, budget: int) -> int:
    """The most kept bytes with peak <= budget (-1 if none): the peak grows with kept bytes."""
    if stage.peak_of(0, rebuilt) > budget:
        return -1
    low, high = 0, max(1, budget)
    while stage.peak_of(high, rebuilt) <= budget:
        low, high = high, high * 2
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if stage.peak_of(middle, rebuilt) <= budget else (low, middle)
    return low


@dataclass(frozen=True, slots=True, kw_only=True)
class CpuStage:
    model: ModelSpec
    layer_bytes: int            # every tensor of a layer (rebuilt during its backward if recomputed)
    positions: int

    def _fixed(self, mask: bool) -> tuple[list[int], int, int]:
        """Per checkpoint, the bytes not kept by layers before it: backward of i, end of forward, optimizer."""
        model, e, n = self.model, FP32, self.positions
        dim = dims(model, ParallelSpec())
        tables = e * (2 * model.seq * model.head_dim + 3 * dim.bs) + (e * model.batch * model.seq ** 2 if mask else 0)
        backward = [e * ((n - 1 - index) * model.layer_params + model.vocab * model.hidden + model.hidden)
                    + e * 2 * dim.bsh_full + tables + self.layer_bytes + 2 * e * dim.bsf for index in range(n)]
        forward = e * 4 * dim.bsh_full + tables + 4 * e * model.batch * model.seq * model.vocab
        return backward, forward, _optimizer_step(model, n).peak

    def peak(self, options: list) -> int:
        backward, forward, step = self._fixed(any(option.attention for option in options))
        prefix, values = 0, []
        for option, fixed in zip(options, backward):
            values.append(prefix + fixed)
            prefix += option.kept
        return max(*values, prefix + forward, step)

    def host(self, options: list) -> int:
        return 0

    def runs(self, rebuilt_values: set[int], budget: int, host_budget: float) -> list[Run]:
        runs = []
        for mask in (False, True):
            backward, forward, step = self._fixed(mask)
            if step > budget:
                continue
            runs.append(Run(admits=(lambda option: True) if mask else (lambda option: not option.attention),
                            prefix_caps=tuple(budget - fixed for fixed in backward), total_cap=budget - forward,
                            host_cap=INFINITE))
        return runs


def check_cpu_restatement(model: ModelSpec, effects: list[LayerEffect], options: list) -> tuple[int, int]:
    """(restated peak, estimator's peak) of one plan, for the test that keeps the two equal."""
    stage = CpuStage(model=model, layer_bytes=effects[0].bytes(), positions=len(effects))
    return stage.peak(options), cpu_pool_peak(model, effects).peak
