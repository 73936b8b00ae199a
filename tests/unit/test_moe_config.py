"""MoE and DeepSeek-V3 YAMLs at the config stage: the checks MindFormers makes only while it builds the model,
reported by `validate` first, one row per problem (the key path and the words the user sees)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from mf_memopt import load_plan
from mf_memopt.document.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
QWEN3_MOE = ROOT / "configs" / "qwen3_moe_tiny.yaml"
DEEPSEEK = ROOT / "configs" / "deepseek3_tiny.yaml"

ROWS = [
    (QWEN3_MOE, {"num_experts_per_tok": 8}, {}, "model.model_config.num_experts_per_tok",
     "each token is routed to 8 experts, but the model has 4"),
    (QWEN3_MOE, {"num_experts_per_tok": 1, "moe_router_pre_softmax": False}, {}, "model.model_config.num_experts_per_tok",
     "one expert per token with the softmax router needs the softmax before the top-k"),
    (QWEN3_MOE, {"add_bias_linear": True}, {}, "model.model_config.add_bias_linear",
     "MindFormers' MoE layers have no linear biases"),
    (QWEN3_MOE, {}, {"expert_parallel": 3}, "parallel_config.expert_parallel",
     "num_experts (4) is not a multiple of expert_parallel (3)"),
    (DEEPSEEK, {"first_k_dense_replace": 5}, {}, "model.model_config.first_k_dense_replace",
     "5 dense layers asked, but the model has 4"),
    (DEEPSEEK, {"n_group": 3}, {}, "model.model_config.n_group", "4 experts do not split into 3 groups"),
    (DEEPSEEK, {"topk_group": 3, "num_experts_per_tok": 3}, {}, "model.model_config.topk_group",
     "the best 3 of 2 groups asked"),
    (DEEPSEEK, {"n_routed_experts": 8, "n_group": 4, "topk_group": 2, "num_experts_per_tok": 3}, {},
     "model.model_config.num_experts_per_tok", "3 experts per token do not split evenly over the 2 groups"),
]


def _write(tmp_path: Path, base: Path, model: dict, parallel: dict) -> Path:
    data = yaml.safe_load(base.read_text())
    data["model"]["model_config"].update(model)
    data["parallel_config"].update(parallel)
    path = tmp_path / base.name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.parametrize(("base", "model", "parallel", "path", "words"), ROWS,
                         ids=[f"{row[0].stem}-{row[3].rsplit('.', 1)[1]}-{index}" for index, row in enumerate(ROWS)])
def test_a_moe_key_mindformers_would_stop_on_is_one_error(tmp_path, base, model, parallel, path, words):
    with pytest.raises(ConfigError) as error:
        load_plan(_write(tmp_path, base, model, parallel))
    (issue,) = error.value.issues
    assert (issue.path, issue.severity) == (path, "error") and words in issue.message, issue
    assert issue.line is not None and issue.hint


def test_multi_latent_attention_reads_no_key_value_heads(tmp_path):
    # DeepseekV3Config's 128 key/value heads with 4 heads: MindFormers builds it, and so validate passes it
    assert load_plan(_write(tmp_path, DEEPSEEK, {"num_key_value_heads": 128}, {})).num_layers == 4
    with pytest.raises(ConfigError) as error:          # a grouped-query model is still checked
        load_plan(_write(tmp_path, QWEN3_MOE, {"num_key_value_heads": 3}, {}))
    assert "is not a multiple of num_key_value_heads (3)" in error.value.issues[0].message
