"""`auto`'s search against brute force through the estimator, on instances small enough to enumerate.

Brute force: every assignment of the offered options to the layers, written into the YAML
by the same writer, estimated by `estimate` itself, kept if every stage's peak is within the
budget and the YAML says what was assigned (the count forms cannot say every assignment);
the least added time (recompute + swap stalls, as `estimate` reports them) is the optimum.
"""

from __future__ import annotations

import functools
import itertools
import random
from pathlib import Path

import pytest

from mf_memopt.auto import Choice, InfeasibleBudget, auto_plan
from mf_memopt.auto.choices import KEEP, footprints
from mf_memopt.auto.limits import check_cpu_peak
from mf_memopt.auto.context import PlanContext
from mf_memopt.auto.problem import stage_problems
from mf_memopt.auto.writer import Assignment, sections
from mf_memopt.config.load import load_plan, plan_source
from mf_memopt.document.source import Source, parse_yaml
from mf_memopt.estimate import estimate_config
from mf_memopt.estimate.core import _estimate
from mf_memopt.estimate.spec import ParallelSpec
from mf_memopt.estimate.transfer import Hardware
from mf_memopt.estimate.family import estimator_of
from mf_memopt.models.llama import LLAMA
from mf_memopt.models.llama.inventory import layer_inventory, layer_ops

ROOT = Path(__file__).resolve().parents[2]
MiB, GiB = 2**20, 2**30
FULL, FF, ATTN, BOTH = (Choice(full=True), Choice(select=("feed_forward",)), Choice(select=("attention",)),
                        Choice(select=("feed_forward", "attention")))
SWAP_ATTN, FF_SWAP_ATTN = Choice(op_swap=("attention",)), Choice(select=("feed_forward",), op_swap=("attention",))


@pytest.fixture(scope="module")
def tmp_path(tmp_path_factory):
    return tmp_path_factory.mktemp("auto")


def tiny(tmp_path: Path, layers: int) -> Path:
    text = (ROOT / "configs/llama_tiny.yaml").read_text().replace("num_layers: 4", f"num_layers: {layers}")
    path = tmp_path / f"tiny{layers}.yaml"
    path.write_text(text)
    return path


def llama7b(tmp_path: Path, layers: int, micro_batches: int = 2) -> Path:
    text = (ROOT / "configs/planning/llama2_7b_swap_pp2.yaml").read_text()
    text = text.replace("num_layers: 32", f"num_layers: {layers}")
    text = text.replace("micro_batch_num: 8", f"micro_batch_num: {micro_batches}")
    plain = "recompute_config:\n  recompute: False\n\nswap_config:\n  swap: False\n"
    text = text[:text.index("recompute_config:")] + plain
    path = tmp_path / f"llama7b_{layers}.yaml"
    path.write_text(text)
    return path


def _said(plan, assignment: Assignment) -> bool:
    """Whether the written sections give every layer exactly its assigned recompute and swap."""
    for layer in plan.layers:
        choice = assignment.choices[layer.layer]
        if (layer.full_recompute is not None) != choice.full:
            return False
        if not choice.full and sorted(use.pattern for use in layer.select_recompute) != sorted(choice.select):
            return False
        swapped = sorted(use.pattern for use in layer.op_swap)
        if swapped != sorted(choice.op_swap) or (layer.layer_swap is not None) != choice.layer_swap:
            return False
    return True


@functools.lru_cache(maxsize=None)
def _every_plan(config: Path, runtime: str, choices: tuple[Choice, ...]) -> tuple[tuple[tuple[int, ...], float], ...]:
    """(peak per stage, added seconds) of every assignment the YAML can say, estimated by `estimate`."""
    text = config.read_text()
    source = parse_yaml(text, str(config))
    context = PlanContext.read(source, runtime, Hardware(device_memory=GiB), text, str(config))
    problems = stage_problems(context.plan, context.spec, choices, runtime=runtime, hardware=context.hardware)
    layers = [layer for problem in problems for layer in problem.layers]
    per_layer = [option for problem in problems for option in problem.positions]
    original = source.get(("recompute_config",)) or {}
    results = []
    for picked in itertools.product(*per_layer):
        assignment = Assignment(choices={layer: option.choice for layer, option in zip(layers, picked)},
                                prefetch={layer: option.prefetch for layer, option in zip(layers, picked)
                                          if option.prefetch is not None})
        written = Source(file="brute", data={**source.data, **sections(assignment, context.plan.layout, original,
                                                                     LLAMA.auto_cells)})
        plan = plan_source(written)
        if not _said(plan, assignment) or (assignment.swaps is False and plan.swap):
            continue
        estimate = _estimate(plan, *context.spec, runtime=runtime, hardware=context.hardware)
        results.append((tuple(stage.peak.peak for stage in estimate.stages),
                        sum(stage.recompute_s + stage.stall_s for stage in estimate.stages)))
    return tuple(results)


