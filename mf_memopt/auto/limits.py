"""A stage's peak as a function of what its layers keep, in the shape the solver can search.

* ascend: the estimator's `ascend_peak` depends on a stage's layers only through the sum of
  the bytes they keep, the largest layer rebuilt in the backward and the swapped bytes still
  on the device at the forward/backward turn (none: `auto` never swaps a layer whose
  release would fall after the turn). So the estimator's own function is called with one
  synthetic layer carrying those sums: the planner's peak is the estimator's peak.
* cpu: the memory-pool peak is the largest of the estimator's checkpoints
  (the family's `cpu_checkpoints`: the start of the step, the end of the forward, the
  backward and the attention backward of each layer, the optimizer step). `cpu_terms` reads
  the search's terms off those checkpoints by probing the estimator (what a layer's choice adds
  to checkpoints after it, to its own, and to each whole-stage one; the causal mask kept once
  when some attention is rebuilt), so a change of the estimator reaches the search without
  being restated here; the terms are checked against the estimator on whole plans when they
  are made (`PlannerMismatch` if the estimator grows a term of another shape), and a test
  checks them on random plans.

Both split the search into runs: ascend by the largest rebuilt layer, cpu by whether some
attention is rebuilt. Inside a run the constraints are a cap on the bytes kept before each
position (on cpu, lowered by what the option at that position adds to its own checkpoints),
one on the total, and (on cpu, when the weight copies made at the start of the step depend on
the choices) one on a second whole-stage sum.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from ..estimate.effects import LayerEffect, TensorFate
from ..estimate.inventory import Saved
from ..estimate.memory import StageParams, ascend_peak, cpu_pool_peak
from ..estimate.spec import ModelSpec, OptimizerSpec, ParallelSpec
from ..estimate.transfer import LayerTransfer
from ..models.family import ModelFamily

INFINITE = float("inf")


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    """One part of the search: which options it admits and how its constraints read."""

    admits: Callable[[object], bool]        # Option -> bool
    prefix_cap: Callable[[int, object], float]  # (position i, Option there) -> cap on kept bytes before i
    total_cap: float                        # kept bytes of the whole stage must be <= this
    host_cap: float                         # swapped bytes of the whole stage must be <= this
    extra_cap: float = INFINITE             # the options' `extra` bytes of the whole stage must be <= this


def _no_prefix_cap(index: int, option: object) -> float:
    return INFINITE


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
    params: StageParams
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
                            prefix_cap=_no_prefix_cap, total_cap=cap,
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


class PlannerMismatch(RuntimeError):
    """The estimator's cpu checkpoints no longer have the shape the search relies on."""


def _checkpoints(family: ModelFamily, model: ModelSpec,
                 effects: list[LayerEffect]) -> dict[tuple[str, int | None], int]:
    """The estimator's cpu checkpoints by (kind, layer index or None)."""
    return {candidate.key: candidate.peak for candidate in family.cpu_checkpoints(model, effects)}


@dataclass(frozen=True, slots=True, kw_only=True)
class CpuTerms:
    """The cpu pool peak split into what the search needs, read off the estimator's own checkpoints.

    Every checkpoint is a constant of the stage plus, per layer, a term fixed by that layer's
    choice and by where the layer sits relative to the checkpoint (a per-layer checkpoint of
    layer i: layers before i, layer i itself, layers after i). The one term shared by layers is
    the causal mask, counted once when some attention is rebuilt. These terms are measured by
    calling the family's `cpu_checkpoints` on three-layer probes (one choice in the middle, the rest keep;
    two attention-rebuilding layers for the mask) and the constants on the stage's all-keep
    plan; `CpuStage.__post_init__` checks the result against the estimator on whole plans.
    """

    kept: dict          # Choice -> bytes added to every checkpoint after the layer (shifted to >= 0)
    extra: dict         # Choice -> bytes added to the one whole-stage checkpoint that counts otherwise
    at: dict            # kind -> Choice -> bytes added to the layer's own checkpoint of that kind
    constants: dict     # (kind, index or None) -> bytes with every layer keeping, kept shifted away
    mask: dict          # (kind, index or None) -> bytes of the shared term (causal mask)
    kept_totals: frozenset   # whole-stage checkpoints that count the `kept` bytes of every layer
    extra_totals: frozenset  # whole-stage checkpoints that count the `extra` bytes of every layer
    attention: dict     # Choice -> whether it rebuilds some attention tensor (the mask is then kept)


