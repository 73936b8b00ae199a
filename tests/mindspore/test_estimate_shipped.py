"""The estimate on MindFormers' shipped pretrain YAMLs: each stage held to the YAML's own max_device_memory.

The YAMLs come from the installed mindformers wheel (its `configs/` beside the package); a missing one fails. So the
module is in the `mindspore` tier: the wheel check's clean environment has neither MindSpore nor MindFormers.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import yaml

from mf_memopt.cli import main
from mf_memopt.document.errors import ConfigError
from mf_memopt.document.source import load_source, parse_yaml
from mf_memopt.estimate import estimate_config
from mf_memopt.estimate.budget import TEMPLATE_DEFAULT, device_budget
from mf_memopt.estimate.memory import _backward_moment, shard_groups, stage_params
from mf_memopt.estimate.spec import optimizer_spec


SHIPPED = ("qwen3/pretrain_qwen3_32b_4k.yaml", "qwen3_moe/pretrain_qwen3_30b_a3b_4k.yaml",
           "telechat3/pretrain_telechat3_36b.yaml", "deepseek3/pretrain_deepseek3_671b.yaml",
           "deepseek3/pretrain_deepseek3_12b_16p_pp16.yaml")


def shipped(name: str) -> Path:
    spec = importlib.util.find_spec("mindformers")
    assert spec is not None and spec.origin, "mindformers is not installed"
    path = Path(spec.origin).parent.parent / "configs" / name
    assert path.is_file(), f"the mindformers wheel ships no {name}"
    return path


def written_budget(path: Path) -> int:
    """`context.max_device_memory` as MindSpore sizes its pool: "58GB" is 58 * 2**30 bytes (kGBToByte)."""
    text = yaml.safe_load(path.read_text(encoding="utf-8"))["context"]["max_device_memory"]
    assert text.endswith("GB")
    return int(float(text[:-2]) * 2**30)


@pytest.mark.parametrize("name", SHIPPED)
def test_estimate_uses_the_yamls_budget_and_every_stage_fits(name, capsys):
    path = shipped(name)
    assert main(["estimate", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["budget"]["bytes"] == written_budget(path) == data["hardware"]["device_memory"]
    assert data["budget"]["source"].startswith("context.max_device_memory")
    assert str(path) in data["budget"]["source"]
    assert "read from no datasheet, source or measurement" in data["hardware_source"]
    over = {stage["stage"]: stage["peak_bytes"] for stage in data["stages"] if not stage["fits"]}
    assert not over, f"stages over {written_budget(path)} bytes: {over}"


@pytest.mark.parametrize("name", SHIPPED)
def test_auto_without_device_memory_plans_for_the_yamls_budget(name, tmp_path, capsys):
    path, output = shipped(name), tmp_path / "planned.yaml"
    assert main(["auto", str(path), "--json", "--output", str(output)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["budget_bytes"] == written_budget(path)
    assert data["budget_source"].startswith("context.max_device_memory")
    assert data["fits"]
    planned = estimate_config(output)
    assert planned.hardware.device_memory == written_budget(path)
    assert all(stage.fits for stage in planned.stages)


def test_device_memory_overrides_the_yaml(capsys):
    path = shipped(SHIPPED[0])
    assert main(["estimate", str(path), "--json", "--device-memory", "40GiB"]) == 0
    budget = json.loads(capsys.readouterr().out)["budget"]
    assert budget == {"bytes": 40 * 2**30, "source": "--device-memory"}


def test_without_the_key_mindformers_template_default_stands():
    source = parse_yaml("model: {}\n", "no_context.yaml")
    budget = device_budget(source, "ascend")
    assert TEMPLATE_DEFAULT == "58GB"
    assert budget.nbytes == 58 * 2**30
    assert "MindFormers' default" in budget.source and "no context.max_device_memory" in budget.source


def test_a_value_above_the_card_is_not_a_cap():
    source = parse_yaml("context:\n  max_device_memory: \"1024GB\"\n", "big.yaml")
    budget = device_budget(source, "ascend")
    # MindSpore's pool then takes 15/16 of a free 64 GiB card, rounded down to 2 MiB, less 10 MiB
    assert budget.nbytes == 60 * 2**30 - 10 * 2**20
    assert "15/16" in budget.source


@pytest.mark.parametrize("value", ["58 GiB", "58", "0GB", "58gb"])
def test_a_value_mindspore_rejects_is_one_clear_error(tmp_path, value):
    path = shipped(SHIPPED[0])
    config = tmp_path / "bad.yaml"
    config.write_text(path.read_text(encoding="utf-8").replace('max_device_memory: "58GB"',
                                                               f"max_device_memory: {value!r}"), encoding="utf-8")
    assert f"max_device_memory: {value!r}" in config.read_text(encoding="utf-8")
    with pytest.raises(ConfigError) as error:
        estimate_config(config)
    text = str(error.value)
    assert "bad.yaml" in text and "context.max_device_memory" in text and "GB" in text


def test_cpu_auto_still_needs_device_memory(capsys):
    assert main(["auto", "configs/llama_tiny.yaml", "--runtime", "cpu"]) == 2
    assert "--runtime cpu needs --device-memory" in capsys.readouterr().err


def test_pipeline_gradients_are_one_accumulated_set():
    """Qwen3 32B (pipeline 4, 4 micro-batches, no parallel optimizer): accu_grads once, the size of the
    parameters, and the optimizer step's applied gradients the same again."""
    estimate = estimate_config(shipped(SHIPPED[0]))
    for stage in estimate.stages:
        components = stage.peak.components
        assert components["accumulated gradients"] == components["parameters"] == 4 * stage.parameters
        assert "gradients" not in components
        if stage.peak.kind == "optimizer step":
            assert components["gradients being applied"] == components["parameters"]


