"""Pipeline layout: which layers each pipeline stage and interleave chunk holds.

MindFormers places layers in chunk-major order: chunk 0 of stage 0, 1, ..., pp-1, then
chunk 1 of every stage, and so on. Each (chunk, stage) holds
`num_layers // (pp * interleave) + offset[chunk][stage]` layers, while layers are left: an
integer or per-stage offset repeated over the stages and chunks can make more slots than layers.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from functools import cached_property
from itertools import accumulate
from typing import Any

from ..document.errors import ConfigIssue, key_path
from ..document.source import KeyPath, Source
from ..family import ModelKeys

PIPELINE_STAGE: KeyPath = ("parallel_config", "pipeline_stage")
PIPELINE_CONFIG: KeyPath = ("parallel", "pipeline_config")


@dataclass(frozen=True, kw_only=True)
class Layout:
    """Layer counts per (chunk, stage); `chunk_sizes[chunk][stage]`."""

    num_layers: int
    stages: int
    chunks: int
    chunk_sizes: tuple[tuple[int, ...], ...]
    stages_why: str = ""      # which keys set `stages` and `chunks`, for messages that depend on them
    chunks_why: str = ""

    @classmethod
    def even(cls, num_layers: int, stages: int = 1, chunks: int = 1) -> Layout:
        """Layers spread as evenly as possible, extra layers to the first chunks (no offsets)."""
        base, extra = divmod(num_layers, stages * chunks)
        flat = [base + (1 if index < extra else 0) for index in range(stages * chunks)]
        sizes = tuple(tuple(flat[v * stages:(v + 1) * stages]) for v in range(chunks))
        return cls(num_layers=num_layers, stages=stages, chunks=chunks, chunk_sizes=sizes)

    @cached_property
    def _starts(self) -> tuple[tuple[int, ...], ...]:
        flat = [size for row in self.chunk_sizes for size in row]
        starts = [0, *accumulate(flat)][:-1]
        return tuple(tuple(starts[v * self.stages:(v + 1) * self.stages]) for v in range(self.chunks))

    @cached_property
    def _positions(self) -> tuple[tuple[int, int], ...]:
        positions = []
        for chunk in range(self.chunks):
            for stage in range(self.stages):
                positions.extend([(stage, chunk)] * self.chunk_sizes[chunk][stage])
        return tuple(positions)

    def chunk_layers(self, chunk: int, stage: int) -> range:
        start = self._starts[chunk][stage]
        return range(start, start + self.chunk_sizes[chunk][stage])

    def position(self, layer: int) -> tuple[int, int]:
        """(stage, chunk) of a global layer index."""
        return self._positions[layer]

    def stage_size(self, stage: int) -> int:
        return sum(row[stage] for row in self.chunk_sizes)

    def chunk_counts(self, layers: frozenset[int]) -> list[list[int]]:
        """How many of `layers` each (chunk, stage) holds: MindFormers' 'Formative' form."""
        return [[sum(1 for layer in self.chunk_layers(v, p) if layer in layers) for p in range(self.stages)]
                for v in range(self.chunks)]


def integral_offsets(source: Source, keys: ModelKeys) -> tuple[Source, list[ConfigIssue]]:
    """`offset: 0.0` (or floats in its lists) read as the integers MindFormers casts them to, with a warning;
    other floats are left for the schema to refuse."""
    offset = source.get(keys.offset)
    cast = _cast_integral(offset)
    if cast is None or cast == offset and _same_types(cast, offset):
        return source, []
    data = copy.deepcopy(source.data)
    parent: Any = data
    for part in keys.offset[:-1]:
        parent = parent[part]
    parent[keys.offset[-1]] = cast
    warning = source.issue(keys.offset, f"{offset!r} is read as {cast!r}: MindFormers casts the offsets to integers",
                           "write them as integers", severity="warning")
    return replace(source, data=data), [warning]


def _cast_integral(value: Any) -> Any:
    """`value` with integral floats made integers, or None when some number is not integral."""
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    if isinstance(value, list):
        items = [_cast_integral(item) for item in value]
        return None if any(item is None for item in items) else items
    return value


def _same_types(a: Any, b: Any) -> bool:
    if isinstance(a, list) and isinstance(b, list):
        return all(_same_types(x, y) for x, y in zip(a, b))
    return type(a) is type(b)


