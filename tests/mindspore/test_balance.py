"""`auto --balance` on the pipeline YAMLs the mindformers wheel ships: the written YAML validates, its offsets and
recompute/swap give the same per-layer plan in mf_memopt and in MindFormers' own `LayerSetting`, every stage's
estimate fits the budget, and the step time is no worse than the plan as written; a budget nothing meets names the
smallest that works."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace

import mindspore as ms
import pytest
from mindformers.modules import transformer
from mindformers.parallel_core.training_graph.transformer import utils as layer_utils

from mf_memopt import load_plan
from mf_memopt.auto import InfeasibleBudget, auto_plan
from mf_memopt.auto.balance import _Pipeline, balance_plan
from mf_memopt.cli import main
from mf_memopt.config.render import formative_lines
from mf_memopt.config.rules import Kind
from mf_memopt.document.source import load_source
from mf_memopt.estimate import Hardware, estimate_config
from mf_memopt.estimate.report import parse_size


WHEEL = Path(importlib.util.find_spec("mindformers").origin).parents[1] / "configs"
SHIPPED = ("qwen3/pretrain_qwen3_32b_4k.yaml", "telechat3/pretrain_telechat3_36b.yaml",
           "deepseek3/pretrain_deepseek3_671b.yaml", "deepseek3/pretrain_deepseek3_12b_16p_pp16.yaml")


def _balanced(path: Path):
    """The balanced plan for the YAML's own budget: no `budget` given, `context.max_device_memory` as MindSpore
    sizes its pool ("58GB" is 58 GiB)."""
    written = str(load_source(path).get(("context", "max_device_memory")))
    result = balance_plan(path)
    assert result.budget == float(written.removesuffix("GB")) * 2**30
    assert result.budget_source.startswith(f"context.max_device_memory {written}")
    return result, result.budget


def _layer_setting(plan, data: dict):
    """MindFormers' own `LayerSetting` for the written offsets, recompute and swap."""
    layout = plan.layout
    ms.set_auto_parallel_context(pipeline_config={"pipeline_interleave": layout.chunks > 1,
                                                  "pipeline_scheduler": "1f1b"})
    recompute, swap = data["recompute_config"], data["swap_config"]
    config = transformer.TransformerRecomputeConfig(recompute=recompute["recompute"],
                                                    select_recompute=recompute["select_recompute"])
    swaps = transformer.TransformerSwapConfig(swap=swap["swap"], layer_swap=swap.get("layer_swap", []),
                                              op_swap=swap.get("op_swap", []))
    parallel = SimpleNamespace(recompute=config, swap=swaps, pipeline_stage=layout.stages,
                               gradient_aggregation_group=4)
    offset = data["model"]["model_config"]["offset"]
    return layer_utils.LayerSetting(layout.num_layers, offset, parallel, layout.chunks)


def _selects(layers) -> bool:
    """Whether a formative entry (layer indices, or counts per chunk and stage) selects some layer."""
    return any(_selects(item) if isinstance(item, list) else bool(item) for item in layers)


@pytest.mark.parametrize("name", SHIPPED)
def test_balance_writes_a_yaml_mindformers_lays_out_as_planned(name, tmp_path):
    path = WHEEL / name
    result, budget = _balanced(path)
    written = tmp_path / "balanced.yaml"
    written.write_text(result.text)
    plan = load_plan(written)             # validates: a ConfigError otherwise
    data = load_source(written).data
    offsets = data["model"]["model_config"]["offset"]
    assert offsets == result.balanced.offsets
    added = sum(map(sum, offsets)) if plan.layout.chunks > 1 else sum(offsets)
    assert added == plan.num_layers % (plan.layout.stages * plan.layout.chunks)     # MindFormers' rule
    theirs = _layer_setting(plan, data)
    assert [layer.stage for layer in plan.layers] == [int(stage) for stage in theirs.pp_ids]
    assert [layer.chunk for layer in plan.layers] == [int(chunk) for chunk in theirs.interleave_ids]
    # the normalised forms MindFormers logs ('Formative ...'): counts per chunk and stage, or layer indices with swap
    ours = formative_lines(plan)
    assert ours[0] == f"Formative layer_recompute: {theirs.layer_recompute}"

    def form(layers):
        return sorted(layers) if plan.rules.swap else plan.layout.chunk_counts(layers)

    # the patterns that select some layer (without select_recompute LayerSetting lists its default patterns, with
    # no layers)
    selected = {pattern: layers for pattern, layers in theirs.select_recompute.items() if _selects(layers)}
    assert {rule.pattern: form(rule.layers) for rule in plan.rules.of_kind(Kind.SELECT) if rule.layers} == selected
    if plan.swap:
        assert f"Formative layer swap: {theirs.layer_swap}" in ours
        assert f"Formative op swap: {theirs.op_swap}" in ours
    # every stage of the written YAML fits, as `estimate` sees it
    estimate = estimate_config(written, hardware=Hardware(device_memory=budget))
    assert all(stage.peak.peak <= budget for stage in estimate.stages)
    assert [stage.peak.peak for stage in estimate.stages] == [stage.peak for stage in result.balanced.stages]
    # no slower than the plan as written, when that plan fits the same budget
    if all(stage.peak <= budget for stage in result.written.stages):
        assert result.balanced.step_s <= result.written.step_s * (1 + 1e-9)


