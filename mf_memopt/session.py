"""Everything before the first training step: plan, context, model, applied plan.

Shared by the training launcher and by `verify`, which compiles the same training graph
without running it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .apply import ApplyReport, apply_plan
from .config import plan_source
from .context import RunContext, lazy_inline_policy, setup_context
from .logs import LOGGER
from .model import BuiltModel, build_model, read_config
from .plan import Plan
from .source import load_source
from .train import batches, build_optimizer, synthetic_tokens


@dataclass
class Session:
    plan: Plan
    config: Any                     # MindFormerConfig
    run: RunContext
    built: BuiltModel
    report: ApplyReport

    @property
    def network(self) -> Any:
        return self.built.network

    def optimizer(self) -> Any:
        return build_optimizer(self.config.optimizer, self.network.trainable_params())

    def data(self):
        """This rank's batches of generated tokens (train_dataset.data_loader: SyntheticTokenDataset)."""
        model_config = self.config.model.model_config
        loader = (self.config.train_dataset or {}).get("data_loader") or {}
        if loader.get("type") != "SyntheticTokenDataset":
            LOGGER.warning(f"train_dataset ({loader.get('type')}) is not read: the launcher trains on generated "
                           "tokens")
        samples = synthetic_tokens(int(loader.get("num_samples", 32)), model_config.seq_length,
                                   model_config.vocab_size, int(loader.get("seed", 0)))
        return batches(samples, model_config.batch_size, self.run.rank, self.run.world_size)


def prepare(config_path: str | Path, *, strict: bool = False, use_parallel: bool | None = None) -> Session:
    """Validate and plan the YAML, set the context, build the model and apply the plan."""
    source = load_source(config_path)
    plan = plan_source(source, strict=strict)
    if plan.layout.stages > 1:
        raise SystemExit(f"{config_path}: pipeline_stage is {plan.layout.stages}; the launcher trains with data "
                         "parallelism only (plan pipeline configs with `python -m mf_memopt plan`)")
    if use_parallel is None:
        use_parallel = bool(source.get(("use_parallel",), False))
    workers = int(os.environ.get("MS_WORKER_NUM", "1"))
    if workers > 1 and not use_parallel:
        LOGGER.warning(f"{workers} workers train the same model independently because use_parallel is False; "
                       "pass --use_parallel True for data-parallel training")
    # The context as written: MindFormerConfig adds template defaults (max_device_memory, ...).
    run = setup_context(source.get(("context",)), use_parallel=use_parallel)
    lazy_inline_policy(plan.swap, plan.layout.stages, run.device_target)
    config = read_config(config_path)
    built = build_model(config, device_target=run.device_target)
    report = apply_plan(plan, built.network, device_target=run.device_target)
    return Session(plan=plan, config=config, run=run, built=built, report=report)
