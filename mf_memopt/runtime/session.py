"""Everything before the first training step: plan, checks, context, model, applied plan.

Shared by the training launcher and by `verify`, which compiles the same training step
without running it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..apply.execute import ApplyReport, apply_plan
from ..apply.logs import LOGGER
from ..config.device import device_of
from ..config.layout import Layout
from ..config.load import Document, load_document
from ..config.plan import Plan
from ..document.errors import raise_if_errors
from ..document.source import Source
from .build import BuiltModel, build_model, mindformers_config
from .context import RunContext, lazy_inline_policy, setup_context
from .data import GENERATED, ensure_dataset
from .device import require_loadable, require_pipeline_support
from .environment import msrun_workers
from .training_checks import training_issues


@dataclass(frozen=True, slots=True, kw_only=True)
class Overrides:
    """Command-line values that replace the YAML's (None: keep the YAML's)."""

    use_parallel: bool | None = None
    output_dir: str | None = None
    load_checkpoint: str | None = None
    resume_training: bool | str | None = None
    train_dataset_dir: str | None = None
    device_id: int | None = None
    seed: int | None = None
    epochs: int | None = None


@dataclass
class Session:
    plan: Plan
    source: Source
    config: Any                     # MindFormerConfig, as the Trainer will read it
    run: RunContext
    built: BuiltModel
    report: ApplyReport
    generated: list[Path] = field(default_factory=list)

    @property
    def network(self) -> Any:
        return self.built.network


def preflight(document: Document, *, strict: bool = False, overrides: Overrides = Overrides()) -> Plan:
    """What a run checks before it writes or builds anything: the YAML and its plan (the device a supported one),
    then the device loadable here and pipeline parallelism on it. Raises one ConfigError, or LaunchError for what
    the machine cannot do."""
    plan = document.planned(strict=strict)
    source = document.source
    device = device_of(source)
    require_loadable(device)
    require_pipeline_support(plan.layout.stages, device, use_parallel=_parallel(source, overrides), config=source.file)
    return plan


def check(document: Document, *, strict: bool = False, overrides: Overrides = Overrides(),
          plan: Plan | None = None) -> Plan:
    """`preflight` (unless its `plan` is given), then the training sections; raises one ConfigError."""
    plan = plan or preflight(document, strict=strict, overrides=overrides)
    source = document.source
    raise_if_errors(training_issues(document, device_target=device_of(source).target,
                                    use_parallel=_parallel(source, overrides), dataset_dir=overrides.train_dataset_dir))
    return plan


def prepare(config: str | Path | Source | Document, *, strict: bool = False, overrides: Overrides = Overrides(),
            plan: Plan | None = None) -> Session:
    """Check the YAML, set the context, build the model with MindFormers' own handling off, apply the plan.

    `config` is read once (a path) or has been (a Document, or a Source): the plan and MindFormers' Trainer use
    that one reading.
    """
    document = load_document(config)
    plan = check(document, strict=strict, overrides=overrides, plan=plan)
    return assemble(document, plan, overrides)


def assemble(document: Document, plan: Plan, overrides: Overrides, *, build_for: str | None = None) -> Session:
    """Everything `prepare` does after the checks: the dataset, the context, the model, the applied plan.

    `build_for` is the device the model is built and marked for when it is not the context's: the test of the
    pipeline path (`tests/children/pipeline_precompile.py`) builds for Ascend on CPU, up to MindSpore's compile."""
    source = document.source
    use_parallel = _parallel(source, overrides)
    workers = msrun_workers()
    if workers > 1 and not use_parallel:
        LOGGER.warning(f"{workers} workers train the same model independently because use_parallel is False; "
                       f"each writes under its own worker_<id> directory (this one: {overrides.output_dir}); "
                       "pass --use_parallel True for data-parallel training")
    generated = ensure_dataset(document, overrides.train_dataset_dir)
    if generated is not None:
        LOGGER.info(f"generated the token file {generated} ({GENERATED[0]} of {source.file})")
    config = mindformers_config(source.data)
    _apply_overrides(config, overrides)
    config.pop(GENERATED[0], None)
    run = setup_context(config, device_of(source), use_parallel=use_parallel,
                        written=list(source.get(("context",)) or {}))
    lazy_inline_policy(plan.swap, plan.layout.stages, run.device_target)
    if plan.layout.stages > 1:
        LOGGER.info(stage_line(plan.layout, run.rank, run.world_size))
    built = build_model(config, plan.family, device_target=build_for or run.device_target)
    report = apply_plan(plan, built.network, device_target=build_for or run.device_target)
    return Session(plan=plan, source=source, config=config, run=run, built=built, report=report,
                   generated=[generated] if generated else [])


def stage_line(layout: Layout, rank: int, world_size: int) -> str:
    """Which pipeline stage this worker compiles, and its layers. MindSpore gives rank r the stage
    r // (world_size / stages); every worker builds and marks every layer, as MindFormers' LayerSetting does, and
    the compile keeps the stage's."""
    stage = stage_of(rank, world_size, layout.stages)
    layers = [layer for layer in range(layout.num_layers) if layout.position(layer)[0] == stage]
    return (f"pipeline stage {stage} of {layout.stages} on rank {rank} of {world_size}: layers "
            f"{', '.join(map(str, layers))} (every layer is marked and logged below, as MindFormers' workers do; "
            "this worker compiles these)")


def stage_of(rank: int, world_size: int, stages: int) -> int:
    """The pipeline stage MindSpore gives rank `rank` of `world_size`: ranks are split into `stages` equal blocks."""
    return rank // max(world_size // stages, 1)


def _parallel(source: Source, overrides: Overrides) -> bool:
    return use_parallel_of(source, overrides.use_parallel)


def use_parallel_of(source: Source, flag: bool | None) -> bool:
    """--use_parallel when given, else use_parallel of the YAML."""
    return flag if flag is not None else bool(source.get(("use_parallel",), False))


def _apply_overrides(config: Any, overrides: Overrides) -> None:
    if overrides.output_dir is not None:
        config.output_dir = overrides.output_dir
    if overrides.load_checkpoint is not None:
        config.load_checkpoint = overrides.load_checkpoint
    if overrides.resume_training is not None:
        config.resume_training = overrides.resume_training
    if overrides.train_dataset_dir is not None:
        config.train_dataset.data_loader.dataset_dir = overrides.train_dataset_dir
        if config.train_dataset_task and config.train_dataset_task.dataset_config:
            config.train_dataset_task.dataset_config.data_loader.dataset_dir = overrides.train_dataset_dir
    if overrides.device_id is not None:
        config.context.device_id = overrides.device_id
    if overrides.seed is not None:
        config.seed = overrides.seed
    if overrides.epochs is not None:
        config.runner_config.epochs = overrides.epochs
