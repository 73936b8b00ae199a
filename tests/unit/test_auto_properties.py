"""`auto` and `auto --balance` on random pipeline layouts: what must hold at every budget, not only at the budgets a
config is written for (`benchmarks/planner_properties.py` states the properties; `benchmarks/balance.py` sweeps
them finely on 50 layouts and on MindFormers' shipped pipeline YAMLs, `tests/mindspore/test_balance.py` on the
shipped YAMLs here)."""

from __future__ import annotations

import random

import pytest

from benchmarks.planner_properties import random_layout, sweep
from mf_memopt.auto import auto_plan
from mf_memopt.auto.problem import hidden_prefetch
from mf_memopt.estimate import estimate_config

GiB = 1 << 30


@pytest.fixture(scope="module")
def layouts(tmp_path_factory):
    directory = tmp_path_factory.mktemp("layouts")
    rng = random.Random(20261128)
    return [random_layout(rng, directory, f"layout{index}") for index in range(8)]


@pytest.mark.parametrize("index", range(8))
def test_auto_holds_its_properties_on_a_random_layout(layouts, index):
    """Named minimum (plans at it, not one byte under), every plan within its budget, never slower for a larger
    budget: the per-stage plan of the layout as written."""
    report = sweep(layouts[index], steps=5, balance=False)
    assert report.failures == [] and report.budgets == 6


@pytest.mark.parametrize("index", range(2))
def test_balance_holds_its_properties_on_a_random_layout(layouts, index):
    """The same for `--balance`, and where it keeps the layout as written, its plan is `auto`'s."""
    report = sweep(layouts[index], steps=2)
    assert report.failures == [] and report.balance_minimum <= report.auto_minimum


def test_a_swap_is_offered_only_where_its_release_comes_before_the_turn():
    """The estimator keeps a swapped tensor on the device when its release (backward_prefetch operators after the
    layer's forward) is due at or after the forward/backward turn. A copy that takes a whole layer's forward needs
    the whole prefetch of 30 operators: it is released as the next layer's forward ends, so the layer before the last
    cannot swap it; a shorter copy can."""
    assert hidden_prefetch(1.0, 1.0, 1.0, 30) is None            # before the last layer: released at the turn
    assert hidden_prefetch(1.0, 1.0, 2.0, 30) == 30
    assert hidden_prefetch(0.5, 1.0, 1.0, 30) == 15
    assert hidden_prefetch(0.5, 1.0, 0.0, 30) is None            # the last layer
    assert hidden_prefetch(1.5, 1.0, 9.0, 30) is None            # a copy longer than the forward queues


def test_every_written_swap_leaves_the_device(layouts):
    """Where a plan swaps, the estimator's timeline has every swapped tensor off the device at the turn, so the
    search's peak is the estimate's (a plan swapping the layer before the last with a full-layer release once came
    out 360 MiB over its budget)."""
    found = 0
    for path in layouts[:5]:
        probe = auto_plan(path, budget=1 << 60)
        low = max(stage.peak.peak for stage in probe.references["full recompute"].stages)
        high = max(stage.peak.peak for stage in probe.references["nothing"].stages)
        for share in (0.3, 0.7):
            budget = int(low + share * (high - low))
            plan = auto_plan(path, budget=budget)
            if plan.family != "indices":
                continue
            found += 1
            written = path.with_name(f"{path.stem}_{share}.yaml")
            written.write_text(plan.text)
            estimate = estimate_config(written)
            assert all(not layer.transfer.on_device_at_turn for layer in estimate.layers), path.name
            assert all(stage.peak.peak <= budget for stage in estimate.stages) and plan.repairs == ()
    assert found


def test_a_24_layer_mcore_model_plans_on_the_cpu_runtime(tmp_path):
    """`auto --runtime cpu` on a valid 24-layer Qwen3 ended in a PlannerMismatch traceback (the whole-plan fallback
    stopped at 5000 plans); the search models the term that made it fall back, and plans."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "configs/qwen3_tiny.yaml").read_text()
    path = tmp_path / "qwen3_24.yaml"
    path.write_text(text.replace("num_hidden_layers: 4", "num_hidden_layers: 24"))
    probe = auto_plan(path, budget=1 << 40, runtime="cpu")
    low = max(stage.peak.peak for stage in probe.references["full recompute"].stages)
    high = max(stage.peak.peak for stage in probe.references["nothing"].stages)
    plan = auto_plan(path, budget=(low + high) // 2, runtime="cpu")
    assert plan.fits and plan.repairs == () and 0 < plan.priced_s
