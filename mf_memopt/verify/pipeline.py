"""`verify` of a pipeline config: every rank compiles its stage under msrun, and each layer is checked in the
graphs of the ranks whose stage holds it.

verify starts one msrun worker per device of the layout (data_parallel x model_parallel x context_parallel x
pipeline_stage) on this node. Each worker is the launcher's distributed run up to the first step
(`precompile ... --ranks`): MindFormers' build_context and stage assignment, mf_memopt's plan on every layer,
MindFormers' Trainer with its pipeline cell; MindSpore compiles the rank's stage and saves its IR under
`<ir>/rank_<r>/`, and the worker writes its apply report to `<reports>/rank_<r>.json`. Rank r holds the stage
`runtime.session.stage_of` gives it, as MindSpore does; the MTP layers are on the last stage.
"""

from __future__ import annotations

import json
import math
import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from ..config.device import Device
from ..config.plan import Plan
from ..document.source import Source
from ..runs import runner
from ..runtime.errors import LaunchError
from ..runtime.session import stage_of
from .ir import find_validate_ir
from .marks import LayerCheck, check_graph
from .precompile import COMPILE_ENV, RANKS, SAVE_GRAPHS_PATH

_DEVICES = ("data_parallel", "model_parallel", "context_parallel", "pipeline_stage")
WORKER = ("python", "-m", "mf_memopt.verify.precompile_child")


@dataclass(frozen=True, slots=True, kw_only=True)
class RankGraph:
    """One rank's compiled graph, as verify read it."""

    rank: int
    stage: int
    ir_path: str          # below the IR directory: rank_<r>/...
    nodes: int
    layers: list[str]     # the layers checked in it (`mtp.N` for an MTP layer)


def workers_of(source: Source) -> int:
    """The devices of the layout: the product of parallel_config's data, model, context and pipeline sizes."""
    return math.prod(int(source.get(("parallel_config", key), 1) or 1) for key in _DEVICES)


def require_devices(device: Device, workers: int, config: str) -> None:
    """`LaunchError` unless this node has a device for every worker: verify runs them all here."""
    from mindspore import hal

    here = hal.device_count(device.target)
    if here < workers:
        raise LaunchError(f"{config}: the layout needs {workers} devices (data_parallel x model_parallel x "
                          f"context_parallel x pipeline_stage) and verify runs every rank on this node, which has "
                          f"{here} {device.target} devices")


def compile_ranks(config: str | Path, ir_dir: Path, reports: Path, workers: int) -> None:
    """Compile every rank's stage under msrun, without running it; a failed worker's log tail is the error."""
    try:
        runner.compile_ranks(Path(config), reports=reports, env=compile_env(ir_dir), workers=workers,
                             worker=[*WORKER, str(config), str(reports.resolve()), RANKS])
    except runner.ChildFailed as error:
        raise LaunchError(f"{config}: {error}") from error


def compile_env(ir_dir: Path) -> dict[str, str]:
    """The workers' environment: compile without running, save the IR below `ir_dir`, msrun's `python` ours."""
    return {**os.environ, **COMPILE_ENV, SAVE_GRAPHS_PATH: str(ir_dir.resolve()),
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def check_ranks(plan: Plan, ir_dir: Path, reports: Path, workers: int) -> tuple[list[LayerCheck], list[RankGraph]]:
    """Every rank's graph against its own apply report, on the layers its stage holds (and the MTP layers on the
    last stage). A rank without its report or graph is a `LaunchError` naming the rank and the file."""
    checks, graphs = [], []
    stages = plan.layout.stages
    for rank in range(workers):
        stage = stage_of(rank, workers, stages)
        report, ir_path = _rank_files(ir_dir, reports, rank, stage, stages)
        found, nodes = check_graph(report, ir_path, plan, only=stage_layers(plan, stage),
                                   followers=stage == stages - 1)
        checks += [replace(check, stage=stage, rank=rank) for check in found]
        graphs.append(RankGraph(rank=rank, stage=stage, ir_path=ir_path.relative_to(ir_dir).as_posix(), nodes=nodes,
                                layers=[check.label for check in found]))
    return checks, graphs


def stage_layers(plan: Plan, stage: int) -> list[int]:
    """The decoder layers pipeline stage `stage` holds, over all its interleave chunks (offsets included)."""
    return [layer for layer in range(plan.num_layers) if plan.layout.position(layer)[0] == stage]


def _rank_files(ir_dir: Path, reports: Path, rank: int, stage: int, stages: int) -> tuple[dict, Path]:
    who = f"rank {rank} (pipeline stage {stage} of {stages})"
    report = reports / f"rank_{rank}.json"
    if not report.is_file():
        raise LaunchError(f"{who} wrote no apply report: {report} is missing")
    try:
        ir_path = find_validate_ir(ir_dir / f"rank_{rank}")
    except FileNotFoundError:
        raise LaunchError(f"{who} left no compiled graph: no *validate*.ir under {ir_dir / f'rank_{rank}'}") from None
    return json.loads(report.read_text()), ir_path
