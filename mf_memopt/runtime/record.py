"""What a run writes about itself: the config it trains (its one reading of the YAML, base_config merged), and
the size of what it will write (checkpoints), for the room check."""

from __future__ import annotations

from typing import Any

import yaml

from ..config.load import Document
from ..document.source import Source
from ..estimate.family import estimator_of
from ..estimate.memory import stage_parameters
from ..estimate.spec import ParallelSpec, optimizer_spec

CHECKPOINT_MONITOR = "CheckpointMonitor"
KEEP_DEFAULT = 5                         # MindFormers' CheckpointMonitor keeps 5 unless told otherwise


def record_name(rank: int, world_size: int) -> str:
    return f"run_config_rank{rank}.yaml" if world_size > 1 else "run_config.yaml"


def run_record(source: Source) -> str:
    """The config as this run read it (one reading, base_config merged): what it trains, kept beside its outputs."""
    header = f"# the config this run read from {source.file} (base_config merged), as it trained it\n"
    return header + yaml.safe_dump(_plain(source.data), sort_keys=False, allow_unicode=True)


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def checkpoints_kept(source: Source) -> int:
    """How many checkpoints the YAML's CheckpointMonitor keeps (0 without one)."""
    callbacks = source.get(("callbacks",)) or []
    for callback in callbacks if isinstance(callbacks, list) else []:
        if isinstance(callback, dict) and callback.get("type") == CHECKPOINT_MONITOR:
            kept = callback.get("keep_checkpoint_max", KEEP_DEFAULT)
            return kept if isinstance(kept, int) and kept > 0 else KEEP_DEFAULT
    return 0


def checkpoint_bytes(document: Document) -> int | None:
    """One checkpoint of the model: its parameters and its optimizer states; None when the family cannot size it."""
    source = document.source
    model = estimator_of(document.family).model_spec(source, [])
    if model is None:
        return None
    optimizer = optimizer_spec(source)
    params = stage_parameters(model, ParallelSpec(), range(model.num_layers), True, True)
    return params * (model.param_bytes + optimizer.state_bytes)
