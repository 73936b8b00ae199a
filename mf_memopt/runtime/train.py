"""Train the prepared model with MindFormers' own Trainer and the user's training sections.

`Trainer(args=config, model=network).train()` trains exactly the network object it is given
(a PreTrainedModel is not rebuilt unless `reset_model` is set), so mf_memopt's marks stay. The
Trainer reads the YAML's dataset, optimizer, lr schedule, wrapper, callbacks, checkpoint and
resume settings. What it lacks on CPU is filled in here and said once in the log:
- `runner_wrapper: MFTrainOneStepCell` becomes CPUTrainOneStepCell (cpu_wrapper.py);
- `--train_steps N` stops after N steps (MindFormers' own `runner_config.stop_step` is not
  wired to any callback in 1.9), and the checkpoint callback still saves the last step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..apply.logs import LOGGER
from . import interrupt
from .quiet import hidden_summary
from .supervise import report


@dataclass
class Progress:
    """What a run did, for the summary line and for an interrupted run's message."""

    step: int = 0                                        # steps of this run
    losses: list[float] = field(default_factory=list)
    finished: bool = False


def use_cpu_wrapper(config: Any) -> None:
    """On CPU, MindFormers' MFTrainOneStepCell becomes CPUTrainOneStepCell (same arguments)."""
    from .cpu_wrapper import CPU_WRAPPER, REPLACES

    if config.runner_wrapper is None:
        from mindformers.tools.register import MindFormerConfig

        config.runner_wrapper = MindFormerConfig(type=REPLACES, scale_sense=1.0)
    if config.runner_wrapper.type == REPLACES:
        config.runner_wrapper.type = CPU_WRAPPER
        LOGGER.info(f"runner_wrapper {REPLACES} runs on CPU as {CPU_WRAPPER}: the overflow check uses IsFinite "
                    "(NPUGetFloatStatusV2 has no CPU kernel), and an overflowing step applies zero gradients "
                    "instead of branching around the optimizer, so that recompute keeps saving memory")


def progress_callback(progress: Progress, cap: int | None) -> Any:
    from mindspore.train.callback import Callback

    class _Progress(Callback):
        """Records losses, stops after `cap` steps, and says once what MindFormers' noise was."""

        def on_train_begin(self, run_context):
            interrupt.install()
            summary = hidden_summary()
            if summary:
                LOGGER.info(summary)

        def on_train_step_begin(self, run_context):
            interrupt.install()

        def on_train_step_end(self, run_context):
            params = run_context.original_args()
            progress.step = int(params.cur_step_num)
            report(step=progress.step)
            outputs = params.net_outputs
            loss = outputs[0] if isinstance(outputs, (tuple, list)) else outputs
            if loss is not None:
                progress.losses.append(float(loss.asnumpy().reshape(-1)[0]))
            if cap is not None and progress.step >= cap:
                run_context.request_stop()

    return _Progress()


def train(network: Any, config: Any, *, device_target: str, steps: int | None = None,
          progress: Progress | None = None, compile_only: bool = False) -> Progress:
    """Run MindFormers' Trainer on `network` with `config` (a MindFormerConfig).

    `compile_only` (for `verify`, under MS_DEV_PRECOMPILE_ONLY=1) runs one step without the
    YAML's callbacks, which expect real outputs: MindSpore compiles the step and returns None.
    """
    from mindformers import Trainer

    progress = progress or Progress()
    if device_target != "Ascend":
        use_cpu_wrapper(config)
    if compile_only:
        config.callbacks = []
        steps = 1
    trainer = Trainer(args=config, model=network, callbacks=[progress_callback(progress, steps)])
    trainer.train()
    progress.finished = True
    return progress
