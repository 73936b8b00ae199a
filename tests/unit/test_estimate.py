"""The memory estimator: formulas on hand-computed cases, and the plan's effects one at a time."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from mf_memopt import load_plan
from mf_memopt.cli import main
from mf_memopt.estimate import Hardware, estimate_config
from mf_memopt.estimate.effects import layer_effect
from mf_memopt.estimate.memory import in_flight, stage_parameters
from mf_memopt.estimate.report import parse_size
from mf_memopt.estimate.spec import ModelSpec, ParallelSpec
from mf_memopt.estimate.transfer import swap_timeline
from mf_memopt.estimate.family import estimator_of
from mf_memopt.models.llama import LLAMA
from mf_memopt.models.llama.inventory import layer_inventory, layer_ops
from mf_memopt.models.llama.spec import ffn_width

ROOT = Path(__file__).resolve().parents[2]
MiB = 2**20

# The shipped tiny Llama: b 2, s 256, h 256, n 4 (d 64), f 688, v 256, fp32.
TINY = ModelSpec(num_layers=4, hidden=256, heads=4, kv_heads=4, ffn=688, vocab=256, seq=256, batch=2,
                 compute_bytes=4, param_bytes=4, softmax_bytes=4, flash_attention=False)
BSH, BSF = 2 * 256 * 256, 2 * 256 * 688
S_NONE = 4 * (2 * 4 * 256 * 256 + 5 * BSF + 8 * BSH + 4 * BSH + 2 * 2 * 256)  # e(bns^2 + 5bsf + 8bsh + 4bsnd + 2bs)


def _effects(recompute=None, swap=None, num_layers=4, model=TINY):
    doc = {"model": {"model_config": {"num_layers": num_layers}}, "recompute_config": recompute or {},
           "swap_config": swap or {}}
    plan = load_plan(doc)
    inventory, ops = layer_inventory(model, ParallelSpec(), "cpu"), layer_ops(model, ParallelSpec())
    return [layer_effect(layer, inventory, ops, LLAMA.cell_outputs) for layer in plan.layers]


def _paths(effect, fate):
    return sorted({item.saved.path for item in effect.tensors if item.fate == fate})


@pytest.mark.parametrize(("hidden", "multiple_of", "intermediate", "multiplier", "width"), [
    (4096, 256, None, None, 11008),      # Llama2-7B
    (256, 16, None, None, 688),          # the shipped tiny model
    (512, 16, None, None, 1376),
    (4096, 256, 14000, None, 14000),
    (4096, 256, None, 1.3, 14336),       # int(1.31 * 4h) -> int(2/3 .) -> round up to 256
])
def test_ffn_width_follows_mindformers(hidden, multiple_of, intermediate, multiplier, width):
    assert ffn_width(hidden, multiple_of, intermediate, multiplier) == width


def test_cpu_layer_inventory_adds_up_to_the_measured_formula():
    inventory = layer_inventory(TINY, ParallelSpec(), "cpu")
    assert sum(item.nbytes for item in inventory) == S_NONE == 15_437_824  # 14.72 MiB
    named = {item.path for item in inventory}
    assert {"feed_forward.w1.activation.silu", "feed_forward.mul", "attention.softmax", "add"} <= named


def test_gqa_keeps_the_same_bytes_on_cpu():
    # k and v are kept after being repeated to every head (attention.tile_kv), as measured.
    inventory = layer_inventory(replace(TINY, kv_heads=2), ParallelSpec(), "cpu")
    assert sum(item.nbytes for item in inventory) == S_NONE
    assert "attention.tile_kv" in {item.path for item in inventory}


def test_full_recompute_keeps_the_layer_output_and_the_early_norm_gradient():
    effect = _effects({"recompute": [1]})[0]
    assert effect.bytes("kept") == 2 * 4 * BSH
    assert _paths(effect, "kept") == ["add", "attention_norm.square"]
    assert effect.recompute_flops == sum(op.flops for op in layer_ops(TINY, ParallelSpec()))


def test_cell_recompute_removes_what_is_made_inside_the_cell():
    effect = _effects({"select_recompute": {"feed_forward": True}})[0]
    assert effect.bytes("recomputed") == 5 * 4 * BSF
    assert effect.bytes("kept") == S_NONE - 5 * 4 * BSF
    assert _paths(effect, "recomputed") == ["feed_forward.mul", "feed_forward.w1.activation.silu",
                                            "feed_forward.w1.matmul", "feed_forward.w3.matmul"]
    assert effect.recompute_flops == 3 * 2 * 2 * 256 * 256 * 688   # w1, w3, w2


def test_a_recomputed_cell_keeps_its_own_output():
    """`feed_forward\\.w1` names the w1 Linear, whose output is the SiLU's: it stays kept (the next operator's
    backward reads it), while the w1 matmul output and the SiLU backward's early sigmoid are rebuilt. Under
    the whole `feed_forward` cell the SiLU output is inside, not the output, and is rebuilt."""
    effect = _effects({"select_recompute": {"feed_forward\\.w1": True}})[0]
    silu = {item.saved.what: item.fate for item in effect.tensors
            if item.saved.path == "feed_forward.w1.activation.silu"}
    assert silu == {"SiLU output (x * sigmoid(x))": "kept", "sigmoid(x) of the SiLU backward, run early": "recomputed"}
    assert _paths(effect, "recomputed") == ["feed_forward.w1.activation.silu", "feed_forward.w1.matmul"]
    assert effect.bytes("recomputed") == 2 * 4 * BSF
    whole = _effects({"select_recompute": {"feed_forward": True}})[0]
    assert all(item.fate == "recomputed" for item in whole.tensors
               if item.saved.path == "feed_forward.w1.activation.silu")


def test_primitive_recompute_saves_nothing_and_says_why():
    effect = _effects({"select_recompute": True})[0]
    assert effect.bytes("kept") == S_NONE and effect.recompute_flops == 0
    assert effect.notes[0].startswith("select recompute `feed_forward\\.mul` names primitives: MindSpore makes no "
                                      "recompute copy of them")


def test_exclusion_keeps_its_tensor_inside_a_recomputed_cell():
    effect = _effects({"select_recompute": ["feed_forward"], "select_recompute_exclude": ["feed_forward\\.mul"]})[0]
    assert "feed_forward.mul" in _paths(effect, "kept")
    assert effect.bytes("recomputed") == 4 * 4 * BSF


def test_layer_swap_moves_every_tensor_and_op_swap_only_its_cell():
    layer, op = _effects(swap={"swap": True, "layer_swap": [{"backward_prefetch": 3, "layers": [0]}],
                               "op_swap": [{"op_name": "attention", "backward_prefetch": 7, "layers": [1]}]})[:2]
    assert layer.bytes("swapped") == S_NONE and layer.prefetch_operators() == 3
    assert _paths(op, "swapped") == ["attention.apply_rotary_emb.add", "attention.merger_head_transpose",
                                     "attention.softmax", "attention.transpose"]
    assert op.prefetch_operators() == 7


def test_recompute_beats_swap_per_tensor_and_op_swap_beats_layer_swap():
    effect = _effects({"select_recompute": {"feed_forward": [0]}},
                      {"swap": True, "layer_swap": [{"backward_prefetch": 3, "layers": [0]}],
                       "op_swap": [{"op_name": "attention", "backward_prefetch": "Auto", "layers": [0]}]})[0]
    assert effect.bytes("recomputed") == 5 * 4 * BSF
    assert effect.bytes("kept") == 0
    prefetch = {item.saved.path: item.prefetch for item in effect.tensors if item.fate == "swapped"}
    assert prefetch["attention.softmax"] == "Auto" and prefetch["add"] == 3
    assert effect.prefetch_operators() == 1


@pytest.mark.parametrize(("micro_batches", "chunks", "expected"), [
    (8, 1, [4, 3, 2, 1]),        # 1F1B: pp - stage micro-batches in flight
    (2, 1, [2, 2, 2, 1]),        # fewer micro-batches than stages
    (8, 2, [5.5, 4.5, 3.5, 2.5]),  # interleaved: ((pp - s - 1) * 2 + (v - 1) * pp + 1) chunks, / v
])
def test_pipeline_in_flight_micro_batches(micro_batches, chunks, expected):
    parallel = ParallelSpec(pipeline=4, micro_batches=micro_batches)
    assert [in_flight(stage, parallel, chunks) for stage in range(4)] == expected


def test_interleaved_in_flight_counts_the_micro_batches_left_over_a_multiple_of_the_stages():
    """MindSpore's interleaved scheduler starts each stage with (pp + m % pp) x (v - 1) more units, not pp x (v - 1):
    10 micro-batches on 4 stages, 2 chunks."""
    parallel = ParallelSpec(pipeline=4, micro_batches=10)
    assert [in_flight(stage, parallel, 2) for stage in range(4)] == [6.5, 5.5, 4.5, 3.5]


def test_seqpipe_in_flight_follows_its_warm_up():
    """seqpipe's warm-up (`SeqpipeScheduler`): (pp - s - 1) x 2 + (v - 1) x c0 x S + S units of a chunk and a
    sequence chunk, c0 the first cycle's micro-batches: DeepSeek-V3 671B's layout with 30 micro-batches split into 4
    (c0 = 8 + ceil(6 / 3) = 10) holds 58 units on stage 0, 44 on stage 7, each 1/8 of the stage's activations. With
    one sequence chunk and a multiple of the stages it is the interleaved count, and without interleave 1F1B's."""
    split = ParallelSpec(pipeline=8, micro_batches=30, scheduler="seqpipe", seq_split=4)
    assert [in_flight(stage, split, 2) for stage in range(8)] == [7.25, 7.0, 6.75, 6.5, 6.25, 6.0, 5.75, 5.5]
    whole = ParallelSpec(pipeline=8, micro_batches=32, scheduler="seqpipe")
    assert [in_flight(stage, whole, 2) for stage in range(8)] == \
           [in_flight(stage, ParallelSpec(pipeline=8, micro_batches=32), 2) for stage in range(8)]
    assert [in_flight(stage, ParallelSpec(pipeline=4, micro_batches=8, scheduler="seqpipe"), 1)
            for stage in range(4)] == [4, 3, 2, 1]


