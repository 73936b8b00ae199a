"""The training step a YAML asks for: recompute saves memory under the forms that once raised the peak when the
launcher trains them on CPU (what the estimate says it assumes: tests/unit/test_step_forms.py)."""

from __future__ import annotations

import pytest

from benchmarks.step_forms import config_for


# Two step forms train the tiny Llama (4 layers, hidden 256, seq 256, batch 4, float32) for one step each: the form
# MindFormers writes when the section is absent and the dynamic scale without clip-grad, the forms that once raised
# the peak. Full recompute must lower the pool peak by at least a quarter and the MLP cell's recompute must lower it.
# Every form MindFormers accepts, on both families, is measured by `python benchmarks/step_forms.py` (table (f2) of
# benchmarks/README.md); the estimate's reading of each form is tests/unit/test_step_forms.py.
ONCE_RAISED = ("no runner_wrapper", "dynamic scale, no clip")


@pytest.mark.parametrize("form", ONCE_RAISED)
def test_recompute_lowers_the_peak_under_the_step_forms_that_once_raised_it(form, tmp_path):
    from mf_memopt.runs.measure import measure_peak

    peaks = {recompute: measure_peak(config_for(form, recompute, tmp_path), runtime="cpu").peak_bytes
             for recompute in ("none", "full", "cell")}
    assert peaks["full"] <= 0.75 * peaks["none"], peaks
    assert peaks["cell"] < peaks["none"], peaks
