"""YAML for the recorded-layer tests: a legacy Llama's model section with patterns that name cells it lacks."""

from __future__ import annotations

BAD_PATTERNS = """\
recompute_config:
  select_recompute: ['feed_forward\\.w4', 'attention\\.wq']
  select_comm_recompute: True
  select_recompute_exclude: ['feed_forward']
compress_config:
  compress: True
  op_compress:
    - op_name: 'feed_forward\\.mul'
      method: int8
      layers: [1, 2]
"""
LLAMA_CPU = ["type: LlamaConfig", "num_layers: 4", "use_flash_attention: False", "fused_rms_norm: False"]


def model_yaml(model: list[str], sections: str = BAD_PATTERNS) -> str:
    """A YAML of the model keys `model` (one `key: value` each) and `sections`."""
    return "model:\n  model_config:\n" + "".join(f"    {line}\n" for line in model) + sections


def plain(value):
    """`value` with every mapping and list as a plain dict and list (MindFormers' config classes subclass them)."""
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain(item) for item in value]
    return value
