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

1. A mixed-integer programme (`layout_milp.py`: `scipy.optimize.milp`, HiGHS) chooses the layers of every
   (chunk, stage) slot and how many of each slot's layers take each choice (keep, select or full recompute, swap),
   minimising the slowest stage's time (and, second, the sum of all stages' times) with every stage's peak within
   the budget. The first layers are dense in some models (`first_k_dense_replace`): they stay in the first slot.
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
from dataclasses import dataclass, replace
from pathlib import Path

from ..config.family_rules import auto_cells_for
from ..config.layout import Layout
from ..config.load import Document, load_document
from ..document.errors import ConfigIssue, raise_if_errors
from ..document.source import Source
from ..estimate.budget import device_budget
from ..estimate.core import Estimate, estimate_source
from ..estimate.family import read_spec
from ..estimate.memory import in_flight, stage_params
from ..estimate.spec import ModelSpec, ParallelSpec
from ..estimate.transfer import Hardware
from .choices import choice_set
from .layout_milp import LayoutProgramme, layer_kind, mtp_kind, stage_memory
from .milp import MIB, TIME_LIMIT_S, SolverError
from .offsets_writer import offsets_writable, write_offsets
from .planner import auto_plan, compression_methods
from .problem import communication
from .results import INFINITE, AutoPlan, Balanced, InfeasibleBudget, PipelinePlan, StageTime, budget_for
from .solver import feasibility_only
from .writer import HEADER_MARK

REPAIRS = 3


def balance_plan(config: str | Path | Document, *, budget: int | None = None, host_budget: float = INFINITE,
                 hardware: Hardware | None = None, margin: float | None = None,
                 output_name: str | None = None, compress: tuple[str, ...] | None = None) -> Balanced:
    """Choose offsets and the recompute/swap plan of `config` for the least predicted step time with every
    stage's peak within `budget` bytes (ascend runtime; without it, the YAML's: `estimate.budget.device_budget`);
    raises `InfeasibleBudget` (the smallest budget at which it then plans) or `ConfigError`. `config`: a path
    (read here) or a document already read. `compress`: the compression methods a layer may take, each priced by
    its codec throughput in `hardware` (`planner.compression_methods`: by default those of `DEFAULT_COMPRESS` it
    has a figure for)."""
    started = time.perf_counter()
    document = load_document(config)
    source, path = document.source, Path(document.source.file)
    issues: list[ConfigIssue] = []
    resolved = device_budget(source, "ascend", budget, issues)
    raise_if_errors(issues)
    budget = resolved.nbytes
    hardware = replace(hardware or Hardware(), device_memory=budget)
    methods = compression_methods(compress, "ascend", None, hardware)
    model = _Pipeline.read(document, hardware, methods)
    written = model.times(model.estimate(document), model.written_offsets())
    attempts = _Attempts(model=model, source=source, path=path, host_budget=host_budget, hardware=hardware,
                         margin=margin, output_name=output_name or str(path), written=written.offsets,
                         methods=methods)
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
    methods: tuple[str, ...] = ()       # the compression methods offered

    def exact(self, offsets: list, budget: int, minimum: bool) -> AutoPlan:
        edited = self.model.with_offsets(self.source, offsets)
        return auto_plan(self.path, budget=budget, runtime="ascend", host_budget=self.host_budget,
                         hardware=replace(self.hardware, device_memory=budget), output_name=self.output_name,
                         margin=self.margin, source=edited, minimum=minimum, compress=self.methods)

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


