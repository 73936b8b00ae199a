"""The CPU estimate of the Llama against its later generated sets (`benchmarks/sweep.py measure --exact --set S`).

A set is held out while no estimator term has been changed because of it: `wide` (the draw off the grids: every key
a user writes; peaks replayed to the byte) was measured before the estimator first saw it and none of its misses
changed a term; nor has `wide6` (seed 20261223), drawn and measured while c00's and c09's terms were made
and first compared after them (11/11 within 5%). `wide5` (seed 20261219), drawn and measured while i09's terms were made, was held out until its c00
(+5.9% at first comparison) and c09 (-6.4%) changed the Llama's reading of `qkv_concat` (one fused `w_qkv` and
`w_gate_hidden` Linear, so one float32 copy of each normalised input and the fused gate-up weight as the largest
update: `models/llama/inventory.py`, `linear_names`) and the embedding's early AdamW copies, freed with its update
before the largest weight's (`cpu_step.optimizer_steps`): it is fitted now. `wide4` (seed 20261215), drawn and
measured while b09's terms were made, was held out until its i09
(+6.9% at first comparison) changed the causal mask without flash attention to the compute dtype (`cpu_mask_bytes`)
and, with the configs that mask had hidden (the sweep's s09 and s20, fresh6's t03, fresh4's q09), the attention
backward of a float16 recomputed attention (`cpu_memory._attention_backward`): it is fitted now. The others are
fitted: fresh9 and fresh10 had terms changed for their first misses (w05 and w11,
x00); `wide2`'s a10 (-7.8%) changed the optimizer's last moment for float16 parameters with float32 norms
(`cpu_step.half_parameters_float32_norms`), and fresh7, fresh8 and fresh11 were read to decide that term (u04, u07,
v11, y14); `wide3` (seed 20261211) was held out until its b09 (-20.0% at first comparison) changed the flash-attention
stand-in's terms (`models/llama/inventory.py`, `cpu_attention_model` and `cpu_mask_bytes`: a float32 softmax
whatever `softmax_compute_type` says, a uint8 causal mask). The configs that the optimizer term moves in the sets
measured before the CPU step's loss-scale change (04b5038) were measured again with today's launcher (each such
entry names its `launcher`). fresh9 varies the training step and is in whole MiB with two configs to the byte; the
others are to the byte.

The peaks are data in `benchmarks/data/`; nothing here is typed by hand. Among them are configs at the
optimizer's "end of clip-grad" checkpoint (u07, v11) and configs whose cast weights are recomputed, so a
model change that breaks a term the sets exercise fails here before a sweep is re-run.
"""

from __future__ import annotations

import json

import pytest
from sweep_cases import sweep_cases

from benchmarks.sweep import TARGET, _data_file, generate, measured_reference
from mf_memopt.estimate import estimate_config

HELD_OUT = ("wide", "wide6")
FITTED = ("fresh7", "fresh8", "fresh9", "fresh10", "fresh11", "wide2", "wide3", "wide4", "wide5")
# Known misses, each strict: the day the estimate gets it right, the mark has to go. (w05, over by 6.0% at the
# optimizer step, was one until the legacy Llama's updates ran one at a time after clip-grad; a10, -7.8% at the end of
# clip-grad, until the order of that moment was read again with today's CPU step; b09, -20.0% at a recomputed
# attention's backward, until the flash-attention stand-in's float32 softmax and uint8 mask were counted; i09, +6.9%
# at the end of the forward, until the causal mask without flash attention was counted in the compute dtype; c00,
# +5.9% at the end of the forward, and c09, -6.4% at the forward's first attention, until qkv_concat was read)
KNOWN: dict[str, str] = {}
CASES = sweep_cases((*HELD_OUT, *FITTED), generate, HELD_OUT, KNOWN)


def _recorded(which: str) -> dict[str, dict]:
    return {entry["name"]: entry for entry in json.loads(_data_file(which).read_text())["configs"]}


@pytest.mark.parametrize(("which", "config"), CASES)
def test_the_later_sets_stay_within_five_percent_of_their_peaks(which, config, tmp_path):
    entry = _recorded(which)[config.name]
    assert "exact_mib" in entry or which == "fresh9", f"{config.name}: the record is measured to the byte"
    estimated = estimate_config(config.write(tmp_path / f"{config.name}.yaml"), runtime="cpu").stages[0].peak.peak
    reference = measured_reference(entry)
    assert abs(estimated / 2**20 - reference) / reference <= TARGET



def test_the_wide_set_samples_every_key_it_names():
    """`--set wide` draws flash attention and qkv_concat both ways, grouped-query attention, partial full recompute,
    off-grid shapes, no runner_wrapper, clip-grad on and off and a dynamic loss scale; a generator change that stops
    drawing one of them fails here."""
    from benchmarks.step_forms import FORMS
    from benchmarks.sweep import HIDDEN, SEQ, VOCAB

    configs = generate("wide")
    models = [config.model for config in configs]
    assert {model["use_flash_attention"] for model in models} == {True, False}
    assert {model["qkv_concat"] for model in models} == {True, False}
    assert any("n_kv_heads" in model for model in models)
    assert any(isinstance(config.recompute_config["recompute"], list) for config in configs)
    steps = {config.step for config in configs}
    assert {"no runner_wrapper", "scale 1, clip", "scale 1, no clip"} <= steps <= set(FORMS)
    assert any(step.startswith("dynamic scale") for step in steps)
    assert any(model["hidden_size"] not in HIDDEN and model["seq_length"] not in SEQ
               and model["vocab_size"] not in VOCAB for model in models)
