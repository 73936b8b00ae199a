"""The estimate of DeepSeek-V3 layers (configs/deepseek3_tiny.yaml): a dense first layer and MoE layers priced as
their kinds, multi-latent attention by its ranks, and the MTP layer on the last stage under the last layer's plan,
its patterns matched from its own children as `apply` matches them; and the CPU estimate against a held-out set of
measured peaks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from benchmarks.sweep import measured_reference
from benchmarks.sweep_deepseek import DATA as DEEPSEEK_DATA
from benchmarks.sweep_deepseek import generate as generate_deepseek
from mf_memopt.cli import main
from mf_memopt.estimate import estimate_config

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs" / "deepseek3_tiny.yaml"


def _estimate(tmp_path: Path, recompute: dict, **model) -> object:
    data = yaml.safe_load(TINY.read_text())
    data["recompute_config"] = {"recompute": False, "select_recompute": False, "select_comm_recompute": False,
                                **recompute}
    data["model"]["model_config"].update(model)
    path = tmp_path / "deepseek.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return estimate_config(path)


def _by_label(estimate) -> dict:
    return {layer.label: layer.effect for layer in estimate.layers}


def test_the_mtp_layer_takes_the_last_layers_plan_matched_from_its_own_children(tmp_path):
    mlp = _by_label(_estimate(tmp_path, {"select_recompute": {"mlp": True}}))
    assert all(mlp[str(index)].bytes("recomputed") > 0 for index in range(4))
    assert mlp["mtp.0"].bytes("recomputed") == 0                    # `mlp` names nothing in the MTP layer
    inner = _by_label(_estimate(tmp_path, {"select_recompute": {r"transformer_layer\.mlp": True}}))
    assert all(inner[str(index)].bytes("recomputed") == 0 for index in range(4))
    assert inner["mtp.0"].bytes("recomputed") == mlp["3"].bytes("recomputed")   # the same MoE block
    only_first = _by_label(_estimate(tmp_path, {"recompute": [3]}))  # the first three layers: not the MTP layer's
    assert only_first["mtp.0"].bytes("recomputed") == 0
    full = _by_label(_estimate(tmp_path, {"recompute": True}))["mtp.0"]
    # under full recompute the MTP layer keeps its embedding input and its output
    assert sorted(item.saved.what for item in full.tensors if item.fate == "kept") == [
        "MTP layer output (input of the shared output head)", "embedding of the shifted tokens (input of enorm)"]


def test_the_dense_first_layer_is_priced_as_a_dense_layer(tmp_path):
    estimate = _estimate(tmp_path, {})
    layers = _by_label(estimate)
    paths = {label: {item.saved.path for item in effect.tensors} for label, effect in layers.items()}
    assert not any(path.startswith("mlp.experts") for path in paths["0"])
    assert any(path.startswith("mlp.experts") for path in paths["1"])
    assert paths["1"] == paths["2"] == paths["3"]
    model = estimate.model
    # the dense layer's MLP: the gate and up (2F) and the gated product (F) per token; the MoE layer's: top-k rows
    assert layers["0"].bytes() < layers["1"].bytes()
    # one more dense layer: one fewer MoE layer's activations, one more dense layer's
    two = _estimate(tmp_path, {}, first_k_dense_replace=2)
    assert (model.dense_layers, two.model.dense_layers) == (1, 2)
    assert _by_label(two)["1"].bytes() == layers["0"].bytes()
    kept = [item.peak.components["activations kept"] for item in (estimate.stages[0], two.stages[0])]
    assert kept[0] - kept[1] == layers["1"].bytes() - layers["0"].bytes()
    assert two.stages[0].parameters < estimate.stages[0].parameters


def test_multi_latent_attention_is_priced_by_its_ranks(tmp_path):
    base = _by_label(_estimate(tmp_path, {}))["1"]
    wider = _by_label(_estimate(tmp_path, {}, kv_lora_rank=128))["1"]
    attention = [item.saved.nbytes for item in base.tensors if item.saved.path.startswith("self_attention.kv_")]
    # the k/v low-rank part before and after its norm doubles with the rank; nothing else changes
    assert wider.bytes() - base.bytes() == sum(attention[:1]) + sum(attention[2:3])
    no_q_rank = _by_label(_estimate(tmp_path, {}, q_lora_rank=None))["1"]
    assert not any(item.saved.path.startswith("self_attention.q_layernorm") for item in no_q_rank.tensors)
    heads = _by_label(_estimate(tmp_path, {}, num_attention_heads=8))["1"]
    flash = "self_attention.core_attention.flash_attention"
    assert sum(item.saved.nbytes for item in heads.tensors if item.saved.path == flash) == 2 * sum(
        item.saved.nbytes for item in base.tensors if item.saved.path == flash)


def test_num_key_value_heads_is_not_checked_for_multi_latent_attention(tmp_path):
    # DeepseekV3Config's default of 128 key/value heads with 8 heads (as the wheel's 12b YAML leaves it)
    estimate = _estimate(tmp_path, {}, num_attention_heads=8, num_key_value_heads=128)
    assert estimate.model.heads == 8


@pytest.mark.parametrize("budget", ["75MiB", "90MiB", "105MiB"])
def test_auto_plans_the_dense_moe_and_mtp_layers_and_the_estimate_agrees(capsys, tmp_path, budget):
    planned = tmp_path / "planned.yaml"
    assert main(["auto", str(TINY), "--device-memory", budget, "--json", "--output", str(planned)]) == 0
    result = json.loads(capsys.readouterr().out)
    (stage,) = result["stages"]
    assert stage["peak_bytes"] <= stage["searched_budget_bytes"]
    # the planner's prediction (the MTP layer under the last layer's choice) is the estimate of the written YAML
    assert estimate_config(planned).stages[0].peak.peak == stage["peak_bytes"]


@pytest.mark.parametrize("config", generate_deepseek(), ids=lambda config: config.name)
def test_the_deepseek_held_out_record_stays_within_ten_percent_of_its_peak(config, tmp_path):
    """benchmarks/sweep_deepseek.py: 8 configs drawn after the CPU terms of multi-latent attention, dense first
    layers and MTP layers were written, measured before the estimate was compared with them (the peaks are data in
    benchmarks/data/sweep_deepseek_peaks.json)."""
    entry = {item["name"]: item for item in json.loads(DEEPSEEK_DATA.read_text())["configs"]}[config.name]
    assert "measured_mib" in entry, f"{config.name}: {entry.get('error')}"
    estimated = estimate_config(config.write(tmp_path / f"{config.name}.yaml"), runtime="cpu").stages[0].peak.peak
    reference = measured_reference(entry)
    assert abs(estimated / 2**20 - reference) / reference <= 0.10


def test_float16_multi_latent_attention_on_cpu_is_refused_in_one_line(tmp_path, capsys):
    data = yaml.safe_load(TINY.read_text())
    data["model"]["model_config"]["compute_dtype"] = "float16"
    path = tmp_path / "half.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert main(["estimate", "--runtime", "cpu", str(path)]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "model.model_config.compute_dtype: the CPU memory model of multi-latent attention was read off float32" \
        in line and "estimate with the ascend runtime" in line
    assert main(["estimate", str(path)]) == 0                      # the ascend runtime prices it


def test_auto_on_cpu_names_the_layers_it_cannot_plan(capsys):
    assert main(["auto", "--runtime", "cpu", "--device-memory", "80MiB", str(TINY)]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert [line.split(": ")[1] for line in lines] == ["model.model_config.first_k_dense_replace",
                                                        "model.model_config.num_nextn_predict_layers"]
    assert all("auto --runtime cpu plans layers of one kind" in line for line in lines)


def test_auto_offers_the_shared_experts_where_the_model_has_them():
    from mf_memopt.document.source import load_source
    from mf_memopt.config.family_rules import auto_cells_for
    from mf_memopt.models.mcore import MCORE

    assert r"mlp\.shared_experts" in auto_cells_for(MCORE, load_source(TINY)).select
    qwen3_moe = load_source(ROOT / "configs" / "qwen3_moe_tiny.yaml")
    assert r"mlp\.shared_experts" not in auto_cells_for(MCORE, qwen3_moe).select


# The later DeepSeek-V3 sets (`sweep_deepseek.py --set S`), held to 5%. `fresh` and `fresh2` are fitted. `fresh` (seed 20261214): its g04
# (-9.4% at first comparison: q projected directly, the attention cell recomputed) was traced and a term changed for
# it (the multi-latent split's outputs, kept when the attention is recomputed, not only under full recompute).
# `fresh2` (seed 20261218), first compared after that term: 7 of 8 within 5%; its q05 (+7.8%: an MTP layer, vocabulary
# 4096) was traced and two terms changed for it (the main loss runs before the MTP layer: two moments at the end of
# the forward, `cpu_memory._end_of_forward`; the MTP layer's enorm and hnorm keep an early 2*x). Known misses, each
# strict (none today). `fresh3` (seed 20261222), drawn and measured while q05's terms were made and first compared
# after them (8/8), is held out.
FRESH_KNOWN: dict[str, str] = {}
FRESH_HELD_OUT = ("fresh3",)


@pytest.mark.parametrize(("which", "config"), [pytest.param(
    which, config, id=f"{'held-out' if which in FRESH_HELD_OUT else 'fitted'}-{which}-{config.name}",
    marks=[pytest.mark.xfail(reason=FRESH_KNOWN[config.name], strict=True)] if config.name in FRESH_KNOWN else [])
    for which in ("fresh", "fresh2", "fresh3") for config in generate_deepseek(which)])
def test_the_later_deepseek_sets_stay_within_five_percent_of_their_peaks(which, config, tmp_path):
    from benchmarks.sweep_deepseek import data_file

    entry = {item["name"]: item for item in json.loads(data_file(which).read_text())["configs"]}[config.name]
    assert "exact_mib" in entry, f"{config.name}: {entry.get('error', 'not measured to the byte')}"
    estimated = estimate_config(config.write(tmp_path / f"{config.name}.yaml"), runtime="cpu").stages[0].peak.peak
    reference = measured_reference(entry)
    assert abs(estimated / 2**20 - reference) / reference <= 0.05


@pytest.mark.parametrize(("recompute", "kept"), [({"select_recompute": {"self_attention": True}}, True),
                                                 ({"recompute": True}, True),
                                                 ({"select_recompute": {"mlp": True}}, False), ({}, False)])
def test_a_recomputed_multi_latent_attention_keeps_the_split_it_starts_from(tmp_path, recompute, kept):
    """MindFormers' split of q, k and v is expanded into Slice ops that no recompute marks: a recompute of the
    attention (its cell or the whole layer) starts from their outputs, so they are held; otherwise they are not
    (the fresh set's g04 trace). The k/v norm's early 2*x reads the kept low-rank part and is never rebuilt."""
    data = yaml.safe_load(TINY.read_text())
    data["recompute_config"] = {"recompute": False, "select_recompute": False, "select_comm_recompute": False,
                                **recompute}
    path = tmp_path / "deepseek.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    layer = estimate_config(path, runtime="cpu").layers[1].effect
    fates = {(item.saved.path, item.saved.what[:3]): item.fate for item in layer.tensors}
    assert (("self_attention.split", "q's") in fates) == kept
    assert fates[("self_attention.kv_layernorm.norm", "2*x")] == "kept"


@pytest.mark.parametrize("mtp", [1, 0])
def test_with_an_mtp_layer_the_forward_ends_at_the_main_loss_and_at_the_mtp_loss(tmp_path, mtp):
    """The runtime runs the main loss and its output head's backward before the MTP layer's transformer layer (the
    fresh2 set's q05): at the main loss the MTP layer has made only its inputs, at the MTP loss the main loss's three
    other b*s*v tensors are gone and the output head's two gradients exist."""
    from mf_memopt.models.mcore.cpu_memory import cpu_checkpoints

    data = yaml.safe_load(TINY.read_text())
    data["model"]["model_config"]["num_nextn_predict_layers"] = mtp
    path = tmp_path / "deepseek.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    estimate = estimate_config(path, runtime="cpu")
    model, effects = estimate.model, [layer.effect for layer in estimate.layers]
    moments = {moment.kind: moment.components for moment in cpu_checkpoints(model, effects)
               if moment.kind.startswith("end of the forward")}
    bsv = 4 * model.batch * model.seq * model.vocab
    main_loss = moments.pop("end of the forward (loss)")
    assert main_loss["loss tensors"] == (5 + 2 * mtp) * bsv
    if not mtp:
        assert not moments
        return
    mtp_loss = moments.pop("end of the forward (the MTP loss)")
    assert not moments and mtp_loss["loss tensors"] == 5 * bsv
    assert mtp_loss["output head's gradients (the main loss's backward)"] == 4 * (
        model.vocab + model.batch * model.seq) * model.hidden
    layer = effects[-1].tensors
    after_inputs = sum(item.saved.nbytes for item in layer if item.fate != "recomputed"
                       and item.saved.path.startswith(("transformer_layer.", "final_layernorm.")))
    assert after_inputs > 0
    assert mtp_loss["activations kept"] - main_loss["activations kept"] == after_inputs


@pytest.mark.parametrize("recompute", [{}, {"recompute": True}, {"select_recompute": {"mlp": True}}])
def test_the_mtp_layers_input_norms_keep_their_early_backward_product_on_cpu(tmp_path, recompute):
    """enorm's and hnorm's RmsNorm backward makes its 2*x early, as every norm on CPU, and their inputs (the shifted
    tokens' embedding, the decoder's output) are kept under full recompute, so it is kept too (the fresh2 set's q05
    and q01: eleven and six b*s*h `_Muls` alive at the main loss, two of them the MTP layer's)."""
    data = yaml.safe_load(TINY.read_text())
    data["recompute_config"] = {"recompute": False, "select_recompute": False, "select_comm_recompute": False,
                                **recompute}
    path = tmp_path / "deepseek.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    estimate = estimate_config(path, runtime="cpu")
    early = [item for item in _by_label(estimate)["mtp.0"].tensors
             if item.saved.path in ("enorm.norm", "hnorm.norm") and item.saved.what.startswith("2*x")]
    assert [item.fate for item in early] == ["kept", "kept"]
    assert all(item.saved.nbytes == 4 * estimate.model.batch * estimate.model.seq * estimate.model.hidden
               for item in early)
    assert not any(item.saved.what.startswith("2*x") for item in _by_label(_estimate(tmp_path, recompute))["mtp.0"]
                   .tensors if item.saved.path in ("enorm.norm", "hnorm.norm"))       # ascend: no such tensor
