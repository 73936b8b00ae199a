"""The training step a YAML asks for: recompute saves memory under every form MindFormers accepts when the
launcher trains it on CPU (what the estimate says it assumes: tests/unit/test_step_forms.py)."""

from __future__ import annotations

import pytest

from benchmarks.step_forms import FORMS, config_for


# Every step form trains the tiny Llama (4 layers, hidden 256, seq 256, batch 4, float32) for one step.
# Full recompute must lower the pool peak by at least a quarter and the MLP cell's recompute must lower it;
# the form MindFormers writes when the section is absent and the dynamic scale without clip-grad (the forms
# that once raised the peak) run all three, the others none and full.
CELL_TOO = ("no runner_wrapper", "dynamic scale, no clip")


@pytest.mark.parametrize("form", FORMS)
def test_recompute_lowers_the_peak_under_every_step_form(form, tmp_path):
    from mf_memopt.estimate.measure import measure_peak

    peaks = {recompute: measure_peak(config_for(form, recompute, tmp_path), runtime="cpu").peak_bytes
             for recompute in (("none", "full", "cell") if form in CELL_TOO else ("none", "full"))}
    assert peaks["full"] <= 0.75 * peaks["none"], peaks
    if "cell" in peaks:
        assert peaks["cell"] < peaks["none"], peaks
