"""Before a run writes anything: can this machine train the YAML where it asks to be trained?

The device is the YAML's (`config.device.device_of`: Ascend when it does not say). A run never moves
to another device: when MindSpore cannot load the device, the run stops in one line that names the
device, MindSpore's reason and how to choose CPU.

Pipeline parallelism needs MindSpore's semi-auto parallel mode, which its CPU backend cannot compile
("Invalid communication backend: CPU for semi_auto_parallel/auto_parallel mode", measured here with
MindSpore 2.9). So on CPU a pipeline config stops here; on Ascend it needs the distributed launcher,
because MindFormers' Trainer trains a stand-alone job with `pipeline_stage` reset to 1
(`mindformers/trainer/base_trainer.py`, `BaseTrainer._check_global_batch_size_for_auto_parallel`).
"""

from __future__ import annotations

from ..config.device import CHOOSE_CPU, Device, device_of
from ..config.load import Document
from ..config.plan import Plan
from .errors import LaunchError

CPU_WORKS = "validate, plan, estimate and auto work here: `python -m mf_memopt plan {config}`"
_LOAD_ERROR = "Load dynamic library"


def require_loadable(device: Device) -> None:
    """`LaunchError` unless this MindSpore can load `device` (nothing is set). CPU always loads: asking MindSpore
    is left to the build, so the checks before it run where MindSpore is not installed."""
    if device.cpu:
        return
    from mindspore import hal

    if hal.is_available(device.target):
        return
    raise LaunchError(f"context.device_target is {device.describe()}, and this MindSpore cannot load it: "
                      f"{_reason(device.target)}; nothing was trained ({CHOOSE_CPU})")


def _reason(target: str) -> str:
    """MindSpore's own reason, from the error `set_device` raises: its first sentence and the first library that
    failed to load."""
    import mindspore as ms

    try:
        ms.set_device(target)
    except (RuntimeError, ValueError) as error:
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        first = lines[0].split(". ")[0] if lines else type(error).__name__
        loads = [line for line in lines if line.startswith(_LOAD_ERROR)]
        return f"{first} ({loads[0]})" if loads else first
    return "mindspore.hal.is_available says it is not available"


def require_pipeline_support(stages: int, device: Device, *, use_parallel: bool, config: str) -> None:
    """`LaunchError` for a pipeline config (`stages` > 1) on CPU, or on Ascend outside the distributed launcher."""
    if stages < 2:
        return
    if device.cpu:
        raise LaunchError(f"{config}: pipeline_stage is {stages}: MindSpore's CPU backend cannot compile pipeline "
                          "parallelism ('Invalid communication backend: CPU for semi_auto_parallel'); nothing was "
                          f"built or written. {CPU_WORKS.format(config=config)}; training and verify run on Ascend")
    if not use_parallel:
        raise LaunchError(f"{config}: pipeline_stage is {stages}: pipeline parallelism trains under msrun with "
                          "--use_parallel True (MindFormers trains a stand-alone job with pipeline_stage 1): "
                          "bash scripts/msrun_launcher.sh \"run_mindformer_memopt.py --config "
                          f"{config} --run_mode train --use_parallel True\" WORKERS")


def preflight_compile(document: Document, plan: Plan) -> Device:
    """What `verify` checks before it compiles: the device of the YAML, loadable here, and no pipeline stages on
    CPU. On Ascend a pipeline config compiles under msrun, one worker per rank (`verify/pipeline.py`)."""
    device = device_of(document.source)
    require_loadable(device)
    require_pipeline_support(plan.layout.stages, device, use_parallel=True, config=document.source.file)
    return device
