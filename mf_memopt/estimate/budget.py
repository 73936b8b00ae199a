"""The device-memory budget of a training YAML: what `estimate`'s "fits" and `auto` hold each stage to.

On Ascend the budget is the YAML's `context.max_device_memory`, read as MindSpore reads it:
- MindFormers passes the string to `mindspore.runtime.set_memory(max_size=...)`
  (`mindformers/core/context/build_context.py`, `_MSContextApplier._apply_memory`); MindSpore accepts
  `<number>GB` (`mindspore/runtime/memory.py`, `_MEMORY_PATTERN`, `set_memory`: `float(max_size[:-2])`) and
  sizes its memory pool at that number times `kGBToByte = 1024 << 20`
  (`AscendMemAdapter::GetDeviceMemSizeFromContext`; the constant in `mindspore/include/.../convert_utils_base.h`):
  "58GB" is 58 GiB.
- A value above the card's memory (64 on a 910B or 910_93, 32 on a 910A, 43 on a 310P) is not a cap: the pool
  then takes 15/16 of the free device memory less 10 MiB (`AscendMemAdapter::Initialize`, `kMSMemoryRatio`).
- A YAML without the key gets "58GB" from MindFormers' template (`mindformers/tools/register/template.py`,
  `ContextConfig.max_device_memory`, applied by `ConfigTemplate.apply_template` to every YAML read from a file).
- The pool is everything MindSpore allocates (parameters, optimizer states, activations, workspaces); HCCL's
  buffers and the runtime's own memory come from the rest of the card (`AscendMemAdapter::Initialize`,
  "Reserved MOC size for Other Components(HCCL/rts/etc.)"), so nothing else is subtracted.

The cpu runtime has no such key (MindSpore applies `max_device_memory` on Ascend and GPU only:
`mindspore/context.py`, `_check_target_specific_cfgs`): its budget is the one given on the command line, and
`estimate` without one compares against `CPU_DEFAULT`, saying so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..document.errors import ConfigIssue
from ..document.source import Source

KEY = ("context", "max_device_memory")
GB = 2**30                                  # MindSpore's kGBToByte: 1024 << 20
TEMPLATE_DEFAULT = "58GB"                   # MindFormers' ContextConfig.max_device_memory
PATTERN = re.compile(r"[1-9][0-9]*(\.)?[0-9]*GB|0\.[0-9]*GB")   # MindSpore's _MEMORY_PATTERN
CARD_GB = 64.0                              # a 910B / 910_93 card: GetDeviceMemSizeFromContext's total_device_memory
POOL_SHARE = 15 / 16                        # kMSMemoryRatio: the pool's share of the free memory without a cap
POOL_HELD_BACK = 10 * 2**20                 # kExtraReservedMemory
CPU_DEFAULT = 64 * 2**30


@dataclass(frozen=True, slots=True)
class Budget:
    """Bytes of device memory each stage may use, and where that number came from (shown to users)."""

    nbytes: int
    source: str


def device_budget(source: Source, runtime: str, override: int | None = None,
                  issues: list[ConfigIssue] | None = None) -> Budget:
    """The budget: `override` (the command line's `--device-memory`) when given; else on Ascend the YAML's
    `context.max_device_memory` as MindSpore sizes its pool, or MindFormers' template default without the key;
    on cpu `CPU_DEFAULT`. A value MindSpore would reject is reported in `issues` (the template default stands in)."""
    if override is not None:
        return Budget(override, "--device-memory")
    if runtime == "cpu":
        return Budget(CPU_DEFAULT, "the estimate's default for the cpu runtime (context.max_device_memory is an "
                                   "Ascend/GPU key; give --device-memory)")
    written = source.get(KEY)
    if written is None:
        return Budget(pool_bytes(TEMPLATE_DEFAULT), f"MindFormers' default max_device_memory {TEMPLATE_DEFAULT} "
                                                    "(the YAML has no context.max_device_memory)")
    text = str(written).strip()
    if not isinstance(written, str) or PATTERN.fullmatch(text) is None or float(text[:-2]) == 0:
        if issues is not None:
            issues.append(source.issue(KEY, f"{written!r} is not a size MindSpore accepts",
                                       'write a number of GB above 0 as MindSpore reads it, e.g. "58GB" (GB: 2**30)'))
        return Budget(pool_bytes(TEMPLATE_DEFAULT), "MindFormers' default (context.max_device_memory is invalid)")
    line = source.line_of(KEY)
    where = source.file_of(KEY) + (f":{line}" if line else "")
    nbytes = pool_bytes(text)
    if float(text[:-2]) > CARD_GB:
        return Budget(nbytes, f"context.max_device_memory {text} ({where}) is above a 64 GB card: MindSpore's pool "
                              "takes 15/16 of the free memory less 10 MiB, here of a whole 64 GiB card")
    return Budget(nbytes, f"context.max_device_memory {text} ({where})")


def pool_bytes(text: str) -> int:
    """MindSpore's memory pool for a `<number>GB` value: the number times 2**30, or, above the card's
    memory, 15/16 of a free 64 GiB card rounded down to 2 MiB less 10 MiB."""
    value = float(text[:-2])
    if value <= CARD_GB:
        return int(value * GB)
    share = int(CARD_GB * GB * POOL_SHARE)
    return share // (2 * 2**20) * (2 * 2**20) - POOL_HELD_BACK