def layout_from(source: Source, keys: ModelKeys, issues: list[ConfigIssue]) -> Layout | None:
    """Read the layout keys (the model's as its family spells them); append problems to `issues`; None when it
    cannot be built."""
    num_layers = source.get(keys.num_layers)
    if num_layers is None:
        issues.append(source.issue(keys.num_layers, "missing: the plan needs the number of decoder layers",
                                   f"set {key_path(keys.num_layers)}"))
        return None
    stages = source.get(PIPELINE_STAGE, 1)
    chunks = _interleave(source, keys, issues)
    offset = source.get(keys.offset, 0)
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in (num_layers, stages, chunks)):
        return None  # the schema has already reported it
    _reject_unsupported_scheduler(source, issues)
    _reject_seq_split(source, stages, issues)
    num_layers, counted = _laid_out(source, keys, num_layers)
    why = {"stages_why": _stages_why(source), "chunks_why": _chunks_why(source, keys, chunks), "counted": counted}
    sizes = _chunk_sizes(source, keys, num_layers, stages, chunks, offset, issues, why)
    if sizes is None:
        # The offsets were reported; an even layout still lets the other keys be checked.
        even = Layout.even(num_layers, stages, chunks)
        sizes = even.chunk_sizes
    return Layout(num_layers=num_layers, stages=stages, chunks=chunks, chunk_sizes=sizes,
                  stages_why=why["stages_why"], chunks_why=why["chunks_why"])


def _laid_out(source: Source, keys: ModelKeys, num_layers: int) -> tuple[int, str]:
    """The layers the pipeline lays out, and how they are counted: the decoder layers, plus the layers a family
    lays out after them (a legacy DeepSeek-V3's `mtp_depth` MTP layers)."""
    counted = f"{keys.num_layers[-1]} ({num_layers})"
    extra_key = keys.extra_layers
    extra = source.get(extra_key) if extra_key is not None else None
    if extra_key is not None and isinstance(extra, int) and not isinstance(extra, bool) and extra > 0:
        return num_layers + extra, f"{counted} + {extra_key[-1]} ({extra})"
    return num_layers, counted


def _stages_why(source: Source) -> str:
    stages = source.get(PIPELINE_STAGE)
    return "parallel_config.pipeline_stage is not set" if stages is None else \
        f"parallel_config.pipeline_stage is {stages}"


def _chunks_why(source: Source, keys: ModelKeys, chunks: int) -> str:
    """Which keys decided the number of interleave chunks, naming the one that switched it off."""
    asked, name = source.get(keys.interleave), key_path(keys.interleave)
    if asked is None:
        return f"{name} is not set"
    if isinstance(asked, int) and asked > chunks:
        return (f"{name} is {asked}, but parallel.pipeline_config.pipeline_interleave "
                "is not true, so each stage has 1 chunk")
    return f"{name} is {asked}"


def _interleave(source: Source, keys: ModelKeys, issues: list[ConfigIssue]) -> Any:
    chunks = source.get(keys.interleave, 1)
    enabled = source.get((*PIPELINE_CONFIG, "pipeline_interleave"), False)
    if isinstance(chunks, int) and chunks > 1 and enabled is not True:
        issues.append(source.issue(
            keys.interleave, f"{keys.interleave[-1]} is {chunks} but interleaved pipelining is off, so MindFormers "
            "uses 1 chunk per stage and so does this plan",
            "set parallel.pipeline_config.pipeline_interleave: true to use interleave chunks",
            severity="warning"))
        return 1
    return chunks


def _reject_unsupported_scheduler(source: Source, issues: list[ConfigIssue]) -> None:
    path = (*PIPELINE_CONFIG, "pipeline_scheduler")
    if source.get(path) == "zero_bubble_v":
        issues.append(source.issue(path, "the zero_bubble_v layer order is not supported by the planner",
                                   "use the 1f1b scheduler, or plan without pipeline interleave"))


SEQ_SPLIT: KeyPath = ("parallel_config", "seq_split_num")