def test_parameters_per_stage_and_rank():
    llama2_7b = ModelSpec(num_layers=32, hidden=4096, heads=32, kv_heads=32, ffn=11008, vocab=32000, seq=4096,
                          batch=1, compute_bytes=2, param_bytes=2, softmax_bytes=2, flash_attention=True)
    per_layer = 4 * 4096**2 + 3 * 4096 * 11008 + 2 * 4096
    assert llama2_7b.layer_params == per_layer == 202_383_360
    assert stage_parameters(llama2_7b, ParallelSpec(pipeline=2), range(16), True, False) == 16 * per_layer + 32000 * 4096
    assert stage_parameters(llama2_7b, ParallelSpec(pipeline=2), range(16, 32), False, True) == \
        16 * per_layer + 4096 + 32000 * 4096
    tensor_parallel = stage_parameters(llama2_7b, ParallelSpec(tensor=4, vocab_emb_dp=False), range(32), True, True)
    assert tensor_parallel == 32 * ((per_layer - 2 * 4096) // 4 + 2 * 4096) + 2 * 32000 * 4096 // 4 + 4096


def test_swap_timeline_by_hand():
    # 1 ms of forward per layer, 2 ms to move each layer's 2 MB, release/prefetch 5 of 10 operators later.
    hardware = Hardware(device_memory=2**30, tflops=1.0, host_gbps=1.0, operators_per_layer=10)
    swap = {"swap": True, "layer_swap": [{"backward_prefetch": 5, "layers": True}]}
    effects = _effects(swap=swap, num_layers=3)
    scale = 2e6 / effects[0].bytes("swapped")
    effects = [_scaled(effect, scale) for effect in effects]
    transfers = swap_timeline(effects, [10**9] * 3, hardware)
    ms = [(round(item.forward_stall_s * 1e3, 3), round(item.backward_stall_s * 1e3, 3)) for item in transfers]
    assert ms == [(1.5, 1.0), (1.5, 1.0), (0.0, 0.0)]
    assert [item.on_device_at_turn for item in transfers] == [False, False, True]


def _scaled(effect, factor):
    return replace(effect, tensors=tuple(replace(item, saved=replace(item.saved, nbytes=round(item.saved.nbytes
                                                                                               * factor)))
                                         for item in effect.tensors))


def test_llama2_7b_estimate_by_stage():
    result = estimate_config(ROOT / "configs/planning/llama2_7b_swap_pp2.yaml")
    first, last = result.stages
    params = 16 * 202_383_360 + 32000 * 4096
    norms = 16 * 2 * 4096                       # below the parallel optimizer's threshold: whole on every device
    local = (params - norms) // 4 + norms       # the parallel optimizer splits the rest over data parallel 4
    assert first.peak.kind == "start of the backward"
    assert first.peak.components["parameters"] == 2 * local
    assert first.peak.components["gathered weights (parallel optimizer)"] == 2 * (params - local)
    assert first.peak.components["accumulated gradients"] == 2 * params  # accu_grads: whole (level1)
    assert first.peak.components["optimizer states"] == 8 * local        # fp32 moments, sharded like the weights
    assert (first.in_flight, last.in_flight) == (2.0, 1.0)
    assert first.fits and last.fits and first.host_bytes == 0 < last.host_bytes
    assert last.traffic_bytes == 8 * 15 * result.layers[16].effect.bytes("swapped")  # the last layer stays


@pytest.mark.parametrize("config", sorted(str(path.relative_to(ROOT)) for path in (ROOT / "configs").rglob("*.yaml")))
def test_estimate_runs_on_every_shipped_config(config, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    assert main(["estimate", config, "--png", str(tmp_path / "chart.png")]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[1].startswith("training step: ")
    assert out.splitlines()[3].split()[:4] == ["stage", "layers", "peak", "fits"]
    assert (tmp_path / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_estimate_json_is_in_bytes_and_names_operators(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["estimate", "configs/llama_tiny.yaml", "--json", "--runtime", "cpu"]) == 0
    data = json.loads(capsys.readouterr().out)
    operators = {item["path"]: item for item in data["layers"][0]["operators"]}
    assert operators["feed_forward.w1.activation.silu"]["bytes"] == 4 * BSF
    assert operators["feed_forward.w1.activation.silu"]["fate"] == "recomputed"
    assert data["stages"][0]["peak_bytes"] == sum(data["stages"][0]["components"].values())


def test_too_small_a_device_does_not_fit(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["estimate", "configs/planning/llama2_7b_swap_pp2.yaml", "--device-memory", "24GiB"]) == 0
    rows = capsys.readouterr().out.splitlines()[4:6]
    assert [row.split()[4] for row in rows] == ["NO", "NO"]   # stage, layers, peak (2 words), fits


@pytest.mark.parametrize(("text", "nbytes"), [("64GiB", 64 * 2**30), ("32 GB", 32 * 2**30), ("512MiB", 512 * MiB),
                                               ("1000", 1000)])
def test_sizes(text, nbytes):
    assert parse_size(text) == nbytes


def test_bad_size_is_an_error(capsys):
    assert main(["estimate", "configs/llama_tiny.yaml", "--device-memory", "lots"]) == 2
    assert "not a size: 'lots'" in capsys.readouterr().err


def test_missing_model_dimensions_are_listed(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["estimate", "tests/data/valid/exclude_and_comm.yaml"]) == 1
    errors = capsys.readouterr().err.splitlines()
    assert [line.split(": ")[1] for line in errors] == [
        "model.model_config.hidden_size", "model.model_config.num_heads", "model.model_config.seq_length",
        "model.model_config.vocab_size"]
    assert all(line.endswith("missing: the estimate needs it (set " + line.split(": ")[1] + ")") for line in errors)


def test_the_cpu_estimate_says_when_the_runtime_differs_from_the_one_it_was_measured_on(monkeypatch):
    """The CPU terms are MindSpore 2.9's runtime choices; another installed version gets one note pointing at
    --measure, and the measured one none."""
    from mf_memopt.estimate.versions import installed

    monkeypatch.setattr(estimator_of(LLAMA), "cpu_measured_on", {"pyyaml": installed("pyyaml"), "pytest": installed("pytest")})
    assert not any("measured on" in note for note in estimate_config(ROOT / "configs/llama_tiny.yaml",
                                                                      runtime="cpu").notes)
    monkeypatch.setattr(estimator_of(LLAMA), "cpu_measured_on", {"mindspore": "2.8.0", "pytest": installed("pytest")})
    notes = estimate_config(ROOT / "configs/llama_tiny.yaml", runtime="cpu").notes
    assert any("measured on mindspore 2.8.0" in note and "check the estimate with `estimate --measure`" in note
               for note in notes)
    assert not any("measured on" in note for note in estimate_config(ROOT / "configs/llama_tiny.yaml").notes)  # ascend


def _b09(tmp_path: Path, recompute: dict | None = None, **model) -> Path:
    """wide3's b09 (float16 everywhere, flash attention on, seq 633, hidden 40, one head), with `model` keys changed."""
    import yaml

    from benchmarks.sweep import generate

    document = next(config for config in generate("wide3") if config.name == "b09").document()
    document["model"]["model_config"].update(model)
    if recompute is not None:
        document["recompute_config"] = recompute
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def _cpu_peak(path: Path) -> int:
    return estimate_config(path, runtime="cpu").stages[0].peak.peak


def test_the_flash_attention_stand_in_runs_its_softmax_in_float32_on_cpu(tmp_path):
    """The launcher's CPU stand-in for FlashAttention computes its softmax in float32 whatever softmax_compute_type
    says: wide3's b09 (float16 everywhere) and the same config with softmax_compute_type float32 both peak at
    41.50 MiB, measured to the byte (docs/estimator.md, "The flash-attention stand-in"). Without flash attention the
    key is the softmax's dtype, and the estimate follows it."""
    def peak(**model) -> int:
        return _cpu_peak(_b09(tmp_path, **model))

    assert peak(softmax_compute_type="float16") == peak(softmax_compute_type="float32")
    assert peak(use_flash_attention=False, softmax_compute_type="float16") < \
        peak(use_flash_attention=False, softmax_compute_type="float32")
    model = replace(TINY, compute_bytes=2, param_bytes=2, softmax_bytes=2, flash_attention=True)
    probabilities = [item.nbytes for item in layer_inventory(model, ParallelSpec(), "cpu")
                     if item.path == "attention.softmax"]
    assert probabilities == [4 * 2 * 4 * 256 * 256]


# b09 under `recompute: True`, each peak replayed to the byte (`python benchmarks/pool_trace.py CONFIG`, MindSpore 2.9.0)
_FULL_RECOMPUTE = [
    pytest.param(False, "float32", 30.82763671875, id="flash off, float32 softmax"),
    pytest.param(True, "float16", 29.29931640625, id="flash on"),
]


@pytest.mark.parametrize(("flash", "softmax", "measured_mib"), _FULL_RECOMPUTE)
def test_a_fully_recomputed_float32_softmax_peaks_at_its_rebuild(flash, softmax, measured_mib, tmp_path):
    """Under full recompute a float16 model's float32 softmax peaks as the layer's rebuild makes the probabilities'
    float32 copy: the rebuilt probabilities, that copy, their float16 cast and the float32 gradient (14 bytes a score),
    not the five float32 tensors of a recomputed attention alone (before: +33.7% with flash off). Beside them: the
    float32 copies of the rebuilt input of wq/wk/wv and of wo's incoming gradient (4*4*b*s*h bytes; flash on was
    -6.2% without them, flash off +4.0% with a float32 mask for its float16 one)."""
    path = _b09(tmp_path, {"recompute": True, "select_recompute": False, "select_comm_recompute": False},
                use_flash_attention=flash, softmax_compute_type=softmax)
    assert abs(_cpu_peak(path) / MiB - measured_mib) / measured_mib <= 0.05


def test_a_recomputed_float16_softmax_backward_holds_two_float32_and_two_float16_score_tensors(tmp_path):
    """b09 with flash attention off (float16 everywhere, both cells of every layer recomputed, the norms kept): its
    peak, 39.96 MiB measured to the byte, is the softmax backward of a rebuilt float16 softmax, which holds the
    probabilities' float32 gradient, its float16 cast, the float16 product and the float32 cast of the result beside
    the rebuilt probabilities and their float32 copy (the sweep's s09 traced the same). Counting one float32 tensor
    there, and a float32 mask, the estimate was 33.2 MiB (-16.9%)."""
    path = _b09(tmp_path, use_flash_attention=False)
    assert abs(_cpu_peak(path) / MiB - 39.96) / 39.96 <= 0.05


def test_the_causal_mask_without_flash_attention_is_in_the_compute_dtype(tmp_path):
    """MindFormers' `LowerTriangularMaskWithDynamic` scales the mask by a `compute_dtype` tensor without flash
    attention, and a recomputed attention keeps it: a (b, 1, s, s) float16 tensor under float16 compute. wide4's i09
    (full recompute, float16, flash off) at seq 640 and batch 6, where the 4.69 MiB mask sits at the end-of-forward
    peak, measures 38.22 MiB to the byte (`benchmarks/pool_trace.py`); with a float32 mask the estimate was 42.76
    (+11.9%)."""
    import dataclasses

    from benchmarks.sweep import generate

    i09 = next(config for config in generate("wide4") if config.name == "i09")
    config = dataclasses.replace(i09, model={**i09.model, "seq_length": 640, "batch_size": 6})
    peak = estimate_config(config.write(tmp_path / "i09.yaml"), runtime="cpu").stages[0].peak
    assert peak.kind == "end of the forward (loss)"
    assert abs(peak.peak / MiB - 38.21826171875) / 38.21826171875 <= 0.01


# The shipped quantised configs and the same at batch 3, each peak replayed to the byte
# (`python benchmarks/pool_trace.py CONFIG`, MindSpore 2.9.0): all in the backward of the last layer's MLP
_QUANTISED_MLP = [
    pytest.param("int2", 2, 62647808, id="compress_int2_mlp"),
    pytest.param("int8", 2, 64488448, id="compress_int8_mlp"),
    pytest.param("int2", 3, 88137728, id="int2, batch 3"),
    pytest.param("int8", 3, 90752512, id="int8, batch 3"),
]


@pytest.mark.parametrize(("method", "batch", "measured"), _QUANTISED_MLP)
def test_a_quantised_mlp_backward_holds_one_restored_block(method, batch, measured, tmp_path):
    """A quantised w2's backward peaks while the gate is rebuilt or SiLU's gradient runs, beside one restored float32
    block and the incoming gradient's row slices; no block's conversion temporaries and no second partial weight
    gradient are alive then (before: 12 bytes a block element and two partials, +6.5% on compress_int2_mlp)."""
    import yaml

    data = yaml.safe_load((ROOT / "configs" / "compress_int2_mlp.yaml").read_text())
    data["compress_config"]["op_compress"][0]["method"] = method
    data["model"]["model_config"]["batch_size"] = data["runner_config"]["batch_size"] = batch
    path = tmp_path / "case.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    estimate = _cpu_peak(path)
    assert 0 <= estimate / measured - 1 <= 0.03


def _wide5(name: str, tmp_path: Path, **model) -> Path:
    import dataclasses

    from benchmarks.sweep import generate

    config = next(config for config in generate("wide5") if config.name == name)
    return dataclasses.replace(config, model={**config.model, **model}).write(tmp_path / f"{name}.yaml")


def test_qkv_concat_fuses_the_linears_of_a_llama_layer():
    """`qkv_concat` builds one `w_qkv` Linear (split by `split_qkv`) and a LlamaFeedForward with ffn_concat: one
    `w_gate_hidden` (split by `split`), the SiLU its own `activate` cell (MindFormers' llama_transformer.py and
    llama_layer.py, the recorded layer in layers.json). The parameters, the matmuls and the paths follow it."""
    fused = replace(TINY, fused_linears=True)
    h, f = TINY.hidden, TINY.ffn
    assert fused.layer_param_list() == [3 * h * h, h * h, 2 * h * f, f * h, h, h]
    ops = layer_ops(fused, ParallelSpec())
    assert [op.path for op in ops if op.path.endswith("matmul")] == [
        "attention.w_qkv.matmul", "attention.wo.matmul", "feed_forward.w_gate_hidden.matmul", "feed_forward.w2.matmul"]
    assert sum(op.flops for op in ops) == sum(op.flops for op in layer_ops(TINY, ParallelSpec()))
    gate = _effects({"select_recompute": {r"feed_forward\.activate": True}}, model=fused)[0]
    assert _paths(gate, "recomputed") == ["feed_forward.activate.silu"]
    assert gate.bytes("recomputed") == 4 * BSF     # the SiLU backward's early sigmoid; its output is the cell's: kept
    assert _effects({"select_recompute": {r"feed_forward\.w1": True}}, model=fused)[0].bytes("recomputed") == 0


def test_qkv_concat_keeps_one_float32_copy_of_each_normalised_input(tmp_path):
    """wide5's c00 (MindFormers' default dtypes: float16 compute, qkv_concat on, the MLP of all 6 layers recomputed)
    peaks at the end of the forward with 35.08 MiB measured to the byte; the same with qkv_concat off, 37.32. Under
    float16 compute CPU MatMul reads a float32 copy of its input, one per Linear: one for `w_qkv` where `wq`, `wk`
    and `wv` take three (2 * 4 * b*s*h more a layer, 2.27 MiB over 6 layers; measured 2.25). Counting three under
    qkv_concat the estimate was 37.2 MiB (+5.9%)."""
    for concat, measured in ((True, 35.07763671875), (False, 37.32421875)):
        peak = estimate_config(_wide5("c00", tmp_path, qkv_concat=concat), runtime="cpu").stages[0].peak
        assert peak.kind == "end of the forward (loss)"
        assert abs(peak.peak / MiB - measured) / measured <= 0.01


def test_the_fused_gate_up_weight_is_the_largest_update_and_the_embedding_takes_its_early_copies_along(tmp_path):
    """wide5's c09 (float16, qkv_concat on, clip-grad) peaks at 105.38 MiB (to the byte) inside the fused
    `w_gate_hidden`'s update, the largest weight (2 * f * h): with w1 and w3 counted apart the estimate was 98.6
    (-6.4%). The two vocabulary-sized float32 `Mul`s made as the step starts are freed by the embedding's update,
    first in order, so they are gone by then (+2.0% counting them). With a vocabulary of 2000 the peak is the end of
    clip-grad, where they are alive: 116.20 MiB."""
    for vocab, measured, kind in ((520, 105.37646484375, "optimizer step"), (2000, 116.19873046875,
                                                                             "end of clip-grad")):
        peak = estimate_config(_wide5("c09", tmp_path, vocab_size=vocab), runtime="cpu").stages[0].peak
        assert peak.kind == kind
        assert abs(peak.peak / MiB - measured) / measured <= 0.01
