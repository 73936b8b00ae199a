"""(a) Time to apply one recompute/swap config to a 64-layer tiny Llama.

Baseline: MindFormers' own implementation, `LayerSetting` (what `LlamaModel.__init__` calls
once per layer). Both implementations start from the same unmarked model: one built with
MindFormers' default parallel config, whose recompute and swap sections are off. A fresh
model is built for every timed run (outside the timed region), because `Cell.recompute`
can be set only once per cell.

Four timings per config (median of `repeat` runs, after one untimed warm-up run that also
checks that both implementations set the same marks):
- MindFormers: `LayerSetting(...)` plus one call per layer;
- ours, apply only: `apply_plan` with the plan loaded beforehand;
- ours, load + apply: `load_plan` of the same sections, then `apply_plan`;
- MindSpore calls: only the `Cell.recompute` / `Primitive.recompute` / `add_prim_attr` calls
  that ours makes, replayed on resolved objects. No implementation
  can be faster than this, so it bounds any speed-up.
"""

from __future__ import annotations

import cProfile
import io
import logging
import pstats
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from benchmarks.common import load_note, median_ms, print_table, ratio, timed

NUM_LAYERS = 64
TINY_LLAMA = {"num_layers": NUM_LAYERS, "hidden_size": 32, "num_heads": 2, "seq_length": 16, "vocab_size": 64,
              "batch_size": 1, "use_flash_attention": False, "use_rope_slice": True, "fused_rms_norm": False}
MARK_KEYS = ("recompute", "recompute_comm_op", "offload", "backward_prefetch")


@dataclass(frozen=True)
class Case:
    """One config, written once and given to both implementations (same meaning in both)."""

    name: str
    recompute: dict[str, Any] = field(default_factory=dict)
    swap: dict[str, Any] = field(default_factory=dict)

    def document(self) -> dict[str, Any]:
        """The YAML sections mf_memopt reads, as an already-parsed mapping."""
        return {"model": {"model_config": {"num_layers": NUM_LAYERS}},
                "recompute_config": self.recompute, "swap_config": self.swap}


CASES = (
    Case("select wq+mul, full first 8", recompute={
        "recompute": [8], "select_recompute": {r"feed_forward\.mul": True, r"attention\.wq": True}}),
    Case("op_swap attention, layer_swap 16", swap={
        "swap": True, "layer_swap": [{"backward_prefetch": 20, "layers": list(range(0, NUM_LAYERS, 4))}],
        "op_swap": [{"op_name": "attention", "backward_prefetch": 10, "layers": True}]}),
    Case("default patterns + comm", recompute={
        "select_recompute": True, "select_comm_recompute": [r"attention_norm\.mul"]}),
)


@dataclass
class Timings:
    mindformers: list[float] = field(default_factory=list)
    apply_only: list[float] = field(default_factory=list)
    load_apply: list[float] = field(default_factory=list)
    mindspore_calls: list[float] = field(default_factory=list)
    same_marks: bool = False

    def record(self, run: tuple[float, float, float, float]) -> None:
        series = (self.mindformers, self.apply_only, self.load_apply, self.mindspore_calls)
        for values, seconds in zip(series, run):
            values.append(seconds)


def run(repeat: int) -> None:
    """Measure every case and print the table."""
    _setup_mindspore()
    load, rows = load_note(), []
    with _quiet_loggers():
        for case in CASES:
            timings = measure(case, repeat)
            rows.append(_row(case, timings))
    print_table(f"(a) apply time, {NUM_LAYERS}-layer tiny Llama, median of {repeat} runs (ms); {load}",
                ("config", "MindFormers", "ours apply", "ours load+apply", "MindSpore calls",
                 "MF / ours apply", "MF / ours load+apply", "same marks"), rows)


def measure(case: Case, repeat: int) -> Timings:
    timings = Timings()
    timings.same_marks = _warm_up(case)
    for _ in range(repeat):
        timings.record(_one_run(case))
    return timings


def _row(case: Case, timings: Timings) -> list[str]:
    mf, apply_only = median_ms(timings.mindformers), median_ms(timings.apply_only)
    load_apply = median_ms(timings.load_apply)
    return [case.name, f"{mf:.1f}", f"{apply_only:.1f}", f"{load_apply:.1f}",
            f"{median_ms(timings.mindspore_calls):.1f}", ratio(mf, apply_only), ratio(mf, load_apply),
            "yes" if timings.same_marks else "NO"]


def _warm_up(case: Case) -> bool:
    """One untimed run of each implementation; whether both left the same marks on the model."""
    theirs, ours = build_model(), build_model()
    if model_marks(ours):
        raise RuntimeError("the freshly built model already carries recompute/offload marks")
    apply_mindformers(theirs, mindformers_parallel_config(case))
    apply_ours(load_ours(case), ours)
    return model_marks(theirs) == model_marks(ours)


