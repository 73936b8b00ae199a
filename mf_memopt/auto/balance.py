"""`auto --balance`: choose the pipeline layout (the offsets) together with the recompute and swap plan.

The objective is the predicted step time of the pipeline. Every stage runs each micro-batch's forward and
backward of its layers; a stage's time per micro-batch `t_p` is its layers' forward and backward (three
forwards), their recompute and, on the last stage, the MTP layers and the output heads. Under (interleaved)
1F1B the step takes `G * (m + (pp - 1) / v) * max_p t_p` (m micro-batches, G gradient-accumulation steps, v
interleave chunks: the warm-up and drain of the pipeline cost `(pp - 1) / v` micro-batches of the slowest
stage), so the step time is least when the slowest stage is fastest.

The constraint: every stage's peak fits the budget. A stage's peak is the estimator's `ascend_peak`, which is
linear in what the layout and the plan choose (parameters held, activations kept, each times a per-stage
factor: the micro-batches in flight, `estimate.memory.in_flight`) except for the largest layer rebuilt in the
backward, a maximum over the stage's choices. The coefficients are read off the estimator by probing it (as
`limits.AscendStage` does), so the balance and `estimate` agree by construction.

1. A mixed-integer programme (`scipy.optimize.milp`, HiGHS) chooses the layers of every (chunk, stage) slot
   and how many of each slot's layers take each choice (keep, select or full recompute, swap), minimising the
   slowest stage's time (and, second, the sum of all stages' times) with every stage's peak within the budget.
   The first layers are dense in some models (`first_k_dense_replace`): they stay in the first slot.
2. The layout is written as offsets (adding up to `num_layers % (pp * interleave)`, MindFormers' rule), and
   the existing per-stage search (`planner.auto_plan`) makes the exact recompute/swap plan for it, in the
   form the config allows (per-stage counts, or layer indices with swap). The programme counts layers per
   choice, which relaxes the count forms' rule that a setting covers the first layers of a chunk; the exact
   search then decides, and its estimate is what is reported.
3. If the exact search finds a stage over the budget, the stage's budget in the programme is lowered by the
   excess and the programme solved again (at most `REPAIRS` times). The layout as written, planned by the
   same search, is a candidate too: the balanced plan is never predicted slower than it.

When nothing fits, a second programme minimises the largest peak over all layouts and choices; that peak,
confirmed by the exact search, is the smallest budget named in `InfeasibleBudget`.
"""

from __future__ import annotations

import contextlib
import copy
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from ..config.errors import ConfigIssue, raise_if_errors
from ..config.layout import Layout
from ..config.load import Document, load_document
from ..config.source import Source
from ..estimate.budget import device_budget
from ..estimate.core import Estimate
from ..estimate.memory import StageParams, ascend_moments, in_flight, stage_params
from ..estimate.spec import ModelSpec, ParallelSpec, read_spec
from ..estimate.transfer import Hardware
from .choices import Choice, choice_set, footprints
from .limits import AWAY, synthetic_layer
from .milp import MIB, TIME_LIMIT_S, Linear, Program, SolverError
from .offsets_writer import offsets_writable, write_offsets
from .planner import auto_plan
from .problem import communication, hidden_prefetch, mtp_prints
from .results import INFINITE, AutoPlan, Balanced, InfeasibleBudget, PipelinePlan, StageTime, budget_for
from .solver import feasibility_only
from .writer import HEADER_MARK

REPAIRS = 3


