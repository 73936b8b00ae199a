"""The device a training YAML trains on: one rule, read by every command.

`context.device_target` names it. A YAML without it means Ascend, as in MindFormers: its context
template writes `device_target = "Ascend"` into a config that lacks it (`mindformers/tools/register/template.py`,
`ContextConfig`), and its context answers "Ascend" when none was set (`mindformers/core/context/build_context.py`,
`MFContextOperator.get_context`). mf_memopt trains on Ascend and on CPU;
any other target MindSpore knows (GPU) is refused, and MindSpore spells the names one way only
(`mindspore.set_device`: "CPU", "GPU", "Ascend").
"""

from __future__ import annotations

from dataclasses import dataclass

from ..document.errors import ConfigError, ConfigIssue, shown
from ..document.source import KeyPath, Source

DEVICE_TARGET: KeyPath = ("context", "device_target")
DEFAULT_DEVICE = "Ascend"
SUPPORTED_DEVICES = ("Ascend", "CPU")
CHOOSE_CPU = "set context.device_target: CPU to run on this machine's CPU"


@dataclass(frozen=True, slots=True, kw_only=True)
class Device:
    """The device of one YAML: `target` as MindSpore spells it, and whether the YAML wrote it."""

    target: str
    written: bool

    @property
    def cpu(self) -> bool:
        """CPU-only code (stand-in kernels, the CPU training step, the router change) runs when this is true."""
        return self.target == "CPU"

    @property
    def runtime(self) -> str:
        """The estimator's and compare's name for it: `ascend` or `cpu`."""
        return self.target.lower()

    def describe(self) -> str:
        """`Ascend`, or `Ascend (MindFormers' default: context.device_target is not set)`."""
        default = "MindFormers' default: context.device_target is not set"
        return self.target if self.written else f"{self.target} ({default})"


def device_issues(source: Source) -> list[ConfigIssue]:
    """An error at `context.device_target` when it names a target mf_memopt does not train on."""
    target = source.get(DEVICE_TARGET)
    if target is None or target in SUPPORTED_DEVICES:
        return []
    spelled = {name.lower(): name for name in SUPPORTED_DEVICES}.get(str(target).lower())
    hint = f"did you mean `{spelled}`?" if spelled else CHOOSE_CPU
    return [source.issue(DEVICE_TARGET, f"is {shown(target)!r}: mf_memopt supports {' and '.join(SUPPORTED_DEVICES)}",
                         hint)]


def device_of(source: Source) -> Device:
    """The device `source` trains on (Ascend when it does not say); `ConfigError` for a target not supported."""
    issues = device_issues(source)
    if issues:
        raise ConfigError(issues)
    target = source.get(DEVICE_TARGET)
    return Device(target=target or DEFAULT_DEVICE, written=target is not None)
