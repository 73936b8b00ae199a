"""Build the MindFormers model of a training YAML with MindFormers' own recompute and swap off.

Exactly one implementation may set recompute and offload attributes. Where MindFormers sets
them while it builds a model depends on the model family, which turns every one of those
places off (`apply.family.Backend.prepare_build`) and installs what the backend lacks once the model
is built (`Backend.after_build`); mf_memopt's plan is applied afterwards.
"""

from __future__ import annotations

import copy
import logging
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..apply.family import backend_of
from ..apply.logs import LOGGER
from ..family import ModelFamily


@dataclass
class BuiltModel:
    network: Any
    config: Any                      # the MindFormerConfig, with the sections turned off
    replaced: list[str] = field(default_factory=list)   # cells replaced by stand-ins the backend can run


def read_config(path: str | Path) -> Any:
    """MindFormers' own reading of a YAML file (tests compare with it; runs use `mindformers_config`)."""
    from mindformers.tools.register import MindFormerConfig

    return MindFormerConfig(str(path))


def mindformers_config(data: dict) -> Any:
    """The MindFormerConfig of an already read YAML (base_config merged), as MindFormers makes it from the file:
    top-level keys sorted, the run mode's template applied. The file is not read again, so what the plan and
    the Trainer see is one reading of it."""
    from mindformers.tools.register import MindFormerConfig
    from mindformers.tools.register.template import ConfigTemplate

    cfg_dict = copy.deepcopy(dict(sorted(data.items())))
    ConfigTemplate.apply_template(cfg_dict)
    return MindFormerConfig(**cfg_dict)


def build_model(config: Any, family: ModelFamily, *, device_target: str) -> BuiltModel:
    """Build `config.model` (MindFormers' build_network) without MindFormers' recompute/swap."""
    from mindformers.core.parallel_config import build_parallel_config
    from mindformers.models.build_model import build_network

    backend_of(family).prepare_build(config, device_target, LOGGER.info)
    with _mindformers_quiet():
        build_parallel_config(config)
        network = build_network(config.model, default_args={"parallel_config": config.parallel_config,
                                                            "moe_config": config.moe_config})
    replaced = backend_of(family).after_build(network, config, device_target, LOGGER.info)
    unshare_layers(network, family, LOGGER.info)
    return BuiltModel(network=network, config=config, replaced=replaced)


def unshare_layers(network: Any, family: ModelFamily, log) -> list[str]:
    """Give every decoder layer (and every layer that follows the last) its own copy of an operator object
    MindFormers shares between them, so that a mark the plan sets for one layer stays in that layer; the
    layer-relative paths of the shared ones. Part of the build: `apply_plan` refuses a mark on a shared object."""
    backend = backend_of(family)
    shared = backend.unshare((backend.decoder_layers(network) or []) + backend.follower_layers(network))
    if shared:
        log(f"MindFormers shares {len(shared)} operator object(s) between the decoder layers ({', '.join(shared)}): "
            "each layer now has its own copy, so that a mark set for one layer stays in that layer")
    return shared


@contextmanager
def _mindformers_quiet():
    """Hide MindFormers' INFO lines while it builds: with its sections off it would still print its own
    (all-zero) `Formative ...` lines, next to mf_memopt's, for users who grep them."""
    from mindformers.tools.logger import get_logger

    mindformers_logger = get_logger()
    level = mindformers_logger.level
    mindformers_logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        mindformers_logger.setLevel(level)