def balance_plan(config: str | Path | Document, *, budget: int | None = None, host_budget: float = INFINITE,
                 hardware: Hardware | None = None, margin: float | None = None,
                 output_name: str | None = None) -> Balanced:
    """Choose offsets and the recompute/swap plan of `config` for the least predicted step time with every
    stage's peak within `budget` bytes (ascend runtime; without it, the YAML's: `estimate.budget.device_budget`);
    raises `InfeasibleBudget` (the smallest budget at which it then plans) or `ConfigError`. `config`: a path
    (read here) or a document already read."""
    started = time.perf_counter()
    document = load_document(config)
    source, path = document.source, Path(document.source.file)
    issues: list[ConfigIssue] = []
    resolved = device_budget(source, "ascend", budget, issues)
    raise_if_errors(issues)
    budget = resolved.nbytes
    hardware = replace(hardware or Hardware(), device_memory=budget)
    model = _Pipeline.read(document, hardware)
    written = model.times(model.estimate(document), model.written_offsets())
    attempts = _Attempts(model=model, source=source, path=path, host_budget=host_budget, hardware=hardware,
                         margin=margin, output_name=output_name or str(path), written=written.offsets)
    found = attempts.at(budget)
    if not found.candidates:
        raise attempts.infeasible(budget)
    scored = [(model.times(plan.estimate, offsets), name, plan) for name, offsets, plan in found.candidates]
    best, name, plan = min(scored, key=lambda item: (item[0].step_s, item[1] != "balanced"))
    header = [f"{HEADER_MARK} pipeline layout chosen by auto --balance: offset {best.offsets} (as written: "
              f"{written.offsets}); predicted step time {best.step_s:.3f} s (as written: {written.step_s:.3f} s), "
              f"the slowest stage's time x (micro-batches + (stages - 1) / chunks) / micro-batches"]
    why = "" if name == "balanced" else (
        "no other layout is predicted faster" if found.searched else
        "the programme found no layout within the budget" + ("" if found.layouts else " at all"))
    return Balanced(config=str(path), budget=budget, budget_source=resolved.source, written=written, balanced=best,
                    plan=plan, layout=name, why=why,
                    wall_s=time.perf_counter() - started, text="\n".join(header) + "\n" + plan.text,
                    notes=tuple(found.notes))


@dataclass(frozen=True, slots=True, kw_only=True)
class _Found:
    """What planning at one budget found: the plans that fit (the programme's layout, the layout as written), what
    was repaired, whether the programme gave a layout at all, and whether its layout's exact plan fits."""

    candidates: list[tuple[str, list, AutoPlan]]
    notes: list[str]
    layouts: bool
    searched: bool


