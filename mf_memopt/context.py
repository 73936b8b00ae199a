"""MindSpore context for a training run: device, graph mode, and data parallelism under msrun."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from .logs import LOGGER

# Applied on every backend; everything else in `context:` is passed through on Ascend only.
PORTABLE_KEYS = ("mode", "max_call_depth", "jit_config", "memory_optimize_level")
IGNORED_KEYS = ("device_target", "device_id")


@dataclass(frozen=True)
class RunContext:
    device_target: str
    rank: int = 0
    world_size: int = 1


def setup_context(section: dict[str, Any] | None, *, use_parallel: bool) -> RunContext:
    import mindspore as ms

    section = dict(section or {})
    device = _device_target(ms, section.get("device_target", "CPU"))
    ms.set_context(device_target=device, **{key: section[key] for key in PORTABLE_KEYS if key in section})
    others = {key: value for key, value in section.items() if key not in (*PORTABLE_KEYS, *IGNORED_KEYS)}
    if device == "Ascend":
        ms.set_context(**others)
    elif others:
        LOGGER.warning(f"context keys {', '.join(sorted(others))} only apply on Ascend: not set on {device}")
    ms.set_seed(0)
    return _distributed(ms, device) if use_parallel else RunContext(device_target=device)


def _device_target(ms: Any, wanted: str) -> str:
    try:
        ms.set_context(device_target=wanted)
    except (RuntimeError, ValueError) as error:
        LOGGER.warning(f"context.device_target is {wanted}, which this MindSpore cannot use ({error}); "
                       "running on CPU instead")
        return "CPU"
    return wanted


def _distributed(ms: Any, device: str) -> RunContext:
    from mindspore.communication import get_group_size, get_rank, init

    if "MS_ROLE" not in os.environ and "RANK_TABLE_FILE" not in os.environ:
        raise SystemExit("--use_parallel True needs a distributed launcher: run it through "
                         "scripts/msrun_launcher.sh (or msrun)")
    init()
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
    context = RunContext(device_target=device, rank=get_rank(), world_size=get_group_size())
    LOGGER.info(f"data parallel training: rank {context.rank} of {context.world_size} on {device}")
    return context


def lazy_inline_policy(swap: bool, pipeline_stages: int, device: str) -> None:
    """Seed 001: without pipeline parallelism, swap needs lazy_inline (ENABLE_LAZY_INLINE_NO_PIPELINE=1)."""
    if not swap or pipeline_stages > 1:
        return
    if device == "Ascend":
        if os.environ.get("ENABLE_LAZY_INLINE_NO_PIPELINE") != "1":
            os.environ["ENABLE_LAZY_INLINE_NO_PIPELINE"] = "1"
            LOGGER.info("swap without pipeline parallelism: set ENABLE_LAZY_INLINE_NO_PIPELINE=1 (lazy_inline on)")
        return
    LOGGER.info(f"lazy_inline stays off on {device}: the {device} backend cannot run lazy_inline graphs. "
                "Swap only takes effect on Ascend, inside lazy_inline cells")
