"""The legacy Llama's decoder layer as recorded from real models, so `validate` matches patterns without MindSpore.

A Llama layer's cells depend on a few model keys (`STRUCTURE`); every combination of them is
recorded in `layers.json` from a tiny `LlamaForCausalLM` built with MindFormers 1.9. A YAML
whose model is not a plain `LlamaConfig` Llama, or sets a key that changes the layer in ways not
recorded (MoE, inference, fine-grained interleave, ...), gets no recorded layer: its patterns
are checked when the model is built.

    python -m mf_memopt.models.llama.layers     # records layers.json again (needs MindFormers)
"""

from __future__ import annotations

import itertools
import json
from functools import cache
from pathlib import Path
from typing import Any

from ...document.source import Source
from ...document.tree import RecordedCell

LAYERS = Path(__file__).with_name("layers.json")
# model keys that change the layer's cells, and LlamaConfig's defaults for them
STRUCTURE = {"use_flash_attention": False, "qkv_concat": False, "fused_rms_norm": True}
# keys that change it in ways not recorded: (key, the value that keeps the recorded layer)
UNRECORDED = {"use_past": False, "fine_grain_interleave": 1, "rmsnorm_compute_2d": False,
              "use_ring_attention": False, "parallel_decoding_params": None}
_TINY = {"num_layers": 1, "hidden_size": 64, "num_heads": 4, "n_kv_heads": 2, "vocab_size": 128, "seq_length": 32,
         "intermediate_size": 128}


def variant_of(source: Source) -> str | None:
    """The recorded variant a YAML's Llama builds, or None when its layer is not recorded."""
    model = source.get(("model", "model_config"))
    if not isinstance(model, dict) or model.get("type") != "LlamaConfig":
        return None
    if any(model.get(key, default) != default for key, default in UNRECORDED.items()):
        return None
    experts = source.get(("moe_config", "expert_num"), 1)
    if experts != 1 or isinstance(model.get("moe_config"), dict):
        return None
    values = {key: model.get(key, default) for key, default in STRUCTURE.items()}
    if not all(isinstance(value, bool) for value in values.values()):
        return None
    return _name(values)


def _name(values: dict[str, bool]) -> str:
    return ",".join(f"{key}={values[key]}" for key in STRUCTURE)


@cache
def _recorded() -> dict[str, dict]:
    return json.loads(LAYERS.read_text(encoding="utf-8"))


def layer_tree(source: Source) -> RecordedCell | None:
    variant = variant_of(source)
    if variant is None:
        return None
    recorded = _recorded().get(variant)
    return RecordedCell.from_dict(recorded) if recorded is not None else None


def record_variant(values: dict[str, bool]) -> dict:
    """Build a tiny LlamaForCausalLM with these structure keys and record its first decoder layer."""
    from mindformers.models.llama import LlamaConfig, LlamaForCausalLM

    from ...document.tree import record
    from .compression import RECORDED_ATTRIBUTES

    model = LlamaForCausalLM(LlamaConfig(**_TINY, **values))
    return record(model.model.layers[0], RECORDED_ATTRIBUTES)


def record_all() -> dict[str, Any]:
    variants = {}
    for flags in itertools.product((False, True), repeat=len(STRUCTURE)):
        values = dict(zip(STRUCTURE, flags))
        variants[_name(values)] = record_variant(values)
    return variants


if __name__ == "__main__":
    LAYERS.write_text(json.dumps(record_all(), indent=1) + "\n", encoding="utf-8")
    print(f"recorded {len(_recorded.__wrapped__())} Llama layer variants in {LAYERS}")
