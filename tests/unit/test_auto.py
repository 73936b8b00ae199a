"""`python -m mf_memopt auto`: what it prints and writes, budget edge cases, the round trip, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from auto_profiles import no_user_profile  # noqa: F401 (an autouse fixture)
from mf_memopt.auto import InfeasibleBudget, auto_plan
from mf_memopt.cli import main
from mf_memopt.estimate import estimate_config
from mf_memopt.estimate.report import human
from mf_memopt.models.llama import LLAMA

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs/llama_tiny.yaml"
LLAMA7B = ROOT / "configs/planning/llama2_7b_swap_pp2.yaml"
MiB, GiB = 2**20, 2**30


def _tiny_uniform(tmp_path: Path, *, full: bool) -> int:
    """The cpu estimate of the tiny config with nothing (or every layer fully) recomputed, written by hand."""
    text = TINY.read_text()
    select = "  select_recompute:\n    'feed_forward': True"
    assert select in text and "  recompute: False" in text
    text = text.replace(select, "  select_recompute: False\n    # was: 'feed_forward': True")
    if full:
        text = text.replace("  recompute: False", "  recompute: True")
    path = _write(tmp_path / ("full.yaml" if full else "nothing.yaml"), text)
    return estimate_config(path, runtime="cpu").stages[0].peak.peak


def _tiny_budget(tmp_path: Path) -> tuple[int, int, int]:
    """(budget, nothing peak, full recompute peak): a whole MiB halfway between the two reference plans."""
    nothing, full = _tiny_uniform(tmp_path, full=False), _tiny_uniform(tmp_path, full=True)
    assert full < nothing
    return (full + nothing) // 2 // MiB * MiB, nothing, full


def test_cpu_plan_is_printed_with_the_reference_plans(capsys, tmp_path):
    """Between the full-recompute and the no-recompute peaks, the plan recomputes some layers, is estimated
    (on the written YAML) at the printed peak within the budget, and the references are the uniform plans."""
    budget, nothing, full = _tiny_budget(tmp_path)
    out_file = tmp_path / "planned.yaml"
    assert main(["auto", str(TINY), "--device-memory", f"{budget // MiB}MiB", "--runtime", "cpu",
                 "--output", str(out_file)]) == 0
    lines = capsys.readouterr().out.splitlines()
    target = budget - round(budget * 0.05)
    assert lines[1] == (f"predicted peaks held to {human(target)}: the budget less a 5% margin for the estimator's "
                        "error (--margin 0 to plan to the budget itself; --measure checks by training)")
    assert lines[2] == "added time priced by the FLOP model at 150 TFLOPS: " + lines[2].split(": ")[1]
    assert lines[4].split() == ["stage", "layers", "budget", "predicted", "peak", "host", "(swap)", "overhead",
                                "nothing:", "peak", "overhead", "full", "recompute:", "peak", "overhead"]
    peak = estimate_config(out_file, runtime="cpu").stages[0].peak.peak
    assert full <= peak <= target
    row = lines[5].split()
    assert row[:2] == ["0", "0-3"] and " ".join(row[2:4]) == human(budget) and " ".join(row[4:6]) == human(peak)
    assert row[6:8] == ["0", "B"] and 0.0 < float(row[8].rstrip("%")) < 33.3
    assert " ".join(row[9:11]) == human(nothing) and row[11] == "0.0%"
    assert " ".join(row[12:14]) == human(full) and row[14] == "33.3%"   # a forward more per forward + backward
    assert lines[7].startswith("stage 0: 0") and "recompute" in lines[7] and lines[7].endswith(" keep")
    assert lines[-1] == f"written to {out_file}"
    written = yaml.safe_load(out_file.read_text())
    counts = written["recompute_config"]["recompute"]
    assert isinstance(counts, list) and len(counts) == 1 and 0 < counts[0] < 4   # per-stage count form
    assert written["swap_config"] == {"swap": False}


def test_written_yaml_keeps_the_rest_of_the_file_and_explains_itself(tmp_path):
    budget, _, _ = _tiny_budget(tmp_path)
    result = auto_plan(TINY, budget=budget, runtime="cpu")
    header = [line for line in result.text.splitlines() if line.startswith("# mf_memopt auto:")]
    assert header[0] == f"# mf_memopt auto: plan for {human(budget)} of device memory per stage (cpu runtime), " \
                        "host memory unlimited."
    peak = estimate_config(_write(tmp_path / "written.yaml", result.text), runtime="cpu").stages[0].peak.peak
    assert peak <= budget
    assert any(f"stage 0: predicted peak {human(peak)}, overhead " in line and line.endswith(" keep")
               for line in header)
    original = yaml.safe_load(TINY.read_text())
    written = yaml.safe_load(result.text)
    assert {key: value for key, value in written.items() if not key.endswith("_config")} == \
           {key: value for key, value in original.items() if not key.endswith("_config")}
    assert written["model"] == original["model"]
    again = auto_plan(_write(tmp_path / "again.yaml", result.text), budget=budget, runtime="cpu")
    assert again.text.count("# mf_memopt auto: plan for") == 1     # re-planning replaces the old header


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize("budget", ["30GiB", "34GiB", "40GiB"])
def test_round_trip_through_validate_plan_and_estimate(capsys, tmp_path, budget):
    out_file = tmp_path / "planned.yaml"
    assert main(["auto", str(LLAMA7B), "--device-memory", budget, "--json", "--output", str(out_file)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert main(["validate", str(out_file)]) == 0
    assert ": valid:" in capsys.readouterr().out
    assert main(["plan", str(out_file), "--json"]) == 0
    layers = json.loads(capsys.readouterr().out)["layers"]
    for stage in result["stages"]:
        for item in stage["plan"]:
            layer = layers[item["layer"]]
            assert layer["full_recompute"] == (item["choice"] == "full recompute")
            if "swap attention" in item["choice"]:
                assert layer["op_swap"] == {"attention": item["backward_prefetch"]}
            if "recompute feed_forward" in item["choice"]:
                assert layer["select_recompute"] == ["feed_forward"]
    estimate = estimate_config(out_file)
    assert [stage.peak.peak for stage in estimate.stages] == [stage["peak_bytes"] for stage in result["stages"]]
    assert all(stage["peak_bytes"] <= stage["searched_budget_bytes"] for stage in result["stages"])


def test_interleaved_counts_round_trip(tmp_path):
    text = (ROOT / "configs/planning/interleave_48l_pp5.yaml").read_text()
    config = _write(tmp_path / "interleave.yaml", text)
    nothing = estimate_config(config)
    budget = int(0.8 * max(stage.peak.peak for stage in nothing.stages))
    result = auto_plan(config, budget=budget, choices=_no_swap())
    written = _write(tmp_path / "out.yaml", result.text)
    estimate = estimate_config(written)
    assert [stage.peak.peak for stage in estimate.stages] == [stage.peak.peak for stage in result.estimate.stages]
    assert all(stage.peak.peak <= budget for stage in estimate.stages)
    recompute = yaml.safe_load(result.text)["recompute_config"]["recompute"]
    assert recompute is False or (isinstance(recompute, list) and len(recompute) == 2)   # [chunk][stage] counts


@pytest.mark.parametrize("config", sorted((ROOT / "configs/planning").glob("*.yaml")), ids=lambda path: path.name)
def test_shipped_planning_configs_get_plans_that_validate_cleanly(tmp_path, config):
    from mf_memopt.config.load import load_plan

    probe = auto_plan(config, budget=1 << 50)
    low = max(stage.peak.peak for stage in probe.references["full recompute"].stages)
    high = max(stage.peak.peak for stage in probe.references["nothing"].stages)
    result = auto_plan(config, budget=(low + high) // 2)
    written = load_plan(_write(tmp_path / "out.yaml", result.text))
    assert written.warnings == ()
    assert all(stage.peak.peak <= (low + high) // 2 for stage in estimate_config(tmp_path / "out.yaml").stages)


def _no_swap():
    from mf_memopt.auto import choice_set

    return choice_set(LLAMA.auto_cells, swap=False)


def test_budget_above_nothing_gives_an_empty_plan(capsys, tmp_path):
    nothing = _tiny_uniform(tmp_path, full=False)
    assert main(["auto", str(TINY), "--device-memory", "1GiB", "--runtime", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "stage 0: 0-3 keep" in out
    assert f"the budget is at or above the peak without any recompute or swap ({human(nothing)}): the plan is " \
           "empty" in out


def test_infeasible_budget_names_the_minimum_per_stage_and_the_binding_stage(capsys):
    assert main(["auto", str(LLAMA7B), "--device-memory", "16GiB"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == ("auto: no plan fits 16.0 GiB of device memory per stage; the smallest budget each stage "
                            "can meet: stage 0: 20.7 GiB, stage 1: 20.9 GiB (binding). Give at least 20.9 GiB "
                            "(stage 1 binds).\n")
    assert main(["auto", str(LLAMA7B), "--device-memory", "20.9GiB"]) == 0


def test_infeasible_json(capsys, tmp_path):
    """Below every plan's peak: the minimum named is within the 1 MiB search step of the full-recompute
    peak (or below it) and is enough."""
    full = _tiny_uniform(tmp_path, full=True)
    assert main(["auto", str(TINY), "--device-memory", "20MiB", "--runtime", "cpu", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["feasible"] is False and data["binding_stage"] == 0
    minimum = data["minimum_budget_bytes"]["0"]
    assert 20 * MiB < minimum < full + MiB
    assert main(["auto", str(TINY), "--device-memory", f"{-(-minimum // MiB)}MiB", "--runtime", "cpu"]) == 0


@pytest.mark.parametrize("argv, message", [
    (["--device-memory", "lots"], "auto: --device-memory: not a size: 'lots' (examples: 64GiB, 32GB, 512MiB)"),
    (["--device-memory", "1GiB", "--host-memory", "-"],
     "auto: --host-memory: not a size: '-' (examples: 64GiB, 32GB, 512MiB)"),
    (["--device-memory=-5GiB"], "auto: --device-memory: must be more than 0, got '-5GiB'"),
    (["--device-memory", "0MiB"], "auto: --device-memory: must be more than 0, got '0MiB'"),
    (["--device-memory", "1GiB", "--measure"],
     "auto: --measure trains the plan on this machine's CPU launcher: use it with --runtime cpu"),
    (["--device-memory", "1GiB", "--profile"],
     "auto: --profile measures step times with this machine's CPU launcher: use it with --runtime cpu"),
    (["--device-memory", "1GiB", "--runtime", "cpu", "--rivals", "-1"], "auto: --rivals must be 0 or more, got -1"),
    (["--device-memory", "1GiB", "--balance", "--measure"],           # one hint, the --balance one, not two
     "auto: --balance plans pipeline stages, which the ascend runtime models: use it without --runtime cpu and "
     "--measure"),
])
def test_cli_errors(capsys, argv, message):
    assert main(["auto", str(TINY), *argv]) == 2
    assert capsys.readouterr().err.strip() == message


def test_device_memory_is_required_with_the_cpu_runtime(capsys):
    assert main(["auto", str(TINY), "--runtime", "cpu"]) == 2
    assert "auto: --runtime cpu needs --device-memory" in capsys.readouterr().err


def test_config_errors_are_reported_like_validate(capsys, tmp_path):
    bad = _write(tmp_path / "bad.yaml", TINY.read_text().replace("recompute: False", "recompute: [-1]"))
    assert main(["auto", str(bad), "--device-memory", "40MiB", "--runtime", "cpu"]) == 1
    assert "recompute_config.recompute[0]" in capsys.readouterr().err


def test_cpu_runtime_refuses_pipeline_configs(capsys):
    assert main(["auto", str(LLAMA7B), "--device-memory", "30GiB", "--runtime", "cpu"]) == 1
    assert "parallel_config.pipeline_stage: the cpu runtime models the launcher's single-stage training" in \
           capsys.readouterr().err


def test_host_budget_limits_swap(capsys):
    assert main(["auto", str(LLAMA7B), "--device-memory", "34GiB", "--json"]) == 0
    free = json.loads(capsys.readouterr().out)
    assert main(["auto", str(LLAMA7B), "--device-memory", "34GiB", "--host-memory", "1GiB", "--json"]) == 0
    held = json.loads(capsys.readouterr().out)
    assert max(stage["host_bytes"] for stage in free["stages"]) > GiB
    assert all(stage["host_bytes"] <= GiB for stage in held["stages"])
    assert sum(stage["overhead"] for stage in held["stages"]) > sum(stage["overhead"] for stage in free["stages"])


def test_measure_tightens_by_the_measured_excess_at_most_three_times(tmp_path):
    """The loop itself, with a stand-in for the launcher that reports the pool a few MiB over the prediction, in
    whole MiB cut down as MindSpore prints it: a reading of m MiB is a peak below m + 1 MiB, and the excess is
    counted from there."""
    from mf_memopt.auto.measure import highest, measure_rounds

    def plan_for(target: int):
        return auto_plan(TINY, budget=target, runtime="cpu", margin=0.0)      # as `auto --measure` plans

    def train(config: Path, work: Path) -> int:
        planned = estimate_config(config, runtime="cpu").stages[0].peak.peak
        return (planned + 5 * MiB) // MiB * MiB

    lines: list[str] = []
    rounds = measure_rounds(plan_for, 50 * MiB, tmp_path / "out.yaml", lines.append, train=train)
    first = rounds[0]
    assert rounds[1].planned_for == first.predicted - (highest(first.measured) - 50 * MiB)
    assert len(rounds) <= 3 and len(lines) == len(rounds)
    assert first.predicted <= 50 * MiB < first.measured
    assert lines[0].startswith(f"round 1: planned for 50.0 MiB, predicted peak {human(first.predicted)}, measured "
                               f"pool peak {human(first.measured)} (under {human(first.measured + MiB)}): over by up "
                               f"to {human(first.measured + MiB - 1 - 50 * MiB)}")
    assert rounds[-1].measured + MiB - 1 <= 50 * MiB and lines[-1].endswith("within the budget")
    assert (tmp_path / "out.yaml").read_text() == rounds[-1].plan.text


def test_a_reading_at_the_budget_is_over_it_by_up_to_a_mib():
    """MindSpore's pool peak of m MiB stands for any peak in [m, m + 1) MiB: at a budget of m MiB the plan may be
    over it, and --measure does not keep it as holding the budget."""
    from mf_memopt.auto.measure import holds

    assert holds(49 * MiB, 50 * MiB) and not holds(50 * MiB, 50 * MiB) and holds(50 * MiB, 51 * MiB - 1)


def test_a_later_round_with_no_plan_names_the_round_that_measured_over_the_budget(tmp_path):
    """When the measured excess tightens the target below every plan's predicted peak, the error names the user's
    budget, the round that measured over it and the tightened target, not "the" budget."""
    from mf_memopt.auto.measure import TightenedInfeasible, measure_rounds

    def plan_for(target: int):
        return auto_plan(TINY, budget=target, runtime="cpu", margin=0.0)

    with pytest.raises(TightenedInfeasible) as caught:
        measure_rounds(plan_for, 50 * MiB, None, lambda line: None, train=lambda config, work: 200 * MiB)
    text = str(caught.value)
    assert text.startswith("round 1's plan, made for 50.0 MiB, measured 200.0 MiB in the memory pool, over the "
                           "50.0 MiB budget")
    assert "round 2 planned for that much less" in text and caught.value.target < 0


def test_cpu_plans_keep_a_margin_for_the_estimators_error(capsys, tmp_path):
    """On the cpu runtime the search holds predicted peaks 5% under the budget (the estimator's worst held-out
    under-estimate, rounded up); --margin sets another share, 0 plans to the budget itself, and the smallest
    budget an infeasible plan names includes the margin."""
    budget, _, _ = _tiny_budget(tmp_path)
    kept = auto_plan(TINY, budget=budget, runtime="cpu")
    assert (kept.margin, kept.target) == (0.05, budget - round(budget * 0.05))
    assert all(stage.peak.peak <= kept.target for stage in kept.estimate.stages)
    assert "# mf_memopt auto: Predicted peaks held to " in kept.text
    exact = auto_plan(TINY, budget=budget, runtime="cpu", margin=0.0)
    assert exact.target == budget and "Predicted peaks held to" not in exact.text
    assert max(stage.peak.peak for stage in exact.estimate.stages) >= \
           max(stage.peak.peak for stage in kept.estimate.stages)
    assert auto_plan(LLAMA7B, budget=40 * GiB).margin == 0.0                   # ascend: nothing measured here

    with pytest.raises(InfeasibleBudget) as plain:
        auto_plan(TINY, budget=20 * MiB, runtime="cpu", margin=0.0)
    with pytest.raises(InfeasibleBudget) as held:
        auto_plan(TINY, budget=20 * MiB, runtime="cpu", margin=0.1)
    smallest, peak = held.value.minimum[0], plain.value.minimum[0]       # the least peak, held to 90% of the budget
    assert smallest - round(smallest * 0.1) >= peak > smallest - 1 - round((smallest - 1) * 0.1)
    assert auto_plan(TINY, budget=smallest, runtime="cpu", margin=0.1).fits
    with pytest.raises(InfeasibleBudget):
        auto_plan(TINY, budget=smallest - 1, runtime="cpu", margin=0.1)
    assert main(["auto", str(TINY), "--device-memory", "20MiB", "--runtime", "cpu", "--margin", "10"]) == 1
    assert "can meet, with the 10% margin: stage 0: " in capsys.readouterr().err

    assert main(["auto", str(TINY), "--device-memory", f"{budget // MiB}MiB", "--runtime", "cpu",
                 "--margin", "2.5", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["margin"] == 0.025 and data["target_bytes"] == budget // MiB * MiB - round(budget // MiB * MiB * 0.025)


@pytest.mark.parametrize("value", ["100", "-1", "lots"])
def test_margin_is_a_percentage_under_100(capsys, value):
    with pytest.raises(SystemExit):
        main(["auto", str(TINY), "--device-memory", "1GiB", "--margin", value])
    assert "--margin" in capsys.readouterr().err


def _seqpipe(tmp_path: Path, recompute: str = "False") -> Path:
    """The Llama2-7B planning config on seq pipe: 2 stages x 2 chunks, each micro-batch split into 2 sequence
    chunks."""
    text = LLAMA7B.read_text()
    text = text[:text.index("recompute_config:")] + f"recompute_config:\n  recompute: {recompute}\n\n" \
        "swap_config:\n  swap: False\n"
    text = text.replace("  micro_batch_num: 8\n", "  micro_batch_num: 8\n  seq_split_num: 2\n")
    text = text.replace("    offset: 0\n", "    offset: 0\n    pp_interleave_num: 2\n")
    text = text.replace("  enable_parallel_optimizer: True\n", "  enable_parallel_optimizer: True\n  pipeline_config:\n"
                        "    pipeline_interleave: True\n    pipeline_scheduler: seqpipe\n", 1)
    return _write(tmp_path / f"seqpipe_{recompute}.yaml", text)


def test_seq_pipe_refuses_full_recompute_as_mindformers_does_and_auto_never_writes_it(tmp_path, capsys):
    """MindFormers' trainer refuses full recompute when seq_split_num > 1, even `recompute: [0, 0]` (it tests the
    value for truth): validate says so; auto plans with the cells alone and says what it counts of seq pipe."""
    assert main(["validate", str(_seqpipe(tmp_path, "[0, 0]"))]) == 1
    assert "MindFormers refuses full recompute then" in capsys.readouterr().err
    config = _seqpipe(tmp_path)
    probe = auto_plan(config, budget=1 << 60)
    assert list(probe.references) == ["nothing", "every cell recomputed"]
    low = max(stage.peak.peak for stage in probe.references["every cell recomputed"].stages)
    high = max(stage.peak.peak for stage in probe.references["nothing"].stages)
    plan = auto_plan(config, budget=(low + high) // 2)
    assert plan.fits and not any(option.choice.full for stage in plan.stages for option in stage.options)
    assert any("seq pipe (seq_split_num 2)" in note for note in plan.estimate.notes)
    assert yaml.safe_load(plan.text)["recompute_config"]["recompute"] is False


def test_seq_pipe_is_refused_for_mcore_models_as_mindformers_refuses_it(tmp_path, capsys):
    text = (ROOT / "configs/qwen3_tiny.yaml").read_text().replace("  pipeline_stage: 1\n", "  pipeline_stage: 2\n"
                                                                  "  seq_split_num: 4\n")
    assert main(["validate", str(_write(tmp_path / "qwen3_seq.yaml", text))]) == 1
    assert "which MindFormers refuses for its mcore models" in capsys.readouterr().err