@dataclass(slots=True, kw_only=True)
class _Attempts:
    """Planning a config at a budget, the same way for the budget asked for and for the search of the smallest budget
    at which it plans."""

    model: _Pipeline
    source: Source
    path: Path
    host_budget: float
    hardware: Hardware
    margin: float | None
    output_name: str
    written: list

    def exact(self, offsets: list, budget: int, minimum: bool) -> AutoPlan:
        edited = self.model.with_offsets(self.source, offsets)
        return auto_plan(self.path, budget=budget, runtime="ascend", host_budget=self.host_budget,
                         hardware=replace(self.hardware, device_memory=budget), output_name=self.output_name,
                         margin=self.margin, source=edited, minimum=minimum)

    def at(self, budget: int, notes: bool = True, first: bool = False) -> _Found:
        """1. The programme's layout for the budget less the margin, planned by the exact search; a stage the exact
        search cannot fit lowers its cap in the programme by the excess (at most `REPAIRS` times). 2. The layout as
        written, planned the same way (with `first`, only when 1 found nothing: whether anything plans is asked).
        A plan is a candidate only when its estimate fits."""
        said: list[str] = []
        candidates: list[tuple[str, list, AutoPlan]] = []
        caps = [budget - round(budget * (self.margin or 0.0))] * self.model.stages
        layouts = searched = False
        for _ in range(REPAIRS + 1):
            sizes = self.model.solve(caps, self.host_budget)
            if sizes is None:
                break
            layouts = True
            offsets = self.model.offsets(sizes)
            try:
                plan = self.exact(offsets, budget, minimum=True)
                over = {stage.stage: stage.peak.peak - budget for stage in plan.estimate.stages
                        if stage.peak.peak > budget}
            except InfeasibleBudget as error:
                over = {stage: need - budget for stage, need in error.minimum.items() if need > budget}
            if not over:
                candidates.append(("balanced", offsets, plan))
                searched = True
                break
            said.append(f"offsets {offsets}: the exact search needs more than the budget in stage(s) "
                        + ", ".join(f"{stage} (+{value / MIB:.0f} MiB)" for stage, value in over.items())
                        + "; those stages' budgets lowered in the programme")
            caps = [cap - over.get(stage, 0) for stage, cap in enumerate(caps)]
        with contextlib.suppress(InfeasibleBudget):    # the layout as written may have no plan within the budget
            if not (first and candidates):
                plan = self.exact(self.written, budget, minimum=False)
                if plan.fits:
                    candidates.append(("as written", self.written, plan))
        if self.model.unproven:
            said.append(f"the layout programme stopped at its {TIME_LIMIT_S:g} s time limit: its layout is the best it "
                        "found, not proven the fastest")
        return _Found(candidates=candidates, notes=said if notes else [], layouts=layouts, searched=searched)

    def infeasible(self, budget: int) -> InfeasibleBudget:
        """The smallest budget at which planning succeeds, in bytes, with the peaks of the plan made for it.

        The programme's least largest peak (every layout and choice it offers) is a lower bound; the search starts
        there, or at the layout as written's own smallest budget if that is lower (where planning succeeds), grows
        the budget until planning succeeds, then bisects to the byte at which it starts to. The search asks only
        whether some plan fits (`solver.feasibility_only`); the plan named is made at that budget as usual."""
        with feasibility_only():
            high = self._smallest()
        found = self.at(high, notes=False)
        scored = [(self.model.times(plan.estimate, offsets), plan) for _, offsets, plan in found.candidates]
        plan = min(scored, key=lambda item: item[0].step_s)[1]
        return InfeasibleBudget(budget, {stage.stage: stage.peak.peak for stage in plan.estimate.stages},
                                self.margin or 0.0, smallest=high)

    def _smallest(self) -> int:
        least = self.model.least_peak(self.host_budget)
        try:
            self.exact(self.written, 1, minimum=True)
            written = 1
        except InfeasibleBudget as error:
            written = error.smallest or 1
        # the programme's peaks are read off the estimator in floating point: its bound is taken a millionth lower
        bound = int((least or 0) * (1 - 1e-6))
        low = min(budget_for(bound, self.margin or 0.0), written) - 1
        step = MIB
        while True:
            high = low + step
            if self.at(high, notes=False, first=True).candidates:
                break
            low, step = high, step * 2
            if step > 1 << 50:
                raise SolverError("auto --balance found no budget up to a petabyte at which it plans: a defect of "
                                  "mf_memopt, please report it")
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (low, middle) if self.at(middle, notes=False, first=True).candidates else (middle, high)
        return high


@dataclass(frozen=True, slots=True, kw_only=True)
class _Kind:
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
class _StageMemory:
    """A stage's peak as the programme reads it: intercept + sum over kinds of per_layer * layers + per_kept * kept
    + working, working = max(rebuilt + over_rebuilt, floor) (the estimator's backward working set); the intercept
    holds the stage's parameters outside the decoder layers (embedding, head, MTP)."""

    intercept: float
    per_layer: tuple[float, ...]        # per layer kind, as `_Pipeline.kinds`
    others: tuple[tuple[float, tuple[float, ...]], ...] = ()   # the other moments (the optimizer step): intercept
                                                               # and per-layer cost; they keep no activations
    per_kept: float
    over_rebuilt: float
    floor: float


