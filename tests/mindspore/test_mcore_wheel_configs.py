"""The dense mcore training YAMLs the mindformers 1.9 wheel ships (`site-packages/configs/`) validate, plan and
estimate unchanged; those that leave the model's shape to `pretrained_model_dir` are read with its config.json, and
without one get one error naming the file."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from mf_memopt import load_plan
from mf_memopt.document.errors import ConfigError
from mf_memopt.estimate import estimate_config
from mf_memopt.estimate.memory import stage_parameters


WHEEL = Path(importlib.util.find_spec("mindformers").origin).parents[1] / "configs"
EXPLICIT = {"qwen3/pretrain_qwen3_32b_4k.yaml": (64, 4), "telechat3/pretrain_telechat3_36b.yaml": (64, 2)}
FROM_DIRECTORY = ("qwen3/finetune_qwen3.yaml", "general/llm_pretrain_dense_template.yaml",
                  "general/llm_finetune_dense_template.yaml")
# Qwen3-32B's Hugging Face config.json, the keys the plan and the estimate read
QWEN3_32B = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 5120,
             "intermediate_size": 25600, "num_hidden_layers": 64, "num_attention_heads": 64,
             "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936, "max_position_embeddings": 40960,
             "tie_word_embeddings": False}


@pytest.mark.parametrize("name", EXPLICIT)
def test_the_wheels_dense_pretrain_yamls_validate_plan_and_estimate(name):
    plan = load_plan(WHEEL / name)
    assert (plan.num_layers, plan.layout.stages) == EXPLICIT[name]
    assert plan.family.name == "mcore"
    estimate = estimate_config(WHEEL / name)          # the ascend runtime: bfloat16, pipeline stages
    assert [stage.layers for stage in estimate.stages] == [tuple(layer.layer for layer in plan.layers
                                                                  if layer.stage == stage)
                                                            for stage in range(plan.layout.stages)]
    assert all(0 < stage.peak.peak < 80 * 2**30 for stage in estimate.stages)


@pytest.mark.parametrize("name", FROM_DIRECTORY)
def test_a_shape_left_to_pretrained_model_dir_is_read_from_its_config_json(name, tmp_path):
    model = tmp_path / "Qwen3-32B"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(QWEN3_32B))
    text = (WHEEL / name).read_text()
    written = tmp_path / Path(name).name
    written.write_text("\n".join(f'pretrained_model_dir: "{model}"' if line.startswith("pretrained_model_dir:")
                                 else line for line in text.splitlines()) + "\n")
    plan = load_plan(written)
    assert plan.num_layers == 64
    assert estimate_config(written).model.heads == 64


@pytest.mark.parametrize("name", FROM_DIRECTORY)
def test_without_the_directory_one_error_names_the_file(name):
    with pytest.raises(ConfigError) as error:
        load_plan(WHEEL / name)
    (issue,) = error.value.issues
    assert issue.path == "model.model_config"
    assert "the model's shape is left to pretrained_model_dir's" in issue.message and "config.json" in issue.message


MOE = {"qwen3_moe/pretrain_qwen3_30b_a3b_4k.yaml": (48, 4)}
# multi-latent attention, dense first layers and an MTP layer: (layers, stages, experts per device of an MoE layer)
MLA = {"deepseek3/pretrain_deepseek3_671b.yaml": (61, 8, 256 // 32),
       "deepseek3/pretrain_deepseek3_12b_16p_pp16.yaml": (16, 16, 64)}


@pytest.mark.parametrize("name", MOE)
def test_the_wheels_qwen3_moe_yaml_estimates_and_counts_its_experts(name):
    plan = load_plan(WHEEL / name)
    assert (plan.num_layers, plan.layout.stages) == MOE[name]
    estimate = estimate_config(WHEEL / name)
    model, parallel = estimate.model, estimate.parallel
    assert (model.experts, model.top_k, model.moe_ffn, parallel.expert) == (128, 8, 768, 4)
    # each rank holds 128 / 4 experts of each of its 12 layers: more than the attention, the vocabulary aside
    experts = 12 * model.expert_params // parallel.expert
    assert experts < estimate.stages[1].parameters < experts * 1.2
    assert all(0 < stage.peak.peak < 80 * 2**30 for stage in estimate.stages)


@pytest.mark.parametrize("name", MLA)
def test_the_wheels_deepseek_yamls_estimate_dense_and_moe_layers_and_the_mtp_layer(name):
    layers, stages, local_experts = MLA[name]
    plan = load_plan(WHEEL / name)
    assert (plan.num_layers, plan.layout.stages) == (layers, stages)
    estimate = estimate_config(WHEEL / name)
    model, parallel = estimate.model, estimate.parallel
    assert model.mla and model.mtp_layers == 1 and model.dense_layers in (1, 3)
    assert model.experts // parallel.expert == local_experts
    saved = {layer.label: layer.effect.bytes() for layer in estimate.layers}
    # a dense first layer keeps less than an MoE layer; the MTP layer (an MoE layer and its own inputs) more
    assert saved["0"] < saved[str(model.dense_layers)] < saved["mtp.0"]
    assert [layer.label for layer in estimate.layers if layer.stage == stages - 1][-1] == "mtp.0"
    # the last stage holds the MTP layer's parameters: more than a stage of as many decoder layers alone
    last = estimate.stages[-1]
    alone = stage_parameters(model, parallel, last.layers, first=False, last=False)
    assert last.parameters > alone + model.vocab * model.hidden // parallel.tensor
    assert all(0 < stage.peak.peak < 128 * 2**30 for stage in estimate.stages)


def test_the_wheels_telechat3_moe_yaml_is_refused_for_the_offsets_mindformers_refuses():
    # 45 layers on 8 stages with offset 0: MindFormers' LayerSetting stops ("The sum of `offset` (0) should equal to
    # remainder of `num_layers` (45) % (pp (8) * pp_interleave_num (1)) = 5"), and so does validate, first
    with pytest.raises(ConfigError) as error:
        load_plan(WHEEL / "telechat3_moe/pretrain_telechat3_105b_a4b_4k.yaml")
    assert [issue.path for issue in error.value.issues] == ["model.model_config.offset"]
    (issue,) = error.value.issues
    assert issue.message.endswith("(pipeline_stage (8) * pp_interleave_num (1)) = 5")
    assert issue.hint.startswith("make the offsets add up to 5")