def cpu_terms(family: ModelFamily, model: ModelSpec, effects: dict, attention: dict, positions: int) -> CpuTerms:
    """`effects`: Choice -> LayerEffect (the first one is "keep"); `attention`: Choice -> bool."""
    choices = list(effects)
    keep = choices[0]

    def values(picks: list) -> dict:
        return _checkpoints(family, model, [effects[choice] for choice in picks])

    base = values([keep] * 3)
    rebuilding = [choice for choice in choices if attention[choice]]
    mask: dict[tuple[str, int | None], int] = {key: 0 for key in base}
    if rebuilding:
        a = rebuilding[0]
        both, first, last = values([a, keep, a]), values([a, keep, keep]), values([keep, keep, a])
        mask = {key: first[key] + last[key] - base[key] - both[key] for key in base}
    per_layer = sorted({kind for kind, index in base if index is not None})
    whole = sorted(kind for kind, index in base if index is None)
    before: dict = {}
    at: dict = {kind: {} for kind in per_layer}
    totals: dict = {kind: {} for kind in whole}
    for choice in choices:
        probe = values([keep, choice, keep])
        shared = {key: mask[key] if attention[choice] else 0 for key in base}
        delta = {key: probe[key] - base[key] - shared[key] for key in base}
        for kind in per_layer:
            if delta[(kind, 0)]:
                raise PlannerMismatch(f"cpu checkpoint '{kind} of layer 0' depends on a later layer's choice")
            at[kind][choice] = delta[(kind, 1)]
            if before.setdefault(choice, delta[(kind, 2)]) != delta[(kind, 2)]:
                raise PlannerMismatch(f"cpu checkpoints of different kinds count a layer differently ({kind})")
        for kind in whole:
            totals[kind][choice] = delta[(kind, None)]
    if not per_layer:
        before = {choice: 0 for choice in choices}
    shift = min(before.values())
    kept = {choice: value - shift for choice, value in before.items()}
    extra: dict | None = None
    kept_totals, extra_totals = set(), set()
    for kind in whole:
        vector = totals[kind]
        if all(value == before[choice] for choice, value in vector.items()):
            kept_totals.add(kind)
        elif any(vector.values()):
            low = min(vector.values())
            shifted = {choice: value - low for choice, value in vector.items()}
            if extra is not None and shifted != extra:
                raise PlannerMismatch("more than two whole-stage sums in the cpu checkpoints")
            extra = shifted
            extra_totals.add(kind)
    extra = extra or {choice: 0 for choice in choices}
    full = values([keep] * positions)
    constants = {}
    for (kind, index), value in full.items():
        if index is not None:
            constants[(kind, index)] = value + index * shift
        elif kind in kept_totals:
            constants[(kind, index)] = value + positions * shift
        elif kind in extra_totals:
            constants[(kind, index)] = value + positions * min(totals[kind].values())
        else:
            constants[(kind, index)] = value
    mask_n = {(kind, index): mask[(kind, 1 if index is not None else None)] for kind, index in full}
    terms = CpuTerms(kept=kept, extra=extra, at=at, constants=constants, mask=mask_n,
                     kept_totals=frozenset(kept_totals), extra_totals=frozenset(extra_totals),
                     attention=dict(attention))
    _check(family, model, terms, effects, positions)
    return terms