def brute_force(config: Path, budget: int, runtime: str, choices: tuple[Choice, ...]) -> float | None:
    """The least added seconds over every writable assignment that fits, or None."""
    fitting = [cost for peaks, cost in _every_plan(config, runtime, choices) if max(peaks) <= budget]
    return min(fitting) if fitting else None


def planned_cost(config: Path, budget: int, runtime: str, choices: tuple[Choice, ...]) -> float | None:
    try:
        result = auto_plan(config, budget=budget, runtime=runtime, choices=choices, margin=0.0)
    except InfeasibleBudget:
        return None
    assert all(stage.peak.peak <= budget for stage in result.estimate.stages)
    return sum(stage.recompute_s + stage.stall_s for stage in result.estimate.stages)


def _same(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return abs(a - b) <= 1e-9 * max(1.0, abs(b))


CPU_CHOICES = (KEEP, FF, ATTN, BOTH, FULL)


def _budget_between(config: Path, runtime: str, choices: tuple[Choice, ...], fraction: float) -> int:
    """A budget `fraction` of the way from the lowest plan peak to the highest (below 0: nothing fits)."""
    peaks = [max(stage_peaks) for stage_peaks, _ in _every_plan(config, runtime, choices)]
    return int(min(peaks) + fraction * (max(peaks) - min(peaks)))


@pytest.mark.parametrize("fraction", [-0.01, 0.0, 0.1, 0.25, 0.4, 0.6, 0.8, 1.0])
def test_cpu_equals_brute_force_on_four_layers(tmp_path, fraction):
    config = tiny(tmp_path, 4)
    budget = _budget_between(config, "cpu", CPU_CHOICES, fraction)
    expected = brute_force(config, budget, "cpu", CPU_CHOICES)
    assert (expected is None) == (fraction < 0)
    assert _same(planned_cost(config, budget, "cpu", CPU_CHOICES), expected)


@pytest.mark.parametrize("fraction", [0.2, 0.5, 0.8])
def test_cpu_equals_brute_force_on_six_layers(tmp_path, fraction):
    config = tiny(tmp_path, 6)
    choices = (KEEP, ATTN, FULL)
    budget = _budget_between(config, "cpu", choices, fraction)
    assert _same(planned_cost(config, budget, "cpu", choices), brute_force(config, budget, "cpu", choices))


# The cpu runtime follows the config's dtypes: each mix has its own weight copies (made when the step
# starts, held to the backward, or made late by a recompute) and its own rebuilt sizes.
DTYPE_MIXES = {
    "float16 compute and parameters": {"compute_dtype": "float16", "param_init_type": "float16"},
    "float16 compute, float32 parameters": {"compute_dtype": "float16", "param_init_type": "float32"},
    "float32 compute, float16 parameters": {"compute_dtype": "float32", "param_init_type": "float16"},
    "float16 compute and norms": {"compute_dtype": "float16", "layernorm_compute_type": "float16",
                                  "softmax_compute_type": "float16", "rotary_dtype": "float16"},
}


def tiny_mixed(tmp_path: Path, layers: int, mix: str) -> Path:
    text = tiny(tmp_path, layers).read_text()
    for key, value in DTYPE_MIXES[mix].items():
        old = next(line for line in text.splitlines() if line.strip().startswith(f"{key}:"))
        text = text.replace(old, old[:old.index(key)] + f'{key}: "{value}"')
    path = tmp_path / f"tiny{layers}_{mix.replace(' ', '_').replace(',', '')}.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("mix", sorted(DTYPE_MIXES))
def test_cpu_equals_brute_force_under_mixed_precision(tmp_path, mix):
    config = tiny_mixed(tmp_path, 4, mix)
    assert estimate_config(config, runtime="cpu").model.dtypes != estimate_config(tiny(tmp_path, 4),
                                                                                   runtime="cpu").model.dtypes
    outcomes = []
    for budget in _budgets_at_plan_peaks(_every_plan(config, "cpu", CPU_CHOICES), 5):
        expected = brute_force(config, budget, "cpu", CPU_CHOICES)
        assert _same(planned_cost(config, budget, "cpu", CPU_CHOICES), expected), budget
        outcomes.append(expected)
    assert outcomes[0] is None and outcomes[-1] == 0.0 and any(value for value in outcomes)


ASCEND_CHOICES = (KEEP, FF, FULL, SWAP_ATTN, FF_SWAP_ATTN)


def _budgets_at_plan_peaks(plans, count: int) -> list[int]:
    """Budgets exactly at, and one byte under, `count` of the distinct plan peaks (where the optimum changes)."""
    peaks = sorted({max(stage_peaks) for stage_peaks, _ in plans})
    picked = peaks[::max(1, len(peaks) // count)] + [peaks[-1]]
    return sorted({budget for peak in picked for budget in (peak, peak - 1)})


def test_ascend_with_swap_equals_brute_force_at_every_kind_of_budget(tmp_path):
    config = llama7b(tmp_path, 4)
    budgets = _budgets_at_plan_peaks(_every_plan(config, "ascend", ASCEND_CHOICES), 6)
    outcomes = []
    for budget in budgets:
        expected = brute_force(config, budget, "ascend", ASCEND_CHOICES)
        assert _same(planned_cost(config, budget, "ascend", ASCEND_CHOICES), expected), budget
        outcomes.append(expected)
    assert outcomes[0] is None and outcomes[-1] == 0.0 and any(value for value in outcomes)


def test_ascend_plans_swap_where_it_hides(tmp_path):
    config = llama7b(tmp_path, 4)
    result = auto_plan(config, budget=int(5.0 * GiB), runtime="ascend", choices=ASCEND_CHOICES)
    names = [option.choice.name for stage in result.stages for option in stage.options]
    assert result.family == "indices" and any("swap attention" in name for name in names)
    assert all(stage.stall_s == 0 for stage in result.estimate.stages)


def test_cpu_equals_brute_force_at_plan_peaks(tmp_path):
    config = tiny(tmp_path, 5)
    choices = (KEEP, FF, ATTN, FULL)
    for budget in _budgets_at_plan_peaks(_every_plan(config, "cpu", choices), 5):
        expected = brute_force(config, budget, "cpu", choices)
        assert _same(planned_cost(config, budget, "cpu", choices), expected), budget


def test_overhead_never_grows_with_the_budget(tmp_path):
    config = ROOT / "configs/planning/llama2_7b_swap_pp2.yaml"
    previous = float("inf")
    for budget in range(28 * GiB, 46 * GiB, GiB):
        result = auto_plan(config, budget=budget)
        assert all(stage.peak.peak <= budget for stage in result.estimate.stages)
        cost = sum(stage.recompute_s + stage.stall_s for stage in result.estimate.stages)
        assert cost <= previous + 1e-12
        previous = cost
    assert previous == 0.0


@pytest.mark.parametrize("mix", [None, *sorted(DTYPE_MIXES)])
def test_cpu_search_peak_matches_the_estimator(tmp_path, mix):
    """The cpu search's terms are read off the estimator's checkpoints; random plans keep its peak equal to
    `cpu_pool_peak`."""
    config = ROOT / "benchmarks/llama_medium.yaml"
    if mix is not None:
        config = tmp_path / f"medium_{sorted(DTYPE_MIXES).index(mix)}.yaml"
        text = (ROOT / "benchmarks/llama_medium.yaml").read_text()
        for key, value in DTYPE_MIXES[mix].items():
            old = next(line for line in text.splitlines() if line.strip().startswith(f"{key}:"))
            text = text.replace(old, old[:old.index(key)] + f'{key}: "{value}"')
        config.write_text(text)
    plan = load_plan(config)
    source = parse_yaml(config.read_text(), "medium")
    from mf_memopt.estimate.family import read_spec

    model, _, _ = read_spec(source, LLAMA, [])
    prints = footprints(CPU_CHOICES, layer_inventory(model, ParallelSpec(), "cpu"), layer_ops(model, ParallelSpec()),
                        LLAMA)
    problems = stage_problems(plan, read_spec(source, LLAMA, []), CPU_CHOICES, runtime="cpu",
                              hardware=Hardware(device_memory=GiB))
    rng = random.Random(7)
    for _ in range(50):
        picks = [rng.randrange(len(CPU_CHOICES)) for _ in range(model.num_layers)]
        effects = [prints[pick].effect for pick in picks]
        options = [problems[0].positions[index][pick] for index, pick in enumerate(picks)]
        searched, estimated = check_cpu_peak(model, effects, problems[0].limits, options)
        assert searched == estimated


def test_an_estimator_term_the_search_cannot_express_is_not_trusted(tmp_path, monkeypatch):
    """If the cpu estimator grew a checkpoint term that is not a per-layer sum (here: the largest layer's
    kept bytes), the planner's terms no longer add up to it; the layer search is not trusted: every count-form
    plan is estimated whole instead, and the plan written fits the estimator's own peak."""
    from mf_memopt.estimate.memory import StagePeak

    cpu_checkpoints = estimator_of(LLAMA).cpu_checkpoints

    def with_a_maximum(model, effects):
        largest = max(effect.bytes() - effect.bytes("recomputed") for effect in effects)
        return [*cpu_checkpoints(model, effects), StagePeak(kind="largest layer", components={"x": largest})]

    monkeypatch.setattr(estimator_of(LLAMA), "cpu_checkpoints", with_a_maximum)
    plan = auto_plan(tiny(tmp_path, 4), budget=60 * MiB, runtime="cpu", choices=CPU_CHOICES)
    assert plan.repairs and "do not add up to its peak" in plan.repairs[0]      # the layer search refused its terms
    assert max(stage.peak.peak for stage in plan.estimate.stages) <= plan.target     # the patched estimator's peak