def _reject_seq_split(source: Source, stages: int, issues: list[ConfigIssue]) -> None:
    """What MindFormers' trainer refuses when it wraps a pipeline model in `SequenceSplit` (seq_split_num > 1): its
    mcore models (use_legacy: False), and full recompute: any `recompute` Python reads as true, `[0, 0]` included
    (`base_trainer.py`, "When using seq pipe, cannot apply full recompute")."""
    split = source.get(SEQ_SPLIT, 1)
    if not (isinstance(split, int) and split > 1 and stages > 1):
        return
    if source.get(("use_legacy",), True) is False:
        issues.append(source.issue(SEQ_SPLIT, f"seq_split_num is {split}, which MindFormers refuses for its mcore "
                                   "models (use_legacy: False): \"seq_split_num > 1, is not supported when "
                                   "use_legacy=False\"", "set parallel_config.seq_split_num: 1"))
    if source.get(("recompute_config", "recompute"), False):
        issues.append(source.issue(("recompute_config", "recompute"), f"seq_split_num is {split} (seq pipe), and "
                                   "MindFormers refuses full recompute then, whatever the counts (it tests "
                                   "`recompute` for truth: [0, 0] is refused too)",
                                   "set recompute_config.recompute: False, or parallel_config.seq_split_num: 1"))


def _chunk_sizes(source: Source, keys: ModelKeys, num_layers: int, stages: int, chunks: int, offset: Any,
                 issues: list[ConfigIssue], why: dict[str, str]) -> tuple[tuple[int, ...], ...] | None:
    """The layers of each (chunk, stage), checked as MindFormers' `LayerSetting._check_inputs` checks the offsets
    (`parallel_core/training_graph/transformer/utils.py`), and laid out as it lays them out."""
    total = stages * chunks
    if total == 1:
        if offset not in (0, [0], [[0]], [], None):
            issues.append(source.issue(keys.offset, "offset is ignored with a single pipeline stage",
                                       "remove it or set parallel_config.pipeline_stage", severity="warning"))
        return ((num_layers,),)
    if _outnumbered(source, keys, num_layers, stages, chunks, issues, why):
        return None
    grid = _offset_grid(source, keys, offset, stages, chunks, issues, why)
    if grid is None:
        return None
    base, remainder = divmod(num_layers, total)
    if not _sum_as_written(source, keys, offset, remainder, (stages, chunks), issues, why):
        return None
    sizes = tuple(tuple(base + extra for extra in row) for row in grid)
    if not _sizes_valid(source, keys.offset, sizes, issues):
        return None
    return _filled(source, keys, sizes, num_layers, issues, why)


def _outnumbered(source: Source, keys: ModelKeys, num_layers: int, stages: int, chunks: int,
                 issues: list[ConfigIssue], why: dict[str, str]) -> bool:
    """What MindFormers' `check_pipeline_stage` (`models/modeling_utils.py`) refuses before any offset is read: fewer
    layers than pipeline stages, or, interleaved, than stages x chunks. No offsets could give every stage a layer."""
    if num_layers < stages:
        issues.append(source.issue(
            PIPELINE_STAGE, f"the {stages} pipeline stages outnumber the layers, {why['counted']}: no offsets can "
            "give every stage a layer, and MindFormers refuses it (\"num_layers of model should be greater than or "
            "equal to pipeline_stage\")", f"use at most {num_layers} pipeline stages"))
        return True
    if chunks > 1 and stages * chunks > num_layers:
        most = num_layers // stages
        issues.append(source.issue(
            keys.interleave, f"the pipeline_stage ({stages}) x {keys.interleave[-1]} ({chunks}) = {stages * chunks} "
            f"interleave chunks outnumber the layers, {why['counted']}: MindFormers refuses it (\"num_layers should "
            "be greater than `pp * pp_interleave_num`\")",
            f"use at most {most} chunks per stage" if most > 1 else
            "turn interleave off (parallel.pipeline_config.pipeline_interleave: false), or use fewer stages"))
        return True
    return False


def _sum_as_written(source: Source, keys: ModelKeys, offset: Any, remainder: int, shape: tuple[int, int],
                    issues: list[ConfigIssue], why: dict[str, str]) -> bool:
    """MindFormers sums the offsets as written, before an integer or a per-stage list is repeated for every stage
    and chunk."""
    stages, chunks = shape
    added = sum(sum(row) if isinstance(row, list) else row for row in offset) if isinstance(offset, list) else offset
    if added == remainder:
        return True
    if isinstance(offset, int) and offset != 0:
        how = " as written (MindFormers checks an integer offset before giving it to every stage)"
    elif isinstance(offset, list) and not any(isinstance(row, list) for row in offset) and chunks > 1:
        how = (" as written (MindFormers checks a per-stage list before repeating it for each of the "
               f"{chunks} chunks)")
    else:
        how = " over all stages and chunks"
    issues.append(source.issue(
        keys.offset, f"the offsets add {added} layers{how}, but {why['counted']} % (pipeline_stage ({stages}) * "
        f"{keys.interleave[-1]} ({chunks})) = {remainder}", f"make the offsets add up to {remainder}, "
        + ("one per chunk and stage (2-D) to say where each chunk's extra layers go" if chunks > 1 else
           "one per stage")))
    return False