def _one_run(case: Case) -> tuple[float, float, float, float]:
    """One timed run of each; every model is built, and every input prepared, before its timer starts."""
    parallel, plan = mindformers_parallel_config(case), load_ours(case)
    theirs, ours, ours_again, replayed = (build_model() for _ in range(4))
    mindformers, _ = timed(lambda: apply_mindformers(theirs, parallel))
    apply_only, report = timed(lambda: apply_ours(plan, ours))
    load_apply, _ = timed(lambda: apply_ours(load_ours(case), ours_again))
    calls = resolve_calls(report, replayed)
    mindspore_calls, _ = timed(lambda: replay(calls))
    return mindformers, apply_only, load_apply, mindspore_calls


def build_model() -> Any:
    """A fresh tiny LlamaForCausalLM with MindFormers' default (off) recompute and swap sections."""
    from mindformers.models.llama import LlamaConfig, LlamaForCausalLM

    return LlamaForCausalLM(LlamaConfig(**TINY_LLAMA))


def mindformers_parallel_config(case: Case) -> Any:
    from mindformers.modules.transformer import (
        TransformerOpParallelConfig,
        TransformerRecomputeConfig,
        TransformerSwapConfig,
    )

    return TransformerOpParallelConfig(recompute=TransformerRecomputeConfig(**case.recompute),
                                       swap=TransformerSwapConfig(**case.swap))


def apply_mindformers(model: Any, parallel: Any) -> None:
    """Exactly what LlamaModel.__init__ does with its LayerSetting, on an already-built model."""
    from mindformers.parallel_core.training_graph.transformer.utils import LayerSetting

    setting = LayerSetting(NUM_LAYERS, 0, parallel, 1)
    for layer_id, layer in enumerate(model.model.layers):
        setting(layer, layer_id)


def load_ours(case: Case) -> Any:
    import mf_memopt

    return mf_memopt.load_plan(case.document())


def apply_ours(plan: Any, model: Any) -> Any:
    from mf_memopt.apply.execute import apply_plan

    return apply_plan(plan, model, device_target="CPU")


def resolve_calls(report: Any, model: Any) -> list[tuple[Callable[..., None], Any, Any]]:
    """The attribute calls of an apply report, bound to the same cells of another model."""
    from mf_memopt import cells

    setters = {"recompute_cell": lambda cell, options: cells.recompute_cell(cell, **options),
               "recompute": cells.recompute_primitive, "recompute_comm_op": cells.set_comm_recompute,
               "offload": cells.offload_primitive}
    layers = list(model.model.layers)
    return [(setters[action.setting], _find(layers[action.layer], action.path, action.target), action.value)
            for action in report.actions]


def replay(calls: list[tuple[Callable[..., None], Any, Any]]) -> None:
    for setter, obj, value in calls:
        setter(obj, value)


def _find(layer: Any, path: str, target: str) -> Any:
    names = path.split(".") if path else []
    cell = layer
    for name in names[:-1] if target == "primitive" else names:
        cell = cell._cells[name]
    return cell._primitives[names[-1]] if target == "primitive" else cell


def model_marks(model: Any) -> dict[str, Any]:
    """{path: marks} of every recomputed cell and marked primitive in the decoder layers."""
    marks: dict[str, Any] = {}
    for index, layer in enumerate(model.model.layers):
        _collect_marks(layer, str(index), marks)
    return marks


def _collect_marks(cell: Any, path: str, marks: dict[str, Any]) -> None:
    if cell._has_config_recompute:
        marks[path] = cell._scope
    for name, prim in cell._primitives.items():
        found = {key: prim.attrs[key] for key in MARK_KEYS if prim is not None and key in prim.attrs}
        if found:
            marks[f"{path}.{name}"] = found
    for name, child in cell._cells.items():
        if child is not None:
            _collect_marks(child, f"{path}.{name}", marks)


def profile_ours(top: int = 20) -> None:
    """cProfile of `apply_plan` alone, once per case (after a warm-up run): where ours spends its time."""
    _setup_mindspore()
    with _quiet_loggers():
        for case in CASES:
            apply_ours(load_ours(case), build_model())
            plan, model, profiler = load_ours(case), build_model(), cProfile.Profile()
            profiler.runcall(apply_ours, plan, model)
            text = io.StringIO()
            pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(top)
            print(f"\n== cProfile of apply_plan: {case.name} ==\n{text.getvalue()}")


def _setup_mindspore() -> None:
    import mindspore as ms

    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")


@contextmanager
def _quiet_loggers() -> Iterator[None]:
    """Both implementations' loggers at ERROR: neither formats nor writes its INFO/WARNING lines.

    MindFormers' logger writes every line to stdout and to rotating files; mf_memopt's is
    not configured by default (INFO is dropped, warnings reach stderr). Silencing both keeps
    the comparison about the work of applying, not about terminal or disk speed.
    """
    from mindformers.tools.logger import get_logger

    loggers = (get_logger(), logging.getLogger("mf_memopt"))
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)