def _check(family: ModelFamily, model: ModelSpec, terms: CpuTerms, effects: dict, positions: int) -> None:
    """Whole plans of the stage (each choice everywhere; the choices in turn, both ways round) through the
    estimator and through the terms: every checkpoint must agree, or the estimator has a term of a new shape."""
    choices = list(effects)
    stage = CpuStage(family=family, model=model, terms=terms, positions=positions)
    plans = [[choice] * positions for choice in choices]
    plans += [[choices[index % len(choices)] for index in range(positions)],
              [choices[-1 - index % len(choices)] for index in range(positions)]]
    for plan in plans:
        expected = _checkpoints(family, model, [effects[choice] for choice in plan])
        if stage.checkpoints(plan) != expected:
            raise PlannerMismatch("the cpu terms read off the estimator's checkpoints do not add up to its peak on "
                                  f"the plan {[choice.name for choice in plan]}")


@dataclass(frozen=True, slots=True, kw_only=True)
class CpuStage:
    """The cpu pool peak (`estimate.memory.cpu_pool_peak`) as the search sees it.

    Options carry `kept` (bytes every later checkpoint counts) and `extra` (bytes the one
    whole-stage checkpoint that counts a layer differently adds, e.g. the weight copies made
    when the step starts); per-layer checkpoints also add the term of the layer's own choice,
    which the run's `prefix_cap` folds into the cap of that position and option.
    """

    family: ModelFamily
    model: ModelSpec
    terms: CpuTerms
    positions: int

    def _value(self, key: tuple[str, int | None], mask: bool) -> int:
        return self.terms.constants[key] + (self.terms.mask[key] if mask else 0)

    def checkpoints(self, choices: list) -> dict[tuple[str, int | None], int]:
        """Every checkpoint of the plan giving position i `choices[i]`, as the search counts it."""
        terms, values = self.terms, {}
        mask = any(terms.attention[choice] for choice in choices)
        prefix = 0
        for index, choice in enumerate(choices):
            for kind, by_choice in terms.at.items():
                values[(kind, index)] = self._value((kind, index), mask) + prefix + by_choice[choice]
            prefix += terms.kept[choice]
        extra = sum(terms.extra[choice] for choice in choices)
        for (kind, index) in terms.constants:
            if index is None:
                values[(kind, None)] = (self._value((kind, None), mask) + (prefix if kind in terms.kept_totals else 0)
                                        + (extra if kind in terms.extra_totals else 0))
        return values

    def peak(self, options: list) -> int:
        return max(self.checkpoints([option.choice for option in options]).values())

    def host(self, options: list) -> int:
        return 0

    def runs(self, rebuilt_values: set[int], budget: int, host_budget: float) -> list[Run]:
        terms, runs = self.terms, []
        for mask in (False, True):
            fixed = [self._value((kind, None), mask) for kind, index in terms.constants
                     if index is None and kind not in terms.kept_totals | terms.extra_totals]
            if any(value > budget for value in fixed):
                continue
            total = min([budget - self._value((kind, None), mask) for kind in terms.kept_totals], default=INFINITE)
            extra = min([budget - self._value((kind, None), mask) for kind in terms.extra_totals], default=INFINITE)
            caps = [{kind: budget - self._value((kind, index), mask) for kind in terms.at}
                    for index in range(self.positions)]

            def prefix_cap(index: int, option, caps=caps) -> float:
                return min((cap - self.terms.at[kind][option.choice] for kind, cap in caps[index].items()),
                           default=INFINITE)

            runs.append(Run(admits=(lambda option: True) if mask else (lambda option: not option.attention),
                            prefix_cap=prefix_cap, total_cap=total, host_cap=INFINITE, extra_cap=extra))
        return runs


def check_cpu_peak(model: ModelSpec, effects: list[LayerEffect], stage: CpuStage,
                          options: list) -> tuple[int, int]:
    """(the search's peak, the estimator's peak) of one plan, for the test that keeps the two equal."""
    return stage.peak(options), cpu_pool_peak(stage.family, model, effects).peak
