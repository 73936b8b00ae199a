"""Which codec quantises: the fused C++ kernels where they can run, else the graph-operator reference.

`MF_MEMOPT_CODEC` decides: unset or `auto`, the fused codec on the CPU backend when its kernels build and
load, the reference otherwise (the reason is kept for the log and the apply report); `reference`, the graph
operators always; `fused`, the kernels or an error. On Ascend and GPU the kernels (CPU code) do not apply, and
the reference runs. docs/compression.md has the measurements.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from .build import BuildError, library

CODEC_ENV = "MF_MEMOPT_CODEC"
CHOICES = ("auto", "fused", "reference")


@dataclass(frozen=True, slots=True)
class CodecChoice:
    name: str               # "fused" or "reference"
    reason: str             # why this codec, for the log line
    library: str | None = None

    def make(self, bits: int, group_size: int, seed: int) -> Any:
        """A codec cell for one compressed input."""
        if self.name == "fused":
            from .fused import FusedCodec

            return FusedCodec(str(self.library), bits, group_size, seed=seed)
        from .codec import GroupCodec

        return GroupCodec(bits, group_size, seed=seed)

    def line(self) -> str:
        """The log line naming the codec."""
        kind = "C++ kernels, ops.Custom aot" if self.name == "fused" else "MindSpore graph operators"
        return f"Compression codec: {self.name} ({kind}) for int8/int4/int2: {self.reason}"


def choose_codec(device_target: str | None) -> CodecChoice:
    """The codec for this process and backend; ValueError for a bad `MF_MEMOPT_CODEC`, or when `fused` is demanded
    and cannot run."""
    wanted = os.environ.get(CODEC_ENV, "auto").strip().lower() or "auto"
    if wanted not in CHOICES:
        raise ValueError(f"{CODEC_ENV}={wanted!r}: expected one of {', '.join(CHOICES)}")
    if wanted == "reference":
        return CodecChoice("reference", f"{CODEC_ENV}=reference")
    problem = _fused_problem(device_target)
    if problem is None:
        found = library()
        return CodecChoice("fused", f"{found.path} ({found.compiler})", str(found.path))
    if wanted == "fused":
        raise ValueError(f"{CODEC_ENV}=fused, but the fused codec cannot run: {problem}")
    return CodecChoice("reference", problem)


def _fused_problem(device_target: str | None) -> str | None:
    if device_target != "CPU":
        return f"the fused kernels are CPU code and the backend is {device_target or 'unknown'}"
    try:
        found = library()
    except BuildError as error:
        return f"the fused kernels did not build: {error}"
    try:
        from .fused import FusedCodec

        FusedCodec(str(found.path), 8, 256)     # MindSpore may refuse the library's path (MS_CUSTOM_AOT_WHITE_LIST)
    except (TypeError, ValueError, RuntimeError) as error:
        return f"MindSpore refused the fused kernels: {error}"
    return None
