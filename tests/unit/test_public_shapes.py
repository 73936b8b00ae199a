"""Shapes of public MindFormers YAMLs that MindFormers accepts: mf_memopt accepts them too, says what it read,
and plans them as it plans the same YAML without the cause; estimate says in one line what it does not model.

`tests/data/public_shapes/<name>.expected` holds what `python -m mf_memopt validate` prints for `<name>.yaml`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mf_memopt import load_plan
from mf_memopt.cli import main

ROOT = Path(__file__).resolve().parents[2]
SHAPES = ROOT / "tests" / "data" / "public_shapes"

# name -> (what the YAML has, the same YAML without the cause): both plan alike
WITHOUT_THE_CAUSE = {
    "duplicate_keys_outside_the_sections": ("    qk_layernorm: False\n    use_flash_attention: True\n",
                                            "    use_flash_attention: True\n"),
    "offset_written_as_a_float": ("    offset: 0.0\n", "    offset: 0\n"),
    "deepseek3_with_an_mtp_layer": ("    num_layers: 61\n    mtp_depth: 1\n", "    num_layers: 62\n"),
    "telechat_ffn_dim_multiplier_as_a_width": ("    ffn_dim_multiplier: 12288\n", ""),
}


@pytest.fixture(autouse=True)
def _at_repository_root(monkeypatch):
    monkeypatch.chdir(ROOT)


@pytest.mark.parametrize("path", sorted(SHAPES.glob("*.yaml")), ids=lambda path: path.stem)
def test_a_public_shape_validates_and_says_what_it_read(path, capsys):
    assert main(["validate", str(path.relative_to(ROOT))]) == 0
    out, err = capsys.readouterr()
    assert err + out == path.with_suffix(".expected").read_text()


@pytest.mark.parametrize("name", sorted(WITHOUT_THE_CAUSE))
def test_a_public_shape_plans_as_the_same_yaml_without_the_cause(name, tmp_path):
    text = (SHAPES / f"{name}.yaml").read_text()
    cause, fixed = WITHOUT_THE_CAUSE[name]
    assert cause in text
    (tmp_path / "fixed.yaml").write_text(text.replace(cause, fixed, 1).replace("do_eval: False\nrecompute", "recompute"))
    assert load_plan(SHAPES / f"{name}.yaml").to_dict()["layers"] == load_plan(tmp_path / "fixed.yaml").to_dict()["layers"]


@pytest.mark.parametrize(("model", "line"), [
    ("model:\n  model_config:\n    type: ChatGLM2Config\n    num_layers: 28\n    hidden_size: 4096\n",
     "glm.yaml:3: model.model_config.type: `ChatGLM2Config` is not modelled: the estimate of MindFormers' legacy "
     "models covers the dense Llama (LlamaConfig) only, and does not price another model as one (validate, plan "
     "and the launcher apply to it; measure its memory by training it)"),
    ("model:\n  model_config:\n    type: LlamaConfig\n    num_layers: 32\n    hidden_size: 4096\n    num_heads: 32\n"
     "    vocab_size: 32000\n    seq_length: 4096\nmoe_config:\n  expert_num: 8\n",
     "glm.yaml:10: moe_config.expert_num: a legacy MoE model (8 experts) is not modelled: the estimate of "
     "MindFormers' legacy models covers the dense Llama only (validate, plan and the launcher apply to it; measure "
     "its memory by training it)"),
])
def test_estimate_says_in_one_line_what_it_does_not_model(model, line, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "glm.yaml").write_text(model)
    assert main(["validate", "glm.yaml"]) == 0
    capsys.readouterr()
    assert main(["estimate", "glm.yaml"]) == 1
    assert capsys.readouterr().err.splitlines() == [line]
