"""Compression priced by the codec's throughput measured on the device (`--codec-gbps`): the estimate counts the
codec's time, `auto` and `auto --balance` on the ascend runtime offer a method only where a figure prices it, and
where it is cheaper than recompute the balance compresses, most of all in the first stage (the one holding the most
warm-up micro-batches, compress-dense's own case), writing a YAML that validates and estimates as planned."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from benchmarks.planner_properties import sweep
from mf_memopt.auto import InfeasibleBudget, auto_plan
from mf_memopt.auto.balance import balance_plan
from mf_memopt.cli import main
from mf_memopt.config.load import load_plan
from mf_memopt.estimate import Hardware, estimate_config

ROOT = Path(__file__).resolve().parents[2]
PIPELINE = ROOT / "configs/planning/llama2_7b_swap_pp2.yaml"       # Llama2-7B, 2 stages, 8 micro-batches, tp 1
QWEN3 = ROOT / "configs/qwen3_tiny.yaml"
GiB = 2**30
FAST = (("int8", 100.0), ("lossless", 300.0))
SLOW = (("int8", 0.5), ("lossless", 0.5))
HOST = 2 * GiB                       # host memory for swaps: bounded, so swapping alone does not meet every budget


def _compressing(tmp_path: Path, entries: list[dict]) -> Path:
    data = yaml.safe_load(PIPELINE.read_text())
    data["recompute_config"] = {"recompute": False, "select_recompute": False, "select_comm_recompute": False}
    data["swap_config"] = {"swap": False}
    data["compress_config"] = {"compress": True, "op_compress": entries}
    path = tmp_path / "compressing.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _compressed(plan) -> list[int]:
    """Layers compressed in each stage of an `AutoPlan`."""
    return [sum(1 for option in stage.options if option.choice.compress) for stage in plan.stages]


def test_the_codec_time_is_the_compressed_bytes_over_the_measured_throughput(tmp_path):
    """int8 on the MLP's three linears: w1 and w3 each compress their own copy of the hidden-wide input, w2 its
    ffn-wide input, every micro-batch of every layer of the stage; without a figure the time is not counted and a
    note says so."""
    path = _compressing(tmp_path, [{"op_name": r"feed_forward\.(w1|w2|w3)", "method": "int8", "layers": True}])
    rated = estimate_config(path, hardware=Hardware(codec_gbps=(("int8", 40.0),)))
    model, parallel = rated.model, rated.parallel
    per_layer = model.batch * model.seq * (2 * model.hidden + model.ffn) * model.compute_bytes
    steps = parallel.micro_batches * parallel.grad_accumulation
    for stage in rated.stages:
        assert stage.codec_s == pytest.approx(steps * len(stage.layers) * per_layer / 40e9)
        assert stage.overhead == pytest.approx((stage.recompute_s + stage.codec_s + stage.stall_s) / stage.compute_s)
    assert not any("codec's time is not counted" in note for note in rated.notes)
    unrated = estimate_config(path)
    assert [stage.codec_s for stage in unrated.stages] == [0.0, 0.0]
    assert any("the codec's time is not counted for int8" in note and "--codec-gbps" in note
               for note in unrated.notes)
    assert [stage.peak.peak for stage in unrated.stages] == [stage.peak.peak for stage in rated.stages]


def test_the_estimate_prints_the_codec_column_only_where_a_codec_time_is_counted(tmp_path, capsys):
    path = _compressing(tmp_path, [{"op_name": r"feed_forward\.w2", "method": "lossless", "layers": True}])
    assert main(["estimate", str(path), "--codec-gbps", "lossless=250"]) == 0
    out = capsys.readouterr().out
    assert "codec lossless 250 GB/s" in out.splitlines()[0]
    assert " codec " in next(line for line in out.splitlines() if line.startswith("stage "))
    assert main(["estimate", str(PIPELINE), "--json", "--codec-gbps", "300"]) == 0
    stages = yaml.safe_load(capsys.readouterr().out)["stages"]
    assert [stage["codec_seconds"] for stage in stages] == [0.0, 0.0]       # nothing compressed in this YAML
    assert main(["estimate", str(PIPELINE)]) == 0
    assert " codec " not in capsys.readouterr().out


@pytest.mark.parametrize(("value", "error"), [
    ("int8=0", "must be a finite number > 0"), ("int9=3", "unknown method 'int9'"),
    ("int8=3,int8=4", "int8 is given twice"), ("fast", "expected METHOD=GBPS,... or one GBPS for every method: expected a number, got 'fast'"),
    ("int8=", "expected a number, got ''")])
def test_a_bad_codec_figure_is_refused_with_what_was_expected(capsys, value, error):
    with pytest.raises(SystemExit) as stopped:
        main(["estimate", str(PIPELINE), "--codec-gbps", value])
    assert stopped.value.code == 2
    assert error in capsys.readouterr().err


def test_auto_on_ascend_offers_a_method_only_where_a_figure_prices_it(capsys):
    with pytest.raises(ValueError, match=r"--codec-gbps int8=GBPS"):
        auto_plan(PIPELINE, budget=30 * GiB, compress=("int8",))
    assert main(["auto", str(PIPELINE), "--device-memory", "30GiB", "--compress", "int8,lossless",
                 "--codec-gbps", "lossless=300"]) == 2
    assert "nothing prices the codec's time of int8" in capsys.readouterr().err
    plain = auto_plan(PIPELINE, budget=30 * GiB, host_budget=HOST)
    assert plain.compress == () and not any(_compressed(plain))
    # without --compress, the default methods a figure prices: here lossless only
    priced = auto_plan(PIPELINE, budget=30 * GiB, host_budget=HOST, hardware=Hardware(codec_gbps=FAST[1:]))
    assert priced.compress == ("lossless",)
    assert {method for stage in priced.stages for option in stage.options for _, _, method in option.choice.compress
            } == {"lossless"}
    assert "lossless 300 GB/s" in priced.time_source
    assert priced.priced_s <= plain.priced_s


def test_an_mcore_model_under_tensor_parallelism_is_not_offered_compression(tmp_path):
    """The rule `validate` enforces (an mcore compressed linear cannot run under model_parallel > 1) also keeps
    compression out of `auto`'s choices, with a note saying why."""
    data = yaml.safe_load(QWEN3.read_text())
    data["parallel_config"]["model_parallel"] = 2
    path = tmp_path / "qwen3_tp2.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    plan = auto_plan(path, budget=1 * GiB, hardware=Hardware(codec_gbps=FAST))
    assert plan.compress == () and not any(_compressed(plan))
    assert any(note.startswith("compression is not offered: model_parallel 2") for note in plan.notes)


