"""The layout programme of `auto --balance` (`balance.py`, step 1): the layers of every stage and how many of them take
each choice, on a `milp.Program`.

Its terms are read off the estimator: each layer kind's footprint under every choice (`layer_kind`, from
`choices.footprints`) and each stage's peak as a linear function of them (`stage_memory`, probing `ascend_moments`
as `limits.AscendStage` does). Memory is stated in MiB, time in seconds per micro-batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..config.layout import Layout
from ..config.plan import Plan
from ..estimate.family import estimator_of
from ..estimate.memory import StageParams, ascend_moments, in_flight, stage_params
from ..estimate.spec import ModelSpec, ParallelSpec
from ..estimate.transfer import Hardware
from .choices import Choice, footprints
from .limits import AWAY, synthetic_layer
from .milp import MIB, TIME_LIMIT_S, Linear, Program
from .problem import hidden_prefetch, mtp_prints, saved_element
from .results import INFINITE


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerKind:
    """One kind of decoder layer (dense or MoE) under every choice, per micro-batch."""

    params: StageParams                 # on one device
    forward_s: float
    kept: tuple[int, ...]               # per choice
    rebuilt: tuple[int, ...]
    swapped: tuple[int, ...]
    recompute_s: tuple[float, ...]
    allowed: tuple[bool, ...]           # a swap only where one layer's forward hides its copy
    tail: tuple[int, ...] = ()          # per choice, the last layers of a stage it may not take (a swap's release
                                        # comes before the forward/backward turn: `problem.hidden_prefetch`)


@dataclass(frozen=True, slots=True, kw_only=True)
class StageMemory:
    """A stage's peak as the programme reads it: intercept + sum over kinds of per_layer * layers + per_kept * kept
    + working, working = max(rebuilt + over_rebuilt, floor) (the estimator's backward working set); the intercept
    holds the stage's parameters outside the decoder layers (embedding, head, MTP)."""

    intercept: float
    per_layer: tuple[float, ...]        # per layer kind, as `LayoutProgramme.kinds`
    others: tuple[tuple[float, tuple[float, ...]], ...] = ()   # the other moments (the optimizer step): intercept
                                                               # and per-layer cost; they keep no activations
    per_kept: float
    over_rebuilt: float
    floor: float


@dataclass(slots=True)
class _Layout:
    """The layout programme and the variables and expressions its callers read or bound."""

    program: Program
    sizes: list[int]                    # each stage's layer count
    slowest: int                        # the slowest stage's time per micro-batch
    stage_time: list[int] = field(default_factory=list)     # each stage's seconds per micro-batch
    peak: list[list[Linear]] = field(default_factory=list)  # each stage's moments (MiB), each within the cap


@dataclass(slots=True)
class _StageTerms:
    """A stage's layer-count variables priced (seconds, bytes kept, parameter bytes, bytes swapped), a binary per
    choice that is 1 where the stage uses it, and the stage's seconds outside its decoder layers."""

    used: list[int]
    seconds: dict[int, float] = field(default_factory=dict)
    kept: dict[int, int] = field(default_factory=dict)
    params: dict[int, float] = field(default_factory=dict)
    swapped: dict[int, int] = field(default_factory=dict)
    constant_s: float = 0.0


@dataclass(slots=True, kw_only=True)
class LayoutProgramme:
    """The programme's terms for one pipeline config, and its two questions: the fastest layout within per-stage
    caps (`solve`), and the least largest peak over every layout (`least_peak`)."""

    layout: Layout
    parallel: ParallelSpec
    choices: tuple[Choice, ...]
    kinds: list[LayerKind]              # [dense kind, MoE kind] or [the one kind]
    dense: int                          # first layers of the dense kind (all in the first stage's first chunk)
    mtp: LayerKind | None               # all MTP layers together, under the last layer's choice
    memory: list[StageMemory]
    head_s: float                       # the last stage's output heads, per micro-batch
    unproven: bool = False              # the programme stopped at its time limit at least once (`solve`)

    @property
    def stages(self) -> int:
        return self.layout.stages

    def solve(self, caps: list[float], host_budget: float) -> list[int] | None:
        """Each stage's layer count for the least slowest-stage time (then the least total), every stage's peak
        within its cap (bytes); None if no layout and choices meet the caps."""
        layout = self._program(host_budget)
        program = layout.program
        for stage, cap in enumerate(caps):
            for moment in layout.peak[stage]:
                program.row(moment, -np.inf, cap / MIB, f"stage {stage}'s peak")
        program.objective = {layout.slowest: 1.0, **dict.fromkeys(layout.stage_time, 1e-3 / self.stages)}
        found = program.solve(TIME_LIMIT_S)
        if found is not None and not found.optimal:
            self.unproven = True
        return None if found is None else [round(found[index]) for index in layout.sizes]

    def least_peak(self, host_budget: float) -> float | None:
        """The smallest largest stage peak (bytes) over every layout and choice the programme offers."""
        layout = self._program(host_budget)
        program = layout.program
        highest = program.var(0, np.inf)
        for stage in range(self.stages):
            for moment in layout.peak[stage]:
                program.row(Linear({**moment.terms, highest: -1.0}, moment.constant), -np.inf, 0,
                            f"stage {stage}'s peak")
        program.objective = {highest: 1.0}
        found = program.solve(TIME_LIMIT_S)
        return None if found is None else found[highest] * MIB

    def fewest(self, stage: int) -> int:
        """The fewest layers a stage may take. MindFormers lets only the first chunk of the first stage and the last
        chunk of the last stage be empty; the per-stage search plans a stage's layers, so every stage keeps one;
        the dense first layers all fit the first chunk."""
        chunks = self.layout.chunks
        if stage == 0:
            return max(chunks, chunks * (self.dense - 1) + 1)
        return max(1, chunks - 1) if stage == self.stages - 1 else chunks

    def _program(self, host_budget: float) -> _Layout:
        """The programme over stage sizes: a stage's peak and time depend on how many layers of each kind take
        each choice, not on how they split between its chunks (`estimate.memory.in_flight` counts the stage's
        kept bytes as a whole), so the chunks share a stage's layers evenly (`balance._Pipeline.offsets`)."""
        program = Program(name="pipeline layout programme")
        stages, count = self.stages, len(self.choices)
        total = self.layout.num_layers
        sizes = [program.var(self.fewest(stage), total, integer=True) for stage in range(stages)]
        program.row(dict.fromkeys(sizes, 1.0), total, total, "every layer placed")
        # counts[stage][kind][choice]: layers of that stage, of that kind, taking that choice
        counts = []
        for stage in range(stages):
            kinds = []
            for kind_index, kind in enumerate(self.kinds):
                if self.dense and kind_index == 0 and stage != 0:
                    kinds.append({})
                    continue
                kinds.append({choice: program.var(0, total if kind.allowed[choice] else 0, integer=True)
                              for choice in range(count)})
            counts.append(kinds)
            members = {var: 1.0 for kind in kinds for var in kind.values()}
            program.row({**members, sizes[stage]: -1.0}, 0, 0, f"stage {stage}'s layers")
        if self.dense:
            program.row({var: 1.0 for var in counts[0][0].values()}, self.dense, self.dense, "dense first layers")
        mtp_choice = {choice: program.var(0, 1 if self.mtp.allowed[choice] else 0, integer=True)
                      for choice in range(count)} if self.mtp else {}
        if mtp_choice:
            program.row({var: 1.0 for var in mtp_choice.values()}, 1, 1, "the MTP layers' choice")
        layout = _Layout(program=program, sizes=sizes, slowest=program.var(0, np.inf))
        for stage in range(stages):
            self._stage_rows(layout, stage, counts[stage], mtp_choice, host_budget)
        return layout

    def _stage_rows(self, layout: _Layout, stage: int, counts: list[dict[int, int]], mtp_choice: dict[int, int],
                    host_budget: float) -> None:
        """A stage's time (bounding the slowest stage's), its backward working set, its swaps and its peak
        moments."""
        terms = self._terms(layout, stage, counts, mtp_choice)
        self._time_rows(layout, stage, terms)
        working = self._working_set(layout, stage, terms.used)
        self._swap_rows(layout, stage, counts, terms.swapped, host_budget)
        layout.peak.append(self._moments(stage, counts, terms, working))

    def _terms(self, layout: _Layout, stage: int, counts: list[dict[int, int]],
               mtp_choice: dict[int, int]) -> _StageTerms:
        """The stage's count variables priced, each bounded by its choice's binary; on the last stage the MTP
        layers' choice and the output heads' time too."""
        program, total = layout.program, self.layout.num_layers
        memory = self.memory[stage]
        terms = _StageTerms(used=[program.var(0, 1, integer=True) for _ in range(len(self.choices))])
        for index, (kind, chosen) in enumerate(zip(self.kinds, counts)):
            for choice, var in chosen.items():
                terms.seconds[var] = 3 * kind.forward_s + kind.recompute_s[choice]
                terms.kept[var] = kind.kept[choice]
                terms.params[var] = memory.per_layer[index]
                terms.swapped[var] = kind.swapped[choice]
                program.row({var: 1.0, terms.used[choice]: -float(total)}, -np.inf, 0, "a choice used")
        last = stage == self.stages - 1
        terms.constant_s = self.head_s if last else 0.0
        if last and self.mtp:
            terms.constant_s += 3 * self.mtp.forward_s
            for choice, var in mtp_choice.items():
                terms.seconds[var] = terms.seconds.get(var, 0.0) + self.mtp.recompute_s[choice]
                terms.kept[var] = self.mtp.kept[choice]
                program.row({var: 1.0, terms.used[choice]: -1.0}, -np.inf, 0, "the MTP layers' choice is used")
        return terms

    @staticmethod
    def _time_rows(layout: _Layout, stage: int, terms: _StageTerms) -> None:
        """The stage's time per micro-batch, and the slowest stage's at least that."""
        program = layout.program
        stage_time = program.var(0, np.inf)
        program.row({**terms.seconds, stage_time: -1.0}, -terms.constant_s, -terms.constant_s,
                    f"stage {stage}'s time")
        program.row({stage_time: 1.0, layout.slowest: -1.0}, -np.inf, 0, "the slowest stage")
        layout.stage_time.append(stage_time)

    def _working_set(self, layout: _Layout, stage: int, used: list[int]) -> int:
        """The variable of the stage's backward working set (MiB), set by the largest layer rebuilt."""
        program, memory = layout.program, self.memory[stage]
        last = stage == self.stages - 1
        rebuilt = program.var(0, np.inf)
        largest = [*(kind.rebuilt for kind in self.kinds), *([self.mtp.rebuilt] if last and self.mtp else [])]
        for choice in range(len(self.choices)):
            most = max(values[choice] for values in largest)
            if most:
                program.row({rebuilt: 1.0, used[choice]: -most / MIB}, 0, np.inf, "the largest layer rebuilt")
        working = program.var(memory.floor / MIB, np.inf)
        program.row({working: 1.0, rebuilt: -1.0}, memory.over_rebuilt / MIB, np.inf, "the backward working set")
        return working

    def _swap_rows(self, layout: _Layout, stage: int, counts: list[dict[int, int]], swapped: dict[int, int],
                   host_budget: float) -> None:
        """Swaps: never the stage's last layer; the host holds what is swapped, times the micro-batches in flight."""
        swaps = {var: 1.0 for var, value in swapped.items() if value}
        if not swaps:
            return
        program, total = layout.program, self.layout.num_layers
        program.row({**swaps, layout.sizes[stage]: -1.0}, -np.inf, -1, "the last layer does not swap")
        late = {var: 1.0 for kind, chosen in zip(self.kinds, counts) for choice, var in chosen.items()
                if kind.tail and kind.tail[choice] > 1}
        if late:    # at most size - 2 of them, none in a stage of one layer (`alone`: the stage has one)
            alone = program.var(0, 1, integer=True)
            program.row({**late, layout.sizes[stage]: -1.0, alone: -1.0}, -np.inf, -2,
                        "nor, with a late release, the one before it")
            program.row({layout.sizes[stage]: 1.0, alone: float(total - 1)}, -np.inf, total,
                        "a stage of one layer")
        if host_budget != INFINITE:
            factor = in_flight(stage, self.parallel, self.layout.chunks)
            program.row({var: factor * value / MIB for var, value in swapped.items() if value}, 0,
                        host_budget / MIB, "host bytes")

    def _moments(self, stage: int, counts: list[dict[int, int]], terms: _StageTerms, working: int) -> list[Linear]:
        """The stage's peak moments (MiB): the start of the backward, then the others (`StageMemory.others`)."""
        memory = self.memory[stage]
        peak = {var: (terms.params.get(var, 0) + memory.per_kept * terms.kept.get(var, 0)) / MIB
                for var in set(terms.params) | set(terms.kept)}
        peak[working] = 1.0
        moments = [Linear(peak, memory.intercept / MIB)]
        for intercept, per_layer in memory.others:
            moments.append(Linear({var: per_layer[index] / MIB for index, chosen in enumerate(counts)
                                   for var in chosen.values()}, intercept / MIB))
        return moments


def layer_kind(kind: ModelSpec, choices: tuple[Choice, ...], family, parallel: ParallelSpec, hardware: Hardware,
               index: int, kept_communication: list) -> LayerKind:
    """A layer kind's footprint under every choice, from the estimator's own functions (`choices.footprints`)."""
    estimator = estimator_of(family)
    ops = estimator.layer_ops(kind, parallel)
    prints = footprints(choices, estimator.inventory(kind, parallel, "ascend"), ops, family, kept_communication,
                        model=kind, element_bytes=saved_element(kind, "ascend"))
    forward = hardware.seconds(sum(op.flops for op in ops))
    # a swap needs some layer after it (`hidden_prefetch`); one whose release takes a whole layer's forward needs two
    allowed = tuple(not p.choice.swaps or (p.swapped > 0 and hidden_prefetch(
        hardware.transfer(p.swapped), forward, 2 * forward, hardware.operators_per_layer) is not None) for p in prints)
    tail = tuple(1 if not p.choice.swaps or hidden_prefetch(hardware.transfer(p.swapped), forward, forward,
                                                            hardware.operators_per_layer) is not None else 2
                 for p in prints)
    return LayerKind(params=stage_params(kind, parallel, [index], False, False), forward_s=forward,
                     kept=tuple(p.kept for p in prints), rebuilt=tuple(p.held_in_backward for p in prints),
                     swapped=tuple(p.swapped for p in prints),
                     recompute_s=tuple(hardware.added_seconds(p.effect) for p in prints), allowed=allowed,
                     tail=tail)


def mtp_kind(plan: Plan, model: ModelSpec, parallel: ParallelSpec, choices: tuple[Choice, ...],
             hardware: Hardware) -> LayerKind:
    """All the MTP layers together as one kind, under the last layer's choice (they never swap)."""
    prints, forward = mtp_prints(plan, model, parallel, choices, "ascend", hardware)
    return LayerKind(params=StageParams(split=0), forward_s=forward, kept=tuple(prints[c].kept for c in choices),
                     rebuilt=tuple(prints[c].held_in_backward for c in choices), swapped=(0,) * len(choices),
                     recompute_s=tuple(hardware.added_seconds(prints[c].effect) for c in choices),
                     allowed=tuple(not c.swaps for c in choices))


def stage_memory(model, parallel, optimizer, factor: float, first: bool, last: bool, constant: StageParams,
                 kinds: list[StageParams], typical: int) -> StageMemory:
    """Read a stage's peak terms off the estimator's `ascend_peak` around `constant` (the parameters outside the
    decoder layers) plus `typical` layers of the last kind: each kind's cost per layer, then the rest."""
    def moments(params: StageParams, kept: int = 0, rebuilt: int = 0):
        return ascend_moments(model, parallel, optimizer, params=params, effects=[synthetic_layer(kept, rebuilt)],
                              transfers=[AWAY], factor=factor, first=first, last=last)

    def peak(params: StageParams, kept: int = 0, rebuilt: int = 0):
        return moments(params, kept, rebuilt)[0]        # the start of the backward

    around = constant.plus(kinds[-1], typical)
    here = peak(around)
    per_layer = tuple((peak(around.plus(kind, 4)).peak - here.peak) / 4 for kind in kinds)
    per_kept = (peak(around, kept=1 << 30).peak - here.peak) / (1 << 30)
    floor = here.components["backward working set"]
    big = 1 << 34
    over = peak(around, rebuilt=big).components["backward working set"] - big
    floor = floor if floor > over else 0.0
    others = []
    for index, moment in enumerate(moments(around)[1:], start=1):
        slopes = tuple((moments(around.plus(kind, 4))[index].peak - moment.peak) / 4 for kind in kinds)
        others.append((moment.peak - slopes[-1] * typical, slopes))
    return StageMemory(intercept=here.peak - here.components["backward working set"] - per_layer[-1] * typical,
                       per_layer=per_layer, per_kept=per_kept, over_rebuilt=over, floor=floor,
                       others=tuple(others))
