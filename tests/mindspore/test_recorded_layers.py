"""`validate` matches patterns against the family's recorded decoder layer, as `apply` does against the built one: the
recorded layers are the ones MindFormers builds, and both report the same problems."""

from __future__ import annotations

import json

import pytest
from recorded_cases import LLAMA_CPU, model_yaml

from mf_memopt import ConfigError, load_plan
from mf_memopt.config.layer_check import layer_issues
from mf_memopt.document.source import parse_yaml
from mf_memopt.config.family_rules import rules_of
from mf_memopt.models.llama import LLAMA
from mf_memopt.models.llama import layers as llama_layers


def test_the_recorded_layers_are_the_ones_mindformers_builds():
    recorded = json.loads(llama_layers.LAYERS.read_text())
    assert llama_layers.record_all() == recorded


def test_validate_and_apply_report_the_same_problems(tmp_path):
    """The recorded layer gives the problems apply finds on the built model, word for word."""
    from mindformers.models.llama import LlamaConfig, LlamaForCausalLM

    from mf_memopt import apply_plan

    path = tmp_path / "untyped.yaml"     # no model type: load_plan leaves the patterns to apply
    path.write_text(model_yaml(["num_layers: 4"]))
    plan = load_plan(path)
    model = LlamaForCausalLM(LlamaConfig(num_layers=4, hidden_size=64, num_heads=4, vocab_size=128, seq_length=32,
                                         use_flash_attention=False, fused_rms_norm=False))
    with pytest.raises(ConfigError) as raised:
        apply_plan(plan, model)
    source = parse_yaml(model_yaml(LLAMA_CPU), str(path))
    static = layer_issues(plan, rules_of(LLAMA).layer_tree(source))
    assert ConfigError(static).render() == raised.value.render()
