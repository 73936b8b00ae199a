"""The normalised config: every recompute, swap and compress setting as a rule over a set of layers.

`normalise.normalise` reads the schema-valid sections once (`recompute.py`, `swap.py`, `compress.py`,
through one `SectionReader`) and never looks at the raw YAML again. Each rule keeps its
origin (key path and line) so later stages can name it. What the sections mean when they
name no pattern is the model family's (`family.Defaults`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from ..document.errors import key_path
from ..document.source import KeyPath

Prefetch = int | str  # an int >= 0, or "Auto"

RECOMPUTE: KeyPath = ("recompute_config",)
SWAP: KeyPath = ("swap_config",)
COMPRESS: KeyPath = ("compress_config",)


class Kind(StrEnum):
    SELECT = "select_recompute"
    COMM = "select_comm_recompute"
    EXCLUDE = "select_recompute_exclude"
    COMM_EXCLUDE = "select_comm_recompute_exclude"


@dataclass(frozen=True, slots=True, kw_only=True)
class Origin:
    """Where a rule was written: its key path and line in the YAML (and the file, when inherited)."""

    path: KeyPath
    line: int | None
    file: str | None = None     # set when the rule comes from a base_config file

    @property
    def key(self) -> str:
        return key_path(self.path)

    def describe(self) -> str:
        where = f"{self.file} line" if self.file else "line"
        return f"{self.key}, {where} {self.line}" if self.line is not None else self.key

    def to_dict(self) -> dict:
        return {"key": self.key, "line": self.line, **({"file": self.file} if self.file else {})}


@dataclass(frozen=True, slots=True, kw_only=True)
class FullRecompute:
    layers: frozenset[int]
    origin: Origin


@dataclass(frozen=True, slots=True, kw_only=True)
class PatternRule:
    kind: Kind
    pattern: str
    layers: frozenset[int]
    origin: Origin
    default: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class SwapRule:
    """Offload of whole layers (`pattern` None) or of the cells/operators a pattern matches."""

    pattern: str | None
    prefetch: Prefetch
    layers: frozenset[int]
    origin: Origin
    default: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class CompressRule:
    """The input a Linear-like cell keeps for its weight gradient, kept compressed in these layers."""

    pattern: str
    method: str
    group_size: int
    layers: frozenset[int]
    origin: Origin
    offload: Prefetch | None = None   # backward_prefetch of the compressed copy (compress_dense: level1)
    dense: bool = False               # expanded from compress_dense


@dataclass(frozen=True, slots=True, kw_only=True)
class RecomputeOptions:
    """Keyword options for Cell.recompute on full-recompute layers; None when not written."""

    recompute_slice_activation: bool | None = None
    mp_comm_recompute: bool | None = None
    parallel_optimizer_comm_recompute: bool | None = None

    def kwargs(self) -> dict[str, bool]:
        return {name: value for name in self.__slots__ if (value := getattr(self, name)) is not None}


@dataclass(frozen=True, slots=True, kw_only=True)
class Rules:
    swap: bool
    full: FullRecompute
    patterns: tuple[PatternRule, ...]
    swaps: tuple[SwapRule, ...]
    options: RecomputeOptions
    compresses: tuple[CompressRule, ...] = ()

    def of_kind(self, kind: Kind) -> tuple[PatternRule, ...]:
        return tuple(rule for rule in self.patterns if rule.kind is kind)
