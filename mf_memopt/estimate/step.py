"""The training step a YAML asks for, as MindFormers builds it: what the estimate assumes and prints.

MindFormers fills `runner_wrapper` from its template, key by key: a YAML without the section, or
without `use_clip_grad` or `scale_sense` in it, trains with `MFTrainOneStepCell`, clip-grad on and a
`DynamicLossScaleUpdateCell` loss scale (65536, factor 2, window 1000). On CPU the launcher runs every
form through `CPUTrainOneStepCell`, which keeps recompute saving memory in each of them
(`runtime/cpu_wrapper.py`); what still differs between forms in memory is clip-grad (it holds the
gradients as float32 casts) and the loss-scale cell's few scalars.

Gradient accumulation is part of the step too, but MindFormers runs it only under semi-auto or auto
parallel without pipeline stages (`BaseTrainer._check_grad_accumulation_steps`); elsewhere, CPU included,
it resets `gradient_accumulation_steps` to 1 with a warning, and so does the estimate.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..document.source import Source

WRAPPER = ("runner_wrapper",)
TEMPLATE_CLIP = True                        # MindFormers' WrapperConfig.use_clip_grad
TEMPLATE_SCALE = "DynamicLossScaleUpdateCell"
ACCUMULATION = ("runner_config", "gradient_accumulation_steps")
ACCUMULATING_MODES = {1, 2, "semi_auto_parallel", "auto_parallel"}


@dataclass(frozen=True, slots=True)
class StepForm:
    wrapper: str
    clip_grad: bool
    loss_scale: str                         # "1.0" (a number), "DynamicLossScaleUpdateCell", ...
    defaults: tuple[str, ...] = ()          # what MindFormers' template filled in
    accumulation: int = 1                   # gradient accumulation steps that take effect
    accumulation_written: int = 1           # runner_config.gradient_accumulation_steps as written

    def describe(self) -> str:
        filled = f" ({', '.join(self.defaults)} from MindFormers' template)" if self.defaults else ""
        scale = f"loss scale {self.loss_scale}"
        text = f"{self.wrapper}, clip-grad {'on' if self.clip_grad else 'off'}, {scale}{filled}"
        if self.accumulation > 1:
            text += f", gradient accumulation {self.accumulation}"
        elif self.accumulation_written > 1:
            text += (f"; gradient_accumulation_steps {self.accumulation_written} is reset to 1 by MindFormers "
                     "(it runs only under semi-auto or auto parallel without pipeline stages)")
        return text


def accumulation(source: Source) -> tuple[int, int]:
    """(steps that take effect, steps as written), as MindFormers' trainer decides."""
    written = source.get(ACCUMULATION)
    written = written if isinstance(written, int) and not isinstance(written, bool) and written > 1 else 1
    mode = source.get(("parallel", "parallel_mode"), 0)
    stages = source.get(("parallel_config", "pipeline_stage"), 1)
    runs = bool(source.get(("use_parallel",), False)) and mode in ACCUMULATING_MODES and stages in (1, None)
    return (written if runs else 1), written


def step_form(source: Source) -> StepForm:
    section = source.get(WRAPPER)
    section = section if isinstance(section, dict) else {}
    defaults = []
    wrapper = section.get("type")
    if not isinstance(wrapper, str):
        wrapper, defaults = "MFTrainOneStepCell", ["the wrapper"]
    clip = section.get("use_clip_grad")
    if not isinstance(clip, bool):
        clip = TEMPLATE_CLIP
        defaults.append("clip-grad")
    scale = section.get("scale_sense")
    if isinstance(scale, dict):
        scale = str(scale.get("type", TEMPLATE_SCALE))
    elif isinstance(scale, (int, float)) and not isinstance(scale, bool):
        scale = f"{float(scale):g}"
    else:
        scale = TEMPLATE_SCALE
        defaults.append("the loss scale")
    effective, written = accumulation(source)
    return StepForm(wrapper=wrapper, clip_grad=clip, loss_scale=scale, defaults=tuple(defaults),
                    accumulation=effective, accumulation_written=written)
