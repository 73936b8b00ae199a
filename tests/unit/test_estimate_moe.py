"""The CPU estimate of Qwen3-MoE layers against the measured record of `benchmarks/sweep_moe.py` (16 configs, 8
pairs: the build half read off to write the MoE terms, the second half measured with it; every peak replayed to
the byte). Both halves are fitted: the second half's first misses (m03, m02, m07) were traced and terms changed for
them. The peaks are data in `benchmarks/data/sweep_moe_peaks.json`, not typed here. Target: 10%.

The `wide` set (drawn off the grids, every key a user writes) is fitted: its x10 (-11.2% at first comparison) was
traced and the first attention's moment given the tied matrix's TensorMove copy that AdamW's decay reads. `wide2`
(seed 20261213) is fitted too: its f02 (-5.1% at first comparison; float32 without flash attention, fully
recomputed) was traced and three terms changed for it (q, k and v kept in the compute dtype without flash attention,
the first norm's early 2*x kept by full recompute, the causal mask held in the compute dtype where a recompute casts
it again). `wide3` (seed 20261217), drawn and measured while those terms were made and first compared after
them (10/10 within 5%, worst +1.6%), and `wide4` (seed 20261221), first compared after every term of 2026-11-26
(10/10, worst -3.3%), are held out. The wide sets are held to 5%, the target the dense families have."""

from __future__ import annotations

import json

import pytest
from sweep_cases import sweep_cases

from benchmarks.sweep import TARGET as WIDE_TARGET
from benchmarks.sweep import measured_reference
from benchmarks.sweep_moe import DATA, RECOMPUTE, WIDE_SETS, data_file, generate
from mf_memopt.estimate import estimate_config

TARGET = 0.10
# Known misses, each strict: the day the estimate gets it right, the mark has to go.
KNOWN: dict[str, str] = {}
CASES = [pytest.param(config, id=config.name,
                      marks=[pytest.mark.xfail(reason=KNOWN[config.name], strict=True)] if config.name in KNOWN else [])
         for config in generate()]


@pytest.mark.parametrize("config", CASES)
def test_the_moe_record_stays_within_ten_percent_of_its_peak(config, tmp_path):
    entry = {item["name"]: item for item in json.loads(DATA.read_text())["configs"]}[config.name]
    assert "measured_mib" in entry, f"{config.name}: {entry.get('error')}"
    estimated = estimate_config(config.write(tmp_path / f"{config.name}.yaml"), runtime="cpu").stages[0].peak.peak
    reference = measured_reference(entry)
    assert abs(estimated / 2**20 - reference) / reference <= TARGET


# Known misses of the wide sets, each strict: the day the estimate gets it right, the mark has to go.
WIDE_KNOWN: dict[str, str] = {}
WIDE_CASES = sweep_cases(WIDE_SETS, generate, ("wide3", "wide4"), WIDE_KNOWN)


@pytest.mark.parametrize(("which", "config"), WIDE_CASES)
def test_the_wide_moe_set_stays_within_five_percent_of_its_peak(which, config, tmp_path):
    entry = {item["name"]: item for item in json.loads(data_file(which).read_text())["configs"]}[config.name]
    assert "exact_mib" in entry, f"{config.name}: {entry.get('error', 'not measured to the byte')}"
    estimated = estimate_config(config.write(tmp_path / f"{config.name}.yaml"), runtime="cpu").stages[0].peak.peak
    reference = measured_reference(entry)
    assert abs(estimated / 2**20 - reference) / reference <= WIDE_TARGET


def test_the_sweep_covers_every_recompute_form_both_dtype_settings_and_routing_variants():
    from benchmarks.step_forms import FORMS
    from benchmarks.sweep_mcore import DTYPES

    configs = generate()
    assert {config.recompute for config in configs} == set(RECOMPUTE)
    assert {config.dtype for config in configs} == set(DTYPES)
    assert {config.step for config in configs} == set(FORMS)
    assert {config.model["num_experts_per_tok"] for config in configs} >= {1, 2, 3, 4}
    assert {config.model["norm_topk_prob"] for config in configs} == {True, False}
    assert {config.model["moe_router_load_balancing_type"] for config in configs} == {"gbs_aux_loss", "seq_aux_loss"}
