"""The config `auto` plans, read once: its stage problems per choice set, and a plan written as YAML text (with the
header `auto` writes on top) or estimated. The planner and the plan space evaluate plans through it."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config.family_rules import auto_cells_for
from ..config.load import Document, load_document
from ..config.plan import Plan
from ..document.errors import ConfigIssue, raise_if_errors
from ..document.inherit import BASE_CONFIG
from ..document.source import Source, parse_yaml
from ..estimate.core import Estimate, estimate_source
from ..estimate.family import read_spec
from ..estimate.report import human
from ..estimate.spec import ModelSpec
from ..estimate.transfer import Hardware
from ..family import AutoCells
from .choices import Choice
from .problem import StageProblem, stage_problems
from .results import INFINITE, StagePlan
from .timing import TimeTable
from .writer import Assignment, describe, replace_sections, sections


@dataclass(slots=True)
class PlanContext:
    """A config read for planning: its plan, model spec and family's cells, the stage problems per choice set
    (cached), and the plan written as YAML text or estimated."""

    source: Source
    plan: Plan
    spec: Any
    runtime: str
    hardware: Hardware
    text: str
    output_name: str
    cells: AutoCells
    problems: dict[tuple[Choice, ...], list[StageProblem]] = field(default_factory=dict)
    times: TimeTable | None = None
    compress: bool = False              # compression is among the choices: the written YAML says it either way

    @classmethod
    def read(cls, config: Source | Document, runtime: str, hardware: Hardware, text: str,
             output_name: str) -> PlanContext:
        """The context of a YAML read (a document) or written in memory (a source)."""
        document = load_document(config)
        source, plan = document.source, document.planned()
        issues: list[ConfigIssue] = []
        spec = read_spec(source, plan.family, issues, runtime=runtime)
        if runtime == "cpu" and spec is not None:
            issues += _cpu_layer_kind_issues(source, plan, spec[0])
        raise_if_errors(issues)
        return cls(source=source, plan=plan, spec=spec, runtime=runtime, hardware=hardware, text=text,
                   output_name=output_name, cells=auto_cells_for(plan.family, source))

    def stage_problems(self, choices: list[Choice]) -> list[StageProblem]:
        key = tuple(choices)
        if key not in self.problems:
            self.problems[key] = stage_problems(self.plan, self.spec, key, runtime=self.runtime,
                                                hardware=self.hardware, times=self.times)
        return self.problems[key]

    def uniform(self, choice: Choice) -> Assignment:
        return Assignment(choices={layer.layer: choice for layer in self.plan.layers}, prefetch={})

    def text_of(self, assignment: Assignment, header: list[str] | None = None) -> str:
        original = self.source.get(("recompute_config",)) or {}
        new = sections(assignment, self.plan.layout, original, self.cells, self.compress)
        return replace_sections(self.text, {**new, **self._bases()}, header or [])

    def _bases(self) -> dict:
        """`base_config` written relative to where the planned YAML goes, when it goes to another folder."""
        bases = parse_yaml(self.text, self.source.file).data.get(BASE_CONFIG)
        here, there = Path(self.source.file).parent, Path(self.output_name).parent
        if bases is None or here.resolve() == there.resolve():
            return {}
        moved = [os.path.relpath(here / name, there) for name in (bases if isinstance(bases, list) else [bases])]
        return {BASE_CONFIG: moved if isinstance(bases, list) else moved[0]}

    def estimate_of(self, assignment: Assignment) -> Estimate:
        """The estimate of the YAML with these sections (built as a mapping: no text round trip)."""
        original = self.source.get(("recompute_config",)) or {}
        data = {**self.source.data, **sections(assignment, self.plan.layout, original, self.cells, self.compress)}
        return estimate_source(Source(file=self.output_name, data=data, lines=self.source.lines),
                               runtime=self.runtime, hardware=self.hardware)


def assignment_of(stages: list[StagePlan]) -> Assignment:
    """Each layer's choice and, for a swap, its backward_prefetch, from the stages' plans."""
    choices, prefetch = {}, {}
    for stage in stages:
        for layer, option in stage.got().items():
            choices[layer] = option.choice
            if option.prefetch is not None:
                prefetch[layer] = option.prefetch
    return Assignment(choices=choices, prefetch=prefetch)


def plan_header(family: str, budget: int, host_budget: float, runtime: str, stages: list[StagePlan],
                estimate: Estimate, references: dict[str, Estimate], cells: AutoCells, margin: float,
                profiled: bool = False) -> list[str]:
    """The lines `auto` writes on top of the planned YAML: how the plan was made, and each stage's peak; `profiled`:
    a measured profile priced the choices (else the FLOP model and the codec throughput given)."""
    host = "unlimited" if host_budget == INFINITE else human(host_budget)
    moves = " / layer or op swap with a backward_prefetch that hides the transfer" if family == "indices" else ""
    form = ("layer indices, swap on" if family == "indices"
            else "per-stage counts of the first layers (select counts include the fully recomputed layers before "
                 "them: full recompute wins there)")
    lines = [f"plan for {human(budget)} of device memory per stage ({runtime} runtime), host memory {host}.",
             f"Made per pipeline stage by an exact search over keep / recompute {', '.join(cells.select)} or both /",
             f"full recompute{moves}: the least predicted added step time with the estimated peak within the budget.",
             f"Written as {form}."]
    if any(option.choice.compress for stage in stages for option in stage.options):
        codec = "measured in the profile" if profiled else f"priced at {estimate.hardware.codec_figures()}"
        lines.append(f"Compression (its codec's time {codec}) was among the choices: compress_config is written too.")
    if margin:
        held = human(budget - round(budget * margin))
        lines.append(f"Predicted peaks held to {held}: a {margin * 100:g}% margin for the estimator's error on the "
                     f"{runtime} runtime.")
    for plan, stage in zip(stages, estimate.stages):
        lines.append(f"stage {stage.stage}: predicted peak {human(stage.peak.peak)}, overhead {stage.overhead:.1%}: "
                     + describe(plan.layers, [option.choice for option in plan.options],
                                [option.prefetch for option in plan.options]))
    for name, reference in references.items():
        lines.append(f"for comparison, {name}: " + ", ".join(
            f"stage {stage.stage} peak {human(stage.peak.peak)}, overhead {stage.overhead:.1%}"
            for stage in reference.stages))
    size = human(budget).replace(" ", "")
    lines.append(f"Check: python -m mf_memopt estimate THIS.yaml --runtime {runtime} --device-memory {size}")
    return lines


def _cpu_layer_kind_issues(source: Source, plan: Plan, model: ModelSpec) -> list[ConfigIssue]:
    """The cpu planner's terms assume layers of one kind, each on its own: layers of two kinds (dense first layers)
    and MTP layers (which follow the last layer's choice) are planned with the ascend runtime only."""
    keys = plan.family.keys
    found = []
    if model.dense_layers:
        found.append(("first_k_dense_replace", "dense first layers and MoE layers"))
    if model.mtp_layers:
        found.append(("num_nextn_predict_layers", "MTP layers, which take the last layer's choice"))
    return [source.issue((*keys.num_layers[:-1], key), f"auto --runtime cpu plans layers of one kind, each on its "
                         f"own; this model has {what}", "plan it with the ascend runtime, or estimate a plan of "
                         "your own with `estimate --runtime cpu` and `--measure`") for key, what in found]
