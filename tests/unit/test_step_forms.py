"""The training step a YAML asks for: what the estimate says it assumes (`benchmarks/step_forms.py` trains every
form; tests/mindspore/test_step_forms.py the forms that once raised the peak)."""

from __future__ import annotations

import pytest

from benchmarks.step_forms import FORMS
from mf_memopt.document.source import Source, load_source
from mf_memopt.estimate.step import step_form

TEMPLATE = "MFTrainOneStepCell, clip-grad on, loss scale DynamicLossScaleUpdateCell"
DESCRIBED = {
    "no runner_wrapper": f"{TEMPLATE} (the wrapper, clip-grad, the loss scale from MindFormers' template)",
    "scale 1, clip": "MFTrainOneStepCell, clip-grad on, loss scale 1",
    "scale 1, no clip": "MFTrainOneStepCell, clip-grad off, loss scale 1",
    "dynamic scale, clip": "MFTrainOneStepCell, clip-grad on, loss scale DynamicLossScaleUpdateCell",
    "dynamic scale, no clip": "MFTrainOneStepCell, clip-grad off, loss scale DynamicLossScaleUpdateCell",
    "fixed scale, clip": "MFTrainOneStepCell, clip-grad on, loss scale FixedLossScaleUpdateCell",
}


def _source(document: dict) -> Source:
    return load_source(document)


@pytest.mark.parametrize("form", FORMS)
def test_the_estimate_names_the_step_it_assumes(form):
    document = {} if FORMS[form] is None else {"runner_wrapper": FORMS[form]}
    assert step_form(_source(document)).describe() == DESCRIBED[form]


def test_a_partial_section_is_completed_from_mindformers_template():
    form = step_form(_source({"runner_wrapper": {"type": "MFTrainOneStepCell", "scale_sense": 1024}}))
    assert form.describe() == "MFTrainOneStepCell, clip-grad on, loss scale 1024 (clip-grad from MindFormers' template)"


@pytest.mark.parametrize(("document", "effective"), [
    ({"runner_config": {"gradient_accumulation_steps": 4}}, 1),                         # stand-alone
    ({"use_parallel": True, "parallel": {"parallel_mode": 0},
      "runner_config": {"gradient_accumulation_steps": 4}}, 1),                          # data parallel
    ({"use_parallel": True, "parallel": {"parallel_mode": 1},
      "runner_config": {"gradient_accumulation_steps": 4}}, 4),                          # semi-auto
    ({"use_parallel": True, "parallel": {"parallel_mode": "auto_parallel"},
      "runner_config": {"gradient_accumulation_steps": 4}}, 4),
    ({"use_parallel": True, "parallel": {"parallel_mode": 1}, "parallel_config": {"pipeline_stage": 2},
      "runner_config": {"gradient_accumulation_steps": 4}}, 1),                          # pipeline stages
])
def test_gradient_accumulation_counts_only_where_mindformers_runs_it(document, effective):
    form = step_form(_source(document))
    assert (form.accumulation, form.accumulation_written) == (effective, 4)
    if effective == 1:
        assert "gradient_accumulation_steps 4 is reset to 1 by MindFormers" in form.describe()
    else:
        assert form.describe().endswith(", gradient accumulation 4")


# Every step form trains the tiny Llama (4 layers, hidden 256, seq 256, batch 4, float32) for one step.
# Full recompute must lower the pool peak by at least a quarter and the MLP cell's recompute must lower it;
# the form MindFormers writes when the section is absent and the dynamic scale without clip-grad (the forms
# that once raised the peak) run all three, the others none and full.
