"""MindFormers 1.9's own models (mcore, `use_legacy: False`) at the config stage: their keys, their two swap
spellings, MindFormers' default patterns for them, and the errors a Qwen3 YAML gets."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from mf_memopt import load_plan
from mf_memopt.cli import main
from mf_memopt.document.errors import ConfigError
from mf_memopt.document.source import load_source
from mf_memopt.family import family_of
from mf_memopt.models.llama import LLAMA
from mf_memopt.models.mcore import MCORE

ROOT = Path(__file__).resolve().parents[2]
QWEN3 = ROOT / "configs" / "qwen3_tiny.yaml"


def _write(tmp_path: Path, change) -> Path:
    data = yaml.safe_load(QWEN3.read_text())
    change(data)
    path = tmp_path / "qwen3.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _model(data: dict) -> dict:
    return data["model"]["model_config"]


def _errors(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as error:
        load_plan(path)
    return [f"{issue.path}: {issue.message}" for issue in error.value.issues]


def test_use_legacy_false_picks_the_mcore_family():
    assert family_of(load_source(QWEN3)) is MCORE
    assert family_of(load_source(ROOT / "configs" / "llama_tiny.yaml")) is LLAMA
    assert family_of(load_source({"use_legacy": True})) is LLAMA


def test_the_shipped_qwen3_validates_and_recomputes_the_mlp_of_every_layer(capsys):
    assert main(["validate", str(QWEN3)]) == 0
    out = capsys.readouterr().out
    assert "4 layers in 1 pipeline stage x 1 chunk; layers with full recompute: 0, select recompute: 4" in out
    plan = load_plan(QWEN3)
    assert [[use.pattern for use in layer.select_recompute] for layer in plan.layers] == [["mlp"]] * 4


@pytest.mark.parametrize(("change", "expected"), [
    (lambda d: _model(d).update(num_layers=4),
     "model.model_config.num_layers: num_hidden_layers and num_layers are one key to MindFormers "
     "(`num_hidden_layers`); giving both stops its build (Mapping Conflicts)"),
    (lambda d: (_model(d).pop("num_attention_heads"), _model(d).update(num_heads=4)),
     "model.model_config.num_heads: `num_heads` conflicts with `num_attention_heads`, which Qwen3ForCausalLM's "
     "config always sets (default 32): MindFormers stops its build (Mapping Conflicts)"),
    (lambda d: _model(d).update(select_recompute=True),
     "model.model_config.select_recompute: MindFormers refuses recompute keys in model_config for mcore models "
     "(its converter stops the build)"),
    (lambda d: _model(d).update(cpu_offloading=True),
     "model.model_config.cpu_offloading: cpu_offloading conflicts with `swap`, which MindFormers always sets for "
     "mcore models (Mapping Conflicts)"),
    (lambda d: _model(d).update(swap=True),
     "model.model_config.swap: swap is set twice: in the top-level swap_config and in model.model_config (swap)"),
    (lambda d: _model(d).update(architectures=["Qwen9ForCausalLM"]),
     "model.model_config.architectures: `Qwen9ForCausalLM` is not one of the mcore models MindFormers 1.9 trains"),
    (lambda d: _model(d).update(num_key_value_heads=3),
     "model.model_config.num_key_value_heads: num_attention_heads (4) is not a multiple of num_key_value_heads (3)"),
    (lambda d: _model(d).update(num_hidden_layers=0),
     "model.model_config.num_hidden_layers: must be >= 1, got 0"),
    (lambda d: _model(d).update(hidden_size=250),
     "model.model_config.hidden_size: hidden_size (250) is not a multiple of num_attention_heads (4), even with "
     "head_dim set"),
    (lambda d: _model(d).update(rotary_dtype="float16"),
     "model.model_config.rotary_dtype: MindFormers' GPT models refuse a float16 rotary embedding"),
    (lambda d: _model(d).update(use_flash_attention=False),
     "model.model_config.use_flash_attention: without flash attention MindFormers repeats the 2 key/value heads "
     "for the 4 query heads"),
])
def test_errors_name_the_families_own_keys(tmp_path, change, expected):
    errors = _errors(_write(tmp_path, change))
    assert any(error.startswith(expected) for error in errors), errors


def test_mindformers_swap_spelling_in_model_config_is_read_and_reported_where_written(tmp_path, capsys):
    def spelled(data):
        del data["swap_config"]
        _model(data).update(swap=True, op_swap=[{"op_name": "self_attention", "backward_prefetch": 2,
                                                 "layers": [1, 2]}])
    plan = load_plan(_write(tmp_path, spelled))
    assert [(layer.layer, [use.pattern for use in layer.op_swap]) for layer in plan.layers if layer.op_swap] == \
           [(1, ["self_attention"]), (2, ["self_attention"])]
    assert plan.layers[1].op_swap[0].origin.key == "model.model_config.op_swap[0]"

    def wrong(data):
        spelled(data)
        _model(data)["op_swap"][0]["layers"] = [1, 9]
    errors = _errors(_write(tmp_path, wrong))
    assert any(error.startswith("model.model_config.op_swap[0].layers") and "9" in error for error in errors), errors


def test_a_top_level_swap_config_is_applied_with_a_warning_that_mindformers_ignores_it(tmp_path, capsys):
    def top_level(data):
        data["swap_config"] = {"swap": True, "layer_swap": [{"backward_prefetch": 1, "layers": [0]}]}
    path = _write(tmp_path, top_level)
    plan = load_plan(path)
    assert plan.layers[0].layer_swap is not None
    assert any(warning.path == "swap_config" and "plain MindFormers ignores the top-level swap_config for mcore"
               in warning.message for warning in plan.warnings)


def test_the_default_swap_strategy_swaps_the_flash_attention_primitive(tmp_path):
    def default(data):
        del data["swap_config"]
        _model(data)["swap"] = True
    plan = load_plan(_write(tmp_path, default))
    assert {use.pattern for layer in plan.layers for use in layer.op_swap} == \
           {r"self_attention\.core_attention\.flash_attention"}


def test_mindformers_default_select_patterns_are_explained_not_refused(tmp_path):
    """select_recompute: True applies MindFormers' four default patterns: in a dense Qwen3 two name shared
    experts it does not have, and `mlp\\.mul` names an operator SwiGlu never runs."""
    plan = load_plan(_write(tmp_path, lambda d: d["recompute_config"].update(select_recompute=True)))
    messages = [warning.message for warning in plan.warnings]
    assert any("`mlp\\.mul` names MLPInterleaved's `mul`, which a SwiGlu MLP never runs" in m for m in messages)
    assert sum("shared_experts" in m and "one of MindFormers' default patterns, the others apply" in m
               for m in messages) == 2


def test_a_pattern_the_layer_does_not_have_is_refused_with_the_names_there(tmp_path):
    errors = _errors(_write(tmp_path, lambda d: d["recompute_config"].update(
        select_recompute={r"mlp\.linear_fc3": True})))
    assert any("pattern `mlp\\.linear_fc3` matches nothing in layers 0, 1, 2, 3" in error
               and "linear_fc1, activation_func, linear_fc2" in error for error in errors), errors


def test_recompute_counts_per_stage_work_as_for_legacy_models(tmp_path):
    plan = load_plan(_write(tmp_path, lambda d: d["recompute_config"].update(recompute=[2], select_recompute=False)))
    assert [layer.full_recompute is not None for layer in plan.layers] == [True, True, False, False]


def test_a_key_read_from_pretrained_model_dirs_config_json_is_reported_as_that_files(tmp_path):
    import json

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"num_hidden_layers": 0, "hidden_size": 256}))

    def pretrained(data):
        data["pretrained_model_dir"] = str(model)
        del _model(data)["num_hidden_layers"]
    with pytest.raises(ConfigError) as error:
        load_plan(_write(tmp_path, pretrained))
    (issue,) = [issue for issue in error.value.issues if issue.path == "model.model_config.num_hidden_layers"]
    assert issue.file == str(model / "config.json") and "got 0" in issue.message


def test_the_mcore_linears_compress_and_lossless_says_why_it_does_not_apply(tmp_path):
    quantised = {"compress": True, "op_compress": [{"op_name": r"mlp\.linear_fc(1|2)", "method": "int8",
                                                     "layers": True}]}
    no_recompute = {"recompute": False, "select_recompute": False, "select_comm_recompute": False}
    plan = load_plan(_write(tmp_path, lambda d: d.update(compress_config=quantised, recompute_config=no_recompute)))
    assert [sorted(use.pattern for use in layer.op_compress) for layer in plan.layers] == \
           [[r"mlp\.linear_fc(1|2)"]] * 4
    lossless = load_plan(_write(tmp_path, lambda d: d.update(compress_config={"compress": True,
                                                                                "compress_dense": "level0"},
                                                                recompute_config=no_recompute)))
    assert any("no lossless transform saves memory for mlp.linear_fc2" in warning.message
               for warning in lossless.warnings)


def test_compression_with_tensor_parallelism_is_refused_for_mcore(tmp_path):
    def change(data):
        data.update(compress_config={"compress": True, "op_compress": [
            {"op_name": r"mlp\.linear_fc2", "method": "int8", "layers": True}]})
        data["parallel_config"]["model_parallel"] = 2

    assert [error for error in _errors(_write(tmp_path, change)) if error.startswith("parallel_config")] == [
        "parallel_config.model_parallel: compress_config with model_parallel 2: an mcore compressed linear computes "
        "its matmul outside MindFormers' Morph, which holds the tensor-parallel reduction and sharding"]


def test_tying_is_counted_as_mindformers_builds_it_and_an_ignored_key_is_said(tmp_path):
    from mf_memopt.estimate import estimate_config

    def tie(architecture: str, model_type: str, **extra):
        def change(data):
            _model(data).update(architectures=[architecture], model_type=model_type, tie_word_embeddings=True,
                                **extra)
        return change

    qwen3 = _write(tmp_path, tie("Qwen3ForCausalLM", "qwen3", untie_embeddings_and_output_weights=False))
    assert not load_plan(qwen3).warnings and estimate_config(qwen3).model.tie_embeddings
    # TeleChat3's training model builds its own output layer whatever tie_word_embeddings says
    telechat3 = _write(tmp_path, tie("TeleChat3ForCausalLM", "telechat3", untie_embeddings_and_output_weights=True))
    warnings = {warning.path: warning.message for warning in load_plan(telechat3).warnings}
    assert "builds its own output layer" in warnings["model.model_config.tie_word_embeddings"]
    assert "contradicts tie_word_embeddings: True" in warnings["model.model_config.untie_embeddings_and_output_weights"]
    assert not estimate_config(telechat3).model.tie_embeddings