@pytest.mark.parametrize("budget_gib", [23, 26, 29, 32, 35])
def test_the_balance_with_a_codec_is_never_slower_and_a_slow_codec_changes_nothing(budget_gib):
    """Compression only adds choices: with a fast codec the balanced step is never predicted slower than without
    compression, and where a slow codec prices it above recompute nothing is compressed."""
    budget = budget_gib * GiB
    plain = balance_plan(PIPELINE, budget=budget, host_budget=HOST)
    fast = balance_plan(PIPELINE, budget=budget, host_budget=HOST, hardware=Hardware(codec_gbps=FAST))
    slow = balance_plan(PIPELINE, budget=budget, host_budget=HOST, hardware=Hardware(codec_gbps=SLOW))
    assert not any(_compressed(plain.plan)) and not any(_compressed(slow.plan))
    assert fast.balanced.step_s <= plain.balanced.step_s * (1 + 1e-9)
    assert slow.balanced.step_s == pytest.approx(plain.balanced.step_s)
    for result in (plain, fast, slow):
        assert all(stage.peak <= budget for stage in result.balanced.stages)


def test_the_balance_compresses_the_first_stage_and_writes_what_it_planned(tmp_path, capsys):
    """At 30 GiB the first stage (two micro-batches in flight against the last stage's one) needs memory freed and
    the last does not: the balance compresses there, instead of the recompute it needs without a codec, and is
    predicted faster. The YAML it writes validates, and `estimate` with the same figures gives its peaks and times."""
    budget = 30 * GiB
    plain = balance_plan(PIPELINE, budget=budget, host_budget=HOST)
    fast = balance_plan(PIPELINE, budget=budget, host_budget=HOST, hardware=Hardware(codec_gbps=FAST))
    compressed = _compressed(fast.plan)
    assert compressed[0] > 0 and compressed[1:] == [0]
    assert fast.balanced.step_s < plain.balanced.step_s
    written = tmp_path / "balanced.yaml"
    assert main(["auto", str(PIPELINE), "--balance", "--device-memory", "30GiB", "--host-memory", "2GiB",
                 "--codec-gbps", "int8=100,lossless=300", "--output", str(written)]) == 0
    assert "compress feed_forward lossless" in capsys.readouterr().out
    assert main(["auto", str(PIPELINE), "--balance", "--device-memory", "30GiB", "--host-memory", "2GiB",
                 "--codec-gbps", "int8=100,lossless=300", "--json"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["compress_methods"] == ["int8", "lossless"]
    assert yaml.safe_load(written.read_text()) == yaml.safe_load(fast.text)
    assert load_plan(written).warnings == ()
    section = yaml.safe_load(written.read_text())["compress_config"]
    assert section["compress"] is True
    assert sorted(layer for entry in section["op_compress"] for layer in entry["layers"]) == sorted(
        layer for stage in fast.plan.stages for layer, option in stage.got().items() if option.choice.compress)
    again = estimate_config(written, hardware=Hardware(device_memory=budget, codec_gbps=FAST))
    assert [stage.peak.peak for stage in again.stages] == [stage.peak for stage in fast.balanced.stages]
    assert [stage.codec_s for stage in again.stages] == pytest.approx(
        [stage.codec_s for stage in fast.plan.estimate.stages])
    assert again.stages[0].codec_s > 0


def test_auto_and_the_balance_hold_their_properties_with_a_codec():
    """Named minimum, within budget, never slower for a larger budget, and the balance keeping the written layout
    plans it as `auto` does (`benchmarks/planner_properties.py`), with compression among the choices."""
    report = sweep(PIPELINE, steps=8, hardware=Hardware(codec_gbps=FAST), host_budget=HOST)
    assert report.failures == [] and report.budgets == 9


def test_the_smallest_budget_is_named_with_a_codec_too():
    with pytest.raises(InfeasibleBudget) as refused:
        balance_plan(PIPELINE, budget=16 * GiB, host_budget=HOST, hardware=Hardware(codec_gbps=FAST))
    smallest = refused.value.smallest
    assert smallest is not None and smallest > 16 * GiB
    assert balance_plan(PIPELINE, budget=smallest, host_budget=HOST, hardware=Hardware(codec_gbps=FAST)).plan.fits