@dataclass(slots=True)
class _Pipeline:
    """A pipeline config as the balance reads it: its layout and where its offsets are written, the heads' time, and
    the layout programme over its layer kinds and stages (`layout_milp.LayoutProgramme`)."""

    source: Source
    model: ModelSpec
    parallel: ParallelSpec
    hardware: Hardware
    layout: Layout
    offset_key: tuple
    head_s: float                       # the last stage's output heads, per micro-batch
    steps: int
    programme: LayoutProgramme

    @classmethod
    def read(cls, config: Source | Document, hardware: Hardware, methods: tuple[str, ...] = ()) -> _Pipeline:
        """Check the config (a document, or a source held in memory; one `ConfigError` with every problem), then
        price its parts, the compression `methods` among the choices."""
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
        choices = choice_set(auto_cells_for(family, source), swap=True, compress=methods,
                             full=parallel.seq_split == 1)   # MindFormers refuses full recompute under seq pipe
        kinds = [layer_kind(kind, choices, family, parallel, hardware, index,
                            communication(plan, kind, parallel, "ascend"))
                 for kind, index in zip(model.layer_kinds, (0, model.dense_layers) if model.dense_layers else (0,))]
        mtp = mtp_kind(plan, model, parallel, choices, hardware) if model.mtp_layers else None
        stages = plan.layout.stages
        typical = max(1, plan.layout.num_layers // stages)
        memory = [stage_memory(model, parallel, optimizer, in_flight(stage, parallel, plan.layout.chunks),
                               stage == 0, stage == stages - 1,
                               stage_params(model, parallel, [], stage == 0, stage == stages - 1),
                               [kind.params for kind in kinds], typical)
                  for stage in range(stages)]
        heads = 1 + model.mtp_layers
        head_flops = heads * 2 * model.batch * model.seq * model.hidden * model.vocab // parallel.tensor
        programme = LayoutProgramme(layout=plan.layout, parallel=parallel, choices=choices, kinds=kinds,
                                    dense=model.dense_layers, mtp=mtp, memory=memory,
                                    head_s=3 * hardware.seconds(head_flops))
        return cls(source=source, model=model, parallel=parallel, hardware=hardware, layout=plan.layout,
                   offset_key=keys.offset, head_s=programme.head_s,
                   steps=parallel.micro_batches * parallel.grad_accumulation, programme=programme)

    @property
    def stages(self) -> int:
        return self.layout.stages

    @property
    def unproven(self) -> bool:
        """The layout programme stopped at its time limit at least once."""
        return self.programme.unproven

    def solve(self, caps: list[float], host_budget: float) -> list[int] | None:
        """Each stage's layer count for the least slowest-stage time, every stage's peak within its cap (bytes);
        None if no layout and choices meet the caps (`LayoutProgramme.solve`)."""
        return self.programme.solve(caps, host_budget)

    def least_peak(self, host_budget: float) -> float | None:
        """The smallest largest stage peak (bytes) over every layout and choice (`LayoutProgramme.least_peak`)."""
        return self.programme.least_peak(host_budget)

    @property
    def slots(self) -> list[tuple[int, int]]:
        """(chunk, stage) in MindFormers' layer order: chunk 0 of every stage, then chunk 1, ..."""
        return [(chunk, stage) for chunk in range(self.layout.chunks) for stage in range(self.stages)]

    def step_s(self, stage_seconds: list[float]) -> float:
        """The pipeline's step time from each stage's time per step (every micro-batch)."""
        m, v = self.parallel.micro_batches, self.layout.chunks
        return max(stage_seconds) * (m + (self.stages - 1) / v) / m

    def estimate(self, config: Source | Document) -> Estimate:
        return estimate_source(config, runtime="ascend", hardware=self.hardware)

    def times(self, estimate: Estimate, offsets: list) -> PipelinePlan:
        """The estimator's peaks and times of a plan, the output heads' matmuls added to the last stage."""
        last = self.stages - 1
        stages = tuple(StageTime(stage=stage.stage, layers=stage.layers, peak=stage.peak.peak,
                                 seconds=stage.compute_s + stage.recompute_s + stage.codec_s + stage.stall_s
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
        stay in the first chunk, as `LayoutProgramme.fewest` asks)."""
        base = self.layout.num_layers // len(self.slots)
        chunks = self.layout.chunks
        grid = [[stage_sizes[stage] // chunks + (1 if chunk < stage_sizes[stage] % chunks else 0) - base
                 for stage in range(self.stages)] for chunk in range(chunks)]
        return grid[0] if chunks == 1 else grid

    def with_offsets(self, source: Source, offsets: list) -> Source:
        """The source with `offsets` written in its data and in its top file's text (`offsets_writer`)."""
        data = copy.deepcopy(source.data)
        parent = data
        for part in self.offset_key[:-1]:
            parent = parent.setdefault(part, {})
        parent[self.offset_key[-1]] = offsets
        return replace(source, data=data, text=write_offsets(source, self.offset_key, offsets))
