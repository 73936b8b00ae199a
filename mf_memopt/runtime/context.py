"""MindSpore context for a training run, set by MindFormers' own build_context.

Before MindFormers sees the config, what the machine cannot do is settled and said once:
the device is the YAML's (`config.device`: Ascend when it does not say; `session.preflight` has
stopped a run whose device cannot be loaded); Ascend-only context keys are dropped on CPU;
`--use_parallel True` on CPU gets data parallelism (`parallel.parallel_mode: 0`, gradients averaged)
when the YAML does not name a mode, because semi-auto and auto parallel do not run on CPU.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from ..apply.logs import LOGGER
from ..config.device import Device
from .environment import LAZY_INLINE_NO_PIPELINE, lazy_inline_without_pipeline, under_launcher
from .errors import LaunchError

# Applied on every backend; everything else in `context:` is passed through on Ascend only.
PORTABLE_KEYS = ("mode", "max_call_depth", "jit_config", "memory_optimize_level", "device_target", "device_id",
                 "save_graphs", "save_graphs_path")
CPU_DATA_PARALLEL = {"parallel_mode": 0, "gradients_mean": True, "full_batch": False,
                     "enable_parallel_optimizer": False}


@dataclass(frozen=True)
class RunContext:
    device_target: str
    rank: int = 0
    world_size: int = 1


def setup_context(config: Any, device: Device, *, use_parallel: bool, written: Collection[str] = ()) -> RunContext:
    """Settle device and parallel settings in `config` (a MindFormerConfig) for `device`, then build_context.

    `written` names the context keys the YAML itself has (MindFormerConfig adds template defaults,
    such as max_device_memory, that are dropped off Ascend without a word)."""
    import mindspore as ms
    from mindformers import build_context

    if config.context is None:
        config.context = {}
    config.context.device_target = device.target
    if device.cpu:
        _drop_ascend_keys(config.context, device.target, written)
    config.use_parallel = use_parallel
    if use_parallel:
        _require_launcher()
        if device.cpu:
            _cpu_data_parallel(config)
    context = build_context(config)
    ms.set_seed(int(config.seed or 0))
    run = RunContext(device_target=device.target, rank=context.rank_id, world_size=context.device_num)
    if use_parallel:
        mode = ms.get_auto_parallel_context("parallel_mode")
        LOGGER.info(f"{mode.replace('_', ' ')} training: rank {run.rank} of {run.world_size} on {device.target}")
        if mode == "data_parallel":
            _data_parallel_size(config, run.world_size)
    return run


def _drop_ascend_keys(section: Any, device: str, written: Collection[str]) -> None:
    dropped = sorted(key for key in section if key not in PORTABLE_KEYS)
    for key in dropped:
        del section[key]
    others = [key for key in dropped if key in written]
    if others:
        LOGGER.warning(f"context keys {', '.join(others)} only apply on Ascend: not set on {device}")


def _require_launcher() -> None:
    if not under_launcher():
        raise LaunchError("--use_parallel True needs a distributed launcher: run it through "
                          "scripts/msrun_launcher.sh (or msrun)")


def _cpu_data_parallel(config: Any) -> None:
    parallel = config.parallel or {}
    if parallel.get("parallel_mode") is None:
        config.parallel = {**parallel, **CPU_DATA_PARALLEL}
        LOGGER.info("parallel.parallel_mode is not set: data parallel on CPU (semi-auto and auto parallel need "
                    "Ascend or GPU)")


def _data_parallel_size(config: Any, workers: int) -> None:
    """In data parallel mode every worker holds the whole model: parallel_config.data_parallel is the number of
    workers. MindFormers resets it so for its legacy models; its mcore models refuse the mismatch instead
    ("total_model_size ... is not equal to world_size"), so it is set here for both, and said."""
    section = config.parallel_config
    if section is None:
        config.parallel_config = section = {}
    written = section.get("data_parallel", 1)
    if written != workers:
        section["data_parallel"] = workers
        LOGGER.info(f"parallel_config.data_parallel is {written}: data parallel training on {workers} workers "
                    f"runs with data_parallel {workers}")


def lazy_inline_policy(swap: bool, pipeline_stages: int, device: str) -> None:
    """Without pipeline parallelism, swap needs lazy_inline (ENABLE_LAZY_INLINE_NO_PIPELINE=1): offload takes effect
    only inside lazy_inline cells."""
    if not swap or pipeline_stages > 1:
        return
    if device == "Ascend":
        if lazy_inline_without_pipeline():
            LOGGER.info(f"swap without pipeline parallelism: set {LAZY_INLINE_NO_PIPELINE}=1 (lazy_inline on)")
        return
    LOGGER.info(f"lazy_inline stays off on {device}: the {device} backend cannot run lazy_inline graphs. "
                "Swap only takes effect on Ascend, inside lazy_inline cells")