def test_a_budget_nothing_meets_names_the_smallest_that_works():
    path = WHEEL / "qwen3/pretrain_qwen3_32b_4k.yaml"
    with pytest.raises(InfeasibleBudget) as caught:
        balance_plan(path, budget=30 * 2**30)
    error = caught.value
    smallest = error.smallest
    assert smallest >= max(error.minimum.values()) > 30 * 2**30
    with pytest.raises(InfeasibleBudget):
        balance_plan(path, budget=smallest - 1)
    # the named budget works, and the programme's lower bound over every layout is within 1% under it
    result = balance_plan(path, budget=smallest)
    assert max(stage.peak for stage in result.balanced.stages) <= smallest
    pipeline = _Pipeline.read(load_source(path), Hardware(device_memory=smallest))
    assert 0.99 * smallest <= pipeline.least_peak(float("inf")) <= smallest + 1     # a float of bytes


def test_the_cli_prints_both_plans_and_writes_the_yaml(tmp_path, capsys):
    output = tmp_path / "balanced.yaml"
    assert main(["auto", str(WHEEL / SHIPPED[0]), "--device-memory", "58GB", "--balance", "-o", str(output)]) == 0
    printed = capsys.readouterr().out
    assert "written: layers" in printed and "balanced: layers" in printed and "predicted step time" in printed
    assert output.read_text().startswith("# mf_memopt auto: pipeline layout chosen by auto --balance")
    load_plan(output)
    assert main(["auto", str(WHEEL / SHIPPED[0]), "--device-memory", "58GB", "--balance", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["balanced"]["offsets"] == load_source(output).get(("model", "model_config", "offset"))
    assert data["step_time_ratio"] == data["balanced"]["step_seconds"] / data["written"]["step_seconds"]
    assert main(["auto", str(WHEEL / SHIPPED[0]), "--device-memory", "30GiB", "--balance", "--json"]) == 1
    captured = capsys.readouterr()
    assert "auto --balance: infeasible" in captured.err and "The smallest budget that works" in captured.err
    assert json.loads(captured.out)["smallest_budget_bytes"] > 30 * 2**30
    assert main(["auto", str(WHEEL / SHIPPED[0]), "--device-memory", "58GB", "--balance", "--runtime", "cpu"]) == 2


def test_offsets_are_added_when_the_yaml_has_none(tmp_path):
    text = (WHEEL / SHIPPED[0]).read_text()
    assert text.count("    offset: [-1, -1, 1, 1]\n") == 1
    path = tmp_path / "no_offset.yaml"
    path.write_text(text.replace("    offset: [-1, -1, 1, 1]\n", ""))
    result = balance_plan(path, budget=parse_size("58GiB"))
    assert result.written.offsets == [0, 0, 0, 0]
    written = tmp_path / "balanced.yaml"
    written.write_text(result.text)
    assert load_source(written).get(("model", "model_config", "offset")) == result.balanced.offsets
    assert [load_plan(written).layout.stage_size(stage) for stage in range(4)] == \
        [len(stage.layers) for stage in result.balanced.stages]


def test_offsets_are_added_to_a_model_section_that_starts_with_a_block(tmp_path):
    """TeleChat3 36B (2 stages x 2 chunks) with no offset and its model section starting with a block list: the
    offsets go after the section's last key, and MindFormers lays the written YAML out as planned."""
    text = (WHEEL / SHIPPED[1]).read_text()
    block = '    architectures: ["TeleChat3ForCausalLM"]\n'
    assert text.count("    offset: 0\n") == 1 and text.count(block) == 1
    text = text.replace("    offset: 0\n", "").replace(block, "")
    path = tmp_path / "block_first.yaml"
    path.write_text(text.replace("  model_config:\n", "  model_config:\n    architectures:\n"
                                 "    - TeleChat3ForCausalLM\n", 1))
    result = balance_plan(path, budget=75 * 2**30)
    written = tmp_path / "balanced.yaml"
    written.write_text(result.text)
    plan = load_plan(written)             # validates: a ConfigError otherwise
    data = load_source(written).data
    assert data["model"]["model_config"]["architectures"] == ["TeleChat3ForCausalLM"]
    assert data["model"]["model_config"]["offset"] == result.balanced.offsets
    theirs = _layer_setting(plan, data)
    assert [layer.stage for layer in plan.layers] == [int(stage) for stage in theirs.pp_ids]
    assert [layer.chunk for layer in plan.layers] == [int(chunk) for chunk in theirs.interleave_ids]


def test_the_programmes_layout_is_the_fastest_of_the_layouts_around_it():
    """TeleChat3 36B (2 stages x 2 chunks) at 75 GiB: every split of its 64 layers from 28/36 to 36/28, each planned by
    `auto`'s exact search and priced the same way; none is faster than the balanced plan (by hand at 68 and 75 GiB
    over 24/40 to 40/24 the programme's layout was the fastest, 33/31 at 75 GiB)."""
    path, budget = WHEEL / SHIPPED[1], 75 * 2**30
    result = balance_plan(path, budget=budget)
    source, hardware = load_source(path), Hardware(device_memory=budget)
    pipeline = _Pipeline.read(source, hardware)
    steps = []
    for first in range(28, 37):
        offsets = pipeline.offsets([first, 64 - first])
        try:
            plan = auto_plan(path, budget=budget, hardware=hardware, source=pipeline.with_offsets(source, offsets),
                             minimum=False)
        except InfeasibleBudget:
            continue
        steps.append(pipeline.times(plan.estimate, offsets).step_s)
    assert len(steps) >= 3      # 9 with today's estimate
    assert result.balanced.step_s <= min(steps) * (1 + 1e-9)


@pytest.mark.parametrize("name", SHIPPED)
def test_a_budget_sweep_of_each_shipped_pipeline_yaml_holds_the_planners_properties(name):
    """From the smaller named minimum to past the no-recompute peak: `auto` and `--balance` plan exactly at and above
    their named minimum, each plan within its budget, never slower for a larger budget, and `--balance` plans the
    layout as written as `auto` does (`benchmarks/planner_properties.py`; `benchmarks/balance.py` sweeps every
    0.1 GiB)."""
    from benchmarks.planner_properties import sweep

    report = sweep(WHEEL / name, steps=4)
    assert report.failures == [] and report.budgets == 5


def test_the_answers_the_badly_scaled_programme_got_wrong():
    """Qwen3 32B: 39.6 GiB was called infeasible though 39.5 GiB planned, and 42.2 GiB got a plan predicted 17.5%
    slower than 42.1 GiB's; the programme solved at 44 GiB and not at 46 GiB, and then said the written layout was
    the fastest. TeleChat3 36B was told it needed 42.6 GiB though 42.49 GiB planned."""
    qwen3 = WHEEL / "qwen3/pretrain_qwen3_32b_4k.yaml"
    steps = {size: balance_plan(qwen3, budget=round(size * 2**30)).balanced.step_s
             for size in (39.5, 39.6, 42.1, 42.2, 44.0, 46.0)}
    assert steps[39.6] <= steps[39.5] and steps[42.2] <= steps[42.1] and steps[46.0] <= steps[44.0]
    wider = balance_plan(qwen3, budget=46 * 2**30)
    assert wider.layout == "balanced" or wider.why == "no other layout is predicted faster"
    telechat = WHEEL / "telechat3/pretrain_telechat3_36b.yaml"
    with pytest.raises(InfeasibleBudget) as caught:
        balance_plan(telechat, budget=30 * 2**30)
    assert caught.value.smallest <= round(42.49 * 2**30)
    balance_plan(telechat, budget=caught.value.smallest)


def test_the_written_layout_is_not_called_the_fastest_when_the_programme_found_none(monkeypatch, capsys):
    """When the layout programme gives no layout at all, the report says that, not that no other layout is predicted
    faster (what it said whenever the written layout was kept)."""
    path = WHEEL / "qwen3/pretrain_qwen3_32b_4k.yaml"
    monkeypatch.setattr(_Pipeline, "solve", lambda self, caps, host_budget: None)
    result = balance_plan(path)
    assert result.layout == "as written" and result.why == "the programme found no layout within the budget at all"
    assert main(["auto", str(path), "--balance"]) == 0
    assert "(the layout as written: the programme found no layout within the budget at all)" in capsys.readouterr().out