def test_deepseek_671b_parallel_optimizer_and_optimizer_swap():
    """Data parallel 4, tensor 8, experts 32 with the parallel optimizer and optimizer.swap: no optimizer
    states on the device; the dense weights split over data parallel 4 (shard size 256 does not divide it), the
    routed experts (32 of the 4 x 8 devices) not split; the gathered weights live at the start of the backward."""
    estimate = estimate_config(shipped(SHIPPED[3]))
    assert estimate.parallel.optimizer_shard and estimate.parallel.optimizer_shard_size == 256
    assert shard_groups(estimate.parallel) == (4, 32, 1)
    for stage in estimate.stages:
        components = stage.peak.components
        assert components["optimizer states"] == 0
        resident = components["parameters"] + components.get("gathered weights (parallel optimizer)", 0)
        if stage.peak.kind == "start of the backward":
            assert resident == 4 * stage.parameters
            assert components["gathered weights (parallel optimizer)"] > 0
        assert components["accumulated gradients"] == 4 * stage.parameters   # gradient_accumulation_shard: False
        assert components["parameters"] < 4 * stage.parameters


def test_mcore_splits_the_embedding_whatever_vocab_emb_dp_says():
    """MindFormers turns vocab_emb_dp off for mcore models: TeleChat3 36B's first stage holds 1/8 of the
    embedding (model_parallel 8), although the YAML leaves vocab_emb_dp at its default."""
    estimate = estimate_config(shipped(SHIPPED[2]))
    model = estimate.model
    assert not estimate.parallel.vocab_emb_dp
    first, last = estimate.stages
    layer = model.layer_model(0)
    per_layer = (layer.layer_params - layer.norm_params) // 8 + layer.norm_params
    assert first.parameters == len(first.layers) * per_layer + model.vocab * model.hidden // 8


@pytest.mark.parametrize(("level", "gathered", "accumulation_split"),
                         [("level1", True, False), ("level2", True, True), ("level3", False, True)])
def test_optimizer_level(tmp_path, level, gathered, accumulation_split):
    """MindSpore's optimizer_level: level2 splits the accumulated gradients like the weights, level3 also
    gathers the weights again before the backward instead of keeping the forward's copy."""
    data = yaml.safe_load(shipped(SHIPPED[3]).read_text(encoding="utf-8"))
    data["parallel"]["parallel_optimizer_config"]["optimizer_level"] = level
    config = tmp_path / "levels.yaml"
    config.write_text(yaml.safe_dump(data), encoding="utf-8")
    estimate = estimate_config(config)
    assert estimate.parallel.optimizer_level == level
    last = estimate.stages[-1]
    params = stage_params(estimate.model, estimate.parallel, last.layers, first=False, last=True)
    backward = _backward_moment(estimate.model, estimate.parallel, optimizer_spec(load_source(config)),
                                params=params, effects=[], transfers=[], factor=1.0, first=False, last=True)
    assert ("gathered weights (parallel optimizer)" in backward.components) == gathered
    expected = params.local(estimate.parallel) if accumulation_split else params.total
    assert backward.components["accumulated gradients"] == 4 * expected


@pytest.mark.parametrize(("mp_comm", "sequence_parallel"), [(False, True), (False, False), (True, True)])
def test_mp_comm_recompute_false_keeps_the_communication_outputs_of_fully_recomputed_layers(
        tmp_path, mp_comm, sequence_parallel):
    """TeleChat3 36B (model_parallel 8, use_seq_parallel, mp_comm_recompute False, 14 of 16 layers of each chunk
    fully recomputed): each fully recomputed layer keeps, besides its output, per row-parallel linear (linear_proj,
    linear_fc2) its reduce-scatter output (b*s/8 x h) and the all-gathered sequence before the column-parallel
    linear it feeds (b*s x h); without sequence parallelism an all-reduce output (b*s x h) each; with
    mp_comm_recompute True nothing more than the output."""
    data = yaml.safe_load(shipped(SHIPPED[2]).read_text(encoding="utf-8"))
    data["recompute_config"]["mp_comm_recompute"] = mp_comm
    data["parallel_config"]["use_seq_parallel"] = sequence_parallel
    config = tmp_path / "telechat3.yaml"
    config.write_text(yaml.safe_dump(data), encoding="utf-8")
    estimate = estimate_config(config)
    model, c = estimate.model, estimate.model.compute_bytes
    full = c * model.batch * model.seq * model.hidden
    output = full // 8 if sequence_parallel else full           # the layer output, split by sequence parallelism
    if mp_comm:
        kept = output
    elif sequence_parallel:
        kept = output + 2 * (full // 8 + full)
    else:
        kept = output + 2 * full
    recomputed = [layer for layer in estimate.layers if layer.effect.bytes("recomputed")]
    assert len(recomputed) == 56                                 # [[14, 14], [14, 14]] over 64 layers
    assert {layer.effect.bytes("kept") for layer in recomputed} == {kept}
