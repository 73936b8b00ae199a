"""`validate` matches patterns against the family's recorded decoder layer, as `apply` does against the built one."""

from __future__ import annotations

import json

import pytest
from recorded_cases import LLAMA_CPU, model_yaml

from mf_memopt import ConfigError, load_plan
from mf_memopt.document.source import parse_yaml
from mf_memopt.config.family_rules import rules_of
from mf_memopt.models.llama import LLAMA
from mf_memopt.models.llama import layers as llama_layers


def test_validate_refuses_patterns_the_recorded_layer_does_not_have(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(model_yaml(LLAMA_CPU))
    with pytest.raises(ConfigError) as raised:
        load_plan(path)
    rendered = [issue.render().replace(str(path), "bad.yaml") for issue in raised.value.issues]
    assert rendered[0].startswith("bad.yaml:9: recompute_config.select_comm_recompute: pattern `.*\\.norm` matches "
                                  "nothing in layers 0, 1, 2, 3: segment `norm` matched nothing in ffn_norm, "
                                  "attention_norm, attention, feed_forward; names there: cast, mul, mul2, ")
    assert rendered[0].endswith("(the default comm pattern names RmsNorm's fused `norm` operator, which exists only "
                                "with model.model_config.fused_rms_norm: True (not on CPU); name the operators "
                                "instead, e.g. 'attention_norm\\.mul2')")
    assert rendered[1:] == [
        "bad.yaml:10: recompute_config.select_recompute_exclude[0]: pattern `feed_forward` names only cells in "
        "layers 0, 1, 2, 3 (feed_forward), but select_recompute_exclude sets an attribute of primitive operators "
        "(name operators inside, e.g. `feed_forward\\.<operator>`)",
        "bad.yaml:14: compress_config.op_compress[0]: pattern `feed_forward\\.mul` names the operator "
        "feed_forward.mul in layers 1, 2; op_compress names Linear cells, whose saved input it compresses (name "
        "the cell, e.g. 'feed_forward\\.w2')"]


def test_a_pattern_that_matches_nothing_gets_a_did_you_mean(tmp_path):
    path = tmp_path / "typo.yaml"
    path.write_text(model_yaml(LLAMA_CPU, "recompute_config:\n  select_recompute: ['feed_forwrd\\.w1']\n"))
    with pytest.raises(ConfigError) as raised:
        load_plan(path)
    (issue,) = raised.value.issues
    assert (issue.path, issue.hint) == ("recompute_config.select_recompute[0]", "did you mean `feed_forward`?")
    assert "matches nothing in layers 0, 1, 2, 3: segment `feed_forwrd` matched nothing in the layer" in issue.message


@pytest.mark.parametrize("model", [
    ["num_layers: 4"],                                          # no model type: not known to be a Llama
    ["type: GLMConfig", "num_layers: 4"],                       # another legacy model
    [*LLAMA_CPU, "use_past: True"],                             # an inference layer: not recorded
])
def test_without_a_recorded_layer_patterns_wait_for_the_built_model(model, tmp_path):
    path = tmp_path / "unknown.yaml"
    path.write_text(model_yaml(model))
    assert load_plan(path).num_layers == 4


def test_every_variant_of_the_structure_keys_is_recorded():
    recorded = json.loads(llama_layers.LAYERS.read_text())
    assert len(recorded) == 2 ** len(llama_layers.STRUCTURE)
    for flash in (False, True):
        source = parse_yaml(f"model:\n  model_config:\n    type: LlamaConfig\n    use_flash_attention: {flash}\n",
                            "m.yaml")
        tree = rules_of(LLAMA).layer_tree(source)
        assert ("flash_attention" in tree._cells["attention"]._cells) is flash
