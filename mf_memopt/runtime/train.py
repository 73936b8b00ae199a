"""Train the prepared model with MindFormers' own Trainer and the user's training sections.

`Trainer(args=config, model=network).train()` trains exactly the network object it is given
(a PreTrainedModel is not rebuilt unless `reset_model` is set), so mf_memopt's marks stay. The
Trainer reads the YAML's dataset, optimizer, lr schedule, wrapper, callbacks, checkpoint and
resume settings. What it lacks on CPU is filled in here and said once in the log:
- `runner_wrapper: MFTrainOneStepCell` becomes CPUTrainOneStepCell (cpu_wrapper.py);
- `--train_steps N` stops after N steps (MindFormers' own `runner_config.stop_step` is not
  wired to any callback in 1.9), and the checkpoint callback still saves the last step.

With `--record_steps FILE` (what `python -m mf_memopt compare` reads) rank 0 writes one JSON line
per step: the loss, the global gradient norm, the overflow flag and the loss scale, each the
float32 the step returned (a float64 holds it exactly, so equal numbers in two records are equal
bits); after the last step one more line holds a SHA-256 digest of every trainable parameter.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
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
        if config.get("use_legacy", True) is False and not config.runner_wrapper.get("use_clip_grad", False):
            LOGGER.info("use_clip_grad is False: the step reports the gradients' global norm without clipping by it "
                        "(MindFormers reports None, which an mcore model's step cannot return on CPU)")


def step_values(outputs: Any) -> dict[str, Any]:
    """Loss, overflow, loss scale and global norm of one step's outputs, as exact Python numbers.

    A MindFormers train-one-step cell returns (loss, overflow, scaling_sens, learning_rate, global_norm[, ...]);
    a plain one returns the loss alone. The global norm is None when clip-grad is off, except on an mcore model
    (`cpu_wrapper`, 5.).
    """
    items = list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]
    names = ("loss", "overflow", "loss_scale", "learning_rate", "global_norm")
    values = {}
    for name, item in zip(names, items):
        values[name] = None if item is None else _number(item)
    return values


def _number(item: Any) -> Any:
    value = item.asnumpy().reshape(-1)[0] if hasattr(item, "asnumpy") else item
    return bool(value) if str(getattr(value, "dtype", "")) == "bool" or isinstance(value, bool) else float(value)


def parameter_digests(network: Any) -> dict[str, str]:
    """SHA-256 of each trainable parameter's bytes, by name."""
    return {param.name: hashlib.sha256(param.asnumpy().tobytes()).hexdigest() for param in network.trainable_params()}


def progress_callback(progress: Progress, cap: int | None, record: Path | None = None) -> Any:
    from mindspore.train.callback import Callback

    class _Progress(Callback):
        """Records losses (and with `record`, each step's numbers), stops after `cap` steps, and says once what
        MindFormers' noise was."""

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
            if record is not None:
                _append(record, {"step": progress.step, **step_values(outputs)})
            if cap is not None and progress.step >= cap:
                run_context.request_stop()

        def on_train_end(self, run_context):
            if record is not None:
                _append(record, {"parameters": parameter_digests(run_context.original_args().train_network)})

    return _Progress()


def _append(path: Path, entry: dict[str, Any]) -> None:
    with path.open("a", encoding="utf-8") as out:
        out.write(json.dumps(entry, sort_keys=True) + "\n")


def train(network: Any, config: Any, *, device_target: str, steps: int | None = None,
          progress: Progress | None = None, compile_only: bool = False, record: Path | None = None) -> Progress:
    """Run MindFormers' Trainer on `network` with `config` (a MindFormerConfig).

    `compile_only` (for `verify`, under MS_DEV_PRECOMPILE_ONLY=1) runs one step without the
    YAML's callbacks, which expect real outputs: MindSpore compiles the step and returns None.
    """
    from mindformers import Trainer

    progress = progress or Progress()
    if device_target == "CPU":
        use_cpu_wrapper(config)
    if compile_only:
        config.callbacks = []
        steps = 1
    trainer = Trainer(args=config, model=network, callbacks=[progress_callback(progress, steps, record)])
    trainer.train()
    progress.finished = True
    return progress