@dataclass(slots=True)
class _Pipeline:
    """What the programme needs of a pipeline config: its layout, each layer kind's footprint under every choice,
    each stage's peak terms, the heads' time; and the programme itself."""

    source: Source
    model: ModelSpec
    parallel: ParallelSpec
    hardware: Hardware
    layout: Layout
    offset_key: tuple
    choices: tuple[Choice, ...]
    kinds: list[_Kind]                  # [dense kind, MoE kind] or [the one kind]
    dense: int                          # first layers of the dense kind (all in the first stage's first chunk)
    mtp: _Kind | None                   # all MTP layers together, under the last layer's choice
    memory: list[_StageMemory]
    head_s: float                       # the last stage's output heads, per micro-batch
    steps: int
    unproven: bool = False              # the programme stopped at its time limit at least once (`solve`)

    @classmethod
    def read(cls, config: Source | Document, hardware: Hardware) -> _Pipeline:
        """Check the config (a document, or a source held in memory; one `ConfigError` with every problem), then
        price its parts."""
        document = load_document(config)
        source, plan = document.source, document.planned()
        issues: list = []
        spec = read_spec(source, plan.family, issues, runtime="ascend")
        keys = plan.family.keys
        if plan.layout.stages < 2:
            issues.append(source.issue(("parallel_config", "pipeline_stage"), "auto --balance moves layers between "
                                       "pipeline stages; this config has one stage", "set "
                                       "parallel_config.pipeline_stage above 1, or plan without --balance"))
        if not offsets_writable(source, keys.offset):
            issues.append(source.issue(keys.offset, "auto --balance writes the offsets into this file, which has no "
                                       f"{'.'.join(keys.offset[:-1])} section of its own (it is inherited)",
                                       f"add `{keys.offset[-1]}: 0` under {'.'.join(keys.offset[:-1])} in this file"))
        raise_if_errors(issues)
        model, parallel, optimizer = spec
        family = plan.family
        choices = choice_set(family.auto_cells_for(source), swap=True,
                             full=parallel.seq_split == 1)   # MindFormers refuses full recompute under seq pipe
        kinds = [_kind(kind, choices, family, parallel, hardware, index,
                       communication(plan, kind, parallel, "ascend"))
                 for kind, index in zip(model.layer_kinds, (0, model.dense_layers) if model.dense_layers else (0,))]
        mtp = None
        if model.mtp_layers:
            prints, forward = mtp_prints(plan, model, parallel, choices, "ascend", hardware)
            mtp = _Kind(params=StageParams(split=0), forward_s=forward, kept=tuple(prints[c].kept for c in choices),
                        rebuilt=tuple(prints[c].rebuilt for c in choices), swapped=(0,) * len(choices),
                        recompute_s=tuple(hardware.seconds(prints[c].effect.recompute_flops) for c in choices),
                        allowed=tuple(not c.swaps for c in choices))
        stages = plan.layout.stages
        typical = max(1, plan.layout.num_layers // stages)
        memory = [_probe(model, parallel, optimizer, in_flight(stage, parallel, plan.layout.chunks),
                         stage == 0, stage == stages - 1,
                         stage_params(model, parallel, [], stage == 0, stage == stages - 1),
                         [kind.params for kind in kinds], typical)
                  for stage in range(stages)]
        heads = 1 + model.mtp_layers
        head_flops = heads * 2 * model.batch * model.seq * model.hidden * model.vocab // parallel.tensor
        return cls(source=source, model=model, parallel=parallel, hardware=hardware, layout=plan.layout,
                   offset_key=keys.offset, choices=choices, kinds=kinds, dense=model.dense_layers, mtp=mtp,
                   memory=memory, head_s=3 * hardware.seconds(head_flops),
                   steps=parallel.micro_batches * parallel.grad_accumulation)

    @property
    def stages(self) -> int:
        return self.layout.stages

    @property
    def slots(self) -> list[tuple[int, int]]:
        """(chunk, stage) in MindFormers' layer order: chunk 0 of every stage, then chunk 1, ..."""
        return [(chunk, stage) for chunk in range(self.layout.chunks) for stage in range(self.stages)]

    def step_s(self, stage_seconds: list[float]) -> float:
        """The pipeline's step time from each stage's time per step (every micro-batch)."""
        m, v = self.parallel.micro_batches, self.layout.chunks
        return max(stage_seconds) * (m + (self.stages - 1) / v) / m

    def estimate(self, config: Source | Document) -> Estimate:
        from ..estimate.core import estimate_source

        return estimate_source(config, runtime="ascend", hardware=self.hardware)

    def times(self, estimate: Estimate, offsets: list) -> PipelinePlan:
        """The estimator's peaks and times of a plan, the output heads' matmuls added to the last stage."""
        last = self.stages - 1
        stages = tuple(StageTime(stage=stage.stage, layers=stage.layers, peak=stage.peak.peak,
                                 seconds=stage.compute_s + stage.recompute_s + stage.stall_s
                                 + (self.steps * self.head_s if stage.stage == last else 0.0))
                       for stage in estimate.stages)
        return PipelinePlan(offsets=offsets, stages=stages, step_s=self.step_s([stage.seconds for stage in stages]))

    def written_offsets(self) -> list:
        """The offsets as written, in the form `offsets` writes them."""
        base = self.layout.num_layers // len(self.slots)
        grid = [[size - base for size in row] for row in self.layout.chunk_sizes]
        return grid[0] if self.layout.chunks == 1 else grid

    def offsets(self, stage_sizes: list[int]) -> list:
        """MindFormers' offsets for the stages' layer counts, per stage or per chunk and stage: a stage's layers
        split evenly between its chunks, the first chunks taking the extra ones (the dense first layers then
        stay in the first chunk, as `_fewest` asks)."""
        base = self.layout.num_layers // len(self.slots)
        chunks = self.layout.chunks
        grid = [[stage_sizes[stage] // chunks + (1 if chunk < stage_sizes[stage] % chunks else 0) - base
                 for stage in range(self.stages)] for chunk in range(chunks)]
        return grid[0] if chunks == 1 else grid

    def _fewest(self, stage: int) -> int:
        """The fewest layers a stage may take. MindFormers lets only the first chunk of the first stage and the last
        chunk of the last stage be empty; the per-stage search plans a stage's layers, so every stage keeps one;
        the dense first layers all fit the first chunk."""
        chunks = self.layout.chunks
        if stage == 0:
            return max(chunks, chunks * (self.dense - 1) + 1)
        return max(1, chunks - 1) if stage == self.stages - 1 else chunks

    def with_offsets(self, source: Source, offsets: list) -> Source:
        """The source with `offsets` written in its data and in its top file's text (`offsets_writer`)."""
        data = copy.deepcopy(source.data)
        parent = data
        for part in self.offset_key[:-1]:
            parent = parent.setdefault(part, {})
        parent[self.offset_key[-1]] = offsets
        return replace(source, data=data, text=write_offsets(source, self.offset_key, offsets))

    # -- the programme --

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

    def _program(self, host_budget: float) -> _Layout:
        """The programme over stage sizes: a stage's peak and time depend on how many layers of each kind take
        each choice, not on how they split between its chunks (`estimate.memory.in_flight` counts the stage's
        kept bytes as a whole), so the chunks share a stage's layers evenly (`offsets`). Memory in MiB, time in
        seconds per micro-batch."""
        program = Program(name="pipeline layout programme")
        stages, count = self.stages, len(self.choices)
        total = self.layout.num_layers
        sizes = [program.var(self._fewest(stage), total, integer=True) for stage in range(stages)]
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
        program, total, count = layout.program, self.layout.num_layers, len(self.choices)
        last = stage == self.stages - 1
        memory = self.memory[stage]
        seconds, kept, params, swapped = {}, {}, {}, {}
        used = [program.var(0, 1, integer=True) for _ in range(count)]
        for index, (kind, chosen) in enumerate(zip(self.kinds, counts)):
            for choice, var in chosen.items():
                seconds[var] = 3 * kind.forward_s + kind.recompute_s[choice]
                kept[var] = kind.kept[choice]
                params[var] = memory.per_layer[index]
                swapped[var] = kind.swapped[choice]
                program.row({var: 1.0, used[choice]: -float(total)}, -np.inf, 0, "a choice used")
        constant_s = self.head_s if last else 0.0
        if last and self.mtp:
            constant_s += 3 * self.mtp.forward_s
            for choice, var in mtp_choice.items():
                seconds[var] = seconds.get(var, 0.0) + self.mtp.recompute_s[choice]
                kept[var] = self.mtp.kept[choice]
                program.row({var: 1.0, used[choice]: -1.0}, -np.inf, 0, "the MTP layers' choice is used")
        # the stage's time per micro-batch, and the slowest stage's
        stage_time = program.var(0, np.inf)
        program.row({**seconds, stage_time: -1.0}, -constant_s, -constant_s, f"stage {stage}'s time")
        program.row({stage_time: 1.0, layout.slowest: -1.0}, -np.inf, 0, "the slowest stage")
        layout.stage_time.append(stage_time)
        # the largest layer rebuilt (MiB), and the backward working set it sets
        rebuilt = program.var(0, np.inf)
        largest = [*(kind.rebuilt for kind in self.kinds), *([self.mtp.rebuilt] if last and self.mtp else [])]
        for choice in range(count):
            most = max(values[choice] for values in largest)
            if most:
                program.row({rebuilt: 1.0, used[choice]: -most / MIB}, 0, np.inf, "the largest layer rebuilt")
        working = program.var(memory.floor / MIB, np.inf)
        program.row({working: 1.0, rebuilt: -1.0}, memory.over_rebuilt / MIB, np.inf, "the backward working set")
        # swaps: never the stage's last layer; the host holds what is swapped, times the micro-batches in flight
        swaps = {var: 1.0 for var, value in swapped.items() if value}
        if swaps:
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
        peak = {var: (params.get(var, 0) + memory.per_kept * kept.get(var, 0)) / MIB
                for var in set(params) | set(kept)}
        peak[working] = 1.0
        moments = [Linear(peak, memory.intercept / MIB)]
        for intercept, per_layer in memory.others:
            moments.append(Linear({var: per_layer[index] / MIB for index, chosen in enumerate(counts)
                                   for var in chosen.values()}, intercept / MIB))
        layout.peak.append(moments)


@dataclass(slots=True)
class _Layout:
    """The layout programme and the variables and expressions its callers read or bound."""

    program: Program
    sizes: list[int]                    # each stage's layer count
    slowest: int                        # the slowest stage's time per micro-batch
    stage_time: list[int] = field(default_factory=list)     # each stage's seconds per micro-batch
    peak: list[list[Linear]] = field(default_factory=list)  # each stage's moments (MiB), each within the cap


def _kind(kind: ModelSpec, choices: tuple[Choice, ...], family, parallel: ParallelSpec, hardware: Hardware,
          index: int, kept_communication: list) -> _Kind:
    """A layer kind's footprint under every choice, from the estimator's own functions (`choices.footprints`)."""
    ops = family.layer_ops(kind, parallel)
    prints = footprints(choices, family.inventory(kind, parallel, "ascend"), ops, family, kept_communication)
    forward = hardware.seconds(sum(op.flops for op in ops))
    # a swap needs some layer after it (`hidden_prefetch`); one whose release takes a whole layer's forward needs two
    allowed = tuple(not p.choice.swaps or (p.swapped > 0 and hidden_prefetch(
        hardware.transfer(p.swapped), forward, 2 * forward, hardware.operators_per_layer) is not None) for p in prints)
    tail = tuple(1 if not p.choice.swaps or hidden_prefetch(hardware.transfer(p.swapped), forward, forward,
                                                            hardware.operators_per_layer) is not None else 2
                 for p in prints)
    return _Kind(params=stage_params(kind, parallel, [index], False, False), forward_s=forward,
                 kept=tuple(p.kept for p in prints), rebuilt=tuple(p.rebuilt for p in prints),
                 swapped=tuple(p.swapped for p in prints),
                 recompute_s=tuple(hardware.seconds(p.effect.recompute_flops) for p in prints), allowed=allowed,
                 tail=tail)


def _probe(model, parallel, optimizer, factor: float, first: bool, last: bool, constant: StageParams,
           kinds: list[StageParams], typical: int) -> _StageMemory:
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
    return _StageMemory(intercept=here.peak - here.components["backward working set"] - per_layer[-1] * typical,
                        per_layer=per_layer, per_kept=per_kept, over_rebuilt=over, floor=floor,
                        others=tuple(others))