def _filled(source: Source, keys: ModelKeys, sizes: tuple[tuple[int, ...], ...], num_layers: int,
            issues: list[ConfigIssue], why: dict[str, str]) -> tuple[tuple[int, ...], ...] | None:
    """The layers each slot gets. An integer or a per-stage list repeated over the chunks can make more slots than
    layers; MindFormers fills the slots in order (`LayerSetting.pp_ids`), so the last ones get fewer or none."""
    flat = [size for row in sizes for size in row]
    if sum(flat) <= num_layers:
        return sizes
    stages, left, got = len(sizes[0]), num_layers, []
    for size in flat:
        got.append(min(size, left))
        left -= got[-1]
    filled = tuple(tuple(got[v * stages:(v + 1) * stages]) for v in range(len(sizes)))
    said = (f"the offsets, repeated for every {'chunk and ' if len(sizes) > 1 else ''}stage, make {sum(flat)} layer "
            f"slots for the {num_layers} layers ({why['counted']}); MindFormers checks the offsets as written and "
            "fills the slots in order, so ")
    hint = "write the offsets per chunk and stage (2-D) to choose where the layers go" if len(sizes) > 1 else \
        "write one offset per stage to choose where the layers go"
    empty = [_slot(index, stages, len(sizes)) for index in range(1, len(got) - 1) if got[index] == 0]
    if empty:
        issues.append(source.issue(keys.offset, f"{said}{', '.join(empty)} would get no layer: every stage but the "
                                   "first and last needs one", hint))
        return None
    short = ", ".join(f"{_slot(index, stages, len(sizes))} gets {have} of its {size}"
                      for index, (have, size) in enumerate(zip(got, flat)) if have < size)
    issues.append(source.issue(keys.offset, said + short, hint, severity="warning"))
    return filled


def _slot(index: int, stages: int, chunks: int) -> str:
    chunk, stage = divmod(index, stages)
    return f"chunk {chunk} of stage {stage}" if chunks > 1 else f"stage {stage}"


def _offset_grid(source: Source, keys: ModelKeys, offset: Any, stages: int, chunks: int,
                 issues: list[ConfigIssue], why: dict[str, str]) -> list[list[int]] | None:
    if isinstance(offset, int) and not isinstance(offset, bool):
        return [[offset] * stages for _ in range(chunks)]
    if not isinstance(offset, list):
        return None  # reported by the schema
    if offset and all(isinstance(row, list) for row in offset):
        if len(offset) != chunks or any(len(row) != stages for row in offset):
            issues.append(source.issue(
                keys.offset, f"a 2-D offset needs {chunks} rows ({keys.interleave[-1]}) of {stages} values "
                f"(pipeline_stage), got {[len(row) for row in offset]}", f"{why['chunks_why']}; {why['stages_why']}"))
            return None
        return [list(row) for row in offset]
    if len(offset) != stages:
        issues.append(source.issue(
            keys.offset, f"offset has {len(offset)} values, expected one per pipeline stage ({stages})",
            why["stages_why"]))
        return None
    return [list(offset) for _ in range(chunks)]


def _sizes_valid(source: Source, at: KeyPath, sizes: tuple[tuple[int, ...], ...], issues: list[ConfigIssue]) -> bool:
    flat = [(v, p, size) for v, row in enumerate(sizes) for p, size in enumerate(row)]
    bad = []
    for index, (v, p, size) in enumerate(flat):
        minimum = 0 if index in (0, len(flat) - 1) else 1
        if size < minimum:
            bad.append(f"chunk {v} of stage {p} gets {size}")
    if bad:
        issues.append(source.issue(
            at, f"these pipeline stages get too few layers: {', '.join(bad)}",
            "every stage but the first and last needs at least one layer; lower the negative offsets"))
    return not bad
