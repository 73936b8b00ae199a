"""`base_config`: what a config inherits is validated too, and errors point into the file that holds the value.

The merge follows MindFormers (`MindFormerConfig._file2dict`): paths relative to the file that
names them, bases combined section by section (a later base replaces a whole section), then
the file merged in key by key. These tests compare with MindFormers' own loader.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from recorded_cases import plain

from mf_memopt.document.source import load_source


def _files(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_merged_data_is_mindformers_own(tmp_path):
    from mindformers.tools.register.config import MindFormerConfig

    _files(tmp_path, {
        "lib/model.yaml": "model:\n  model_config:\n    num_layers: 4\n    hidden_size: 64\n  arch: {type: X}\n"
                          "context: {mode: 0}\n",
        "lib/train.yaml": "base_config: model.yaml\nrecompute_config:\n  recompute: true\ncontext: {jit_level: O0}\n",
        "other.yaml": "model:\n  model_config:\n    num_layers: 2\nrunner_config: {batch_size: 2}\n",
        "run/child.yaml": "base_config: [../lib/train.yaml, ../other.yaml]\nmodel:\n  model_config:\n    num_heads: 4\n"
                          "recompute_config:\n  select_recompute: ['feed_forward']\n",
    })
    path = str(tmp_path / "run/child.yaml")
    ours = load_source(path).data
    theirs = MindFormerConfig._file2dict(path)
    assert plain(ours) == plain(theirs)
    assert ours["model"]["model_config"] == {"num_layers": 2, "num_heads": 4}


@pytest.mark.parametrize("config", ["configs/llama_tiny.yaml", "configs/planning/llama2_7b_swap_pp2.yaml", "child"])
def test_the_trainer_config_made_from_one_reading_is_mindformers_own(config, tmp_path):
    """The launcher reads the YAML once and builds MindFormers' config from that reading: it equals the config
    MindFormers reads from the file itself (base_config merged, template applied)."""
    from mf_memopt.runtime.build import mindformers_config, read_config

    root = Path(__file__).resolve().parents[2]
    if config == "child":
        _files(tmp_path, {"base.yaml": (root / "configs/llama_tiny.yaml").read_text(),
                          "run/child.yaml": "base_config: ../base.yaml\nrecompute_config:\n  recompute: True\n"})
        path = tmp_path / "run/child.yaml"
    else:
        path = root / config
    ours = mindformers_config(load_source(path).data)
    assert plain(ours) == plain(read_config(path))
    assert list(ours) == list(read_config(path))
