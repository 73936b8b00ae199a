"""`auto` with compression among its choices: a cell's Linear inputs kept compressed (int8/int4/int2, lossless), alone
or next to recomputing the other cell, priced by the measured step-time profile and written to `compress_config`."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from auto_profiles import no_user_profile, profile_table  # noqa: F401 (no_user_profile: an autouse fixture)
from mf_memopt.auto import auto_plan
from mf_memopt.auto.choices import KEEP, Choice, choice_set
from mf_memopt.auto.timing import GROUP, profile
from mf_memopt.cli import main
from mf_memopt.config.load import load_plan
from mf_memopt.document.source import load_source
from mf_memopt.estimate import estimate_config
from mf_memopt.models.llama import LLAMA

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs/llama_tiny.yaml"
QWEN3 = ROOT / "configs/qwen3_tiny.yaml"
MiB = 2**20
RECOMPUTE = {"full recompute": 0.09, "recompute attention": 0.07, "recompute feed_forward": 0.03,
             "recompute feed_forward+attention": 0.095}
COMPRESS = {"compress feed_forward int8": 0.004, "compress feed_forward lossless": 0.001,
            "recompute attention, compress feed_forward int8": 0.074,
            "recompute attention, compress feed_forward lossless": 0.071}


def test_the_choices_name_the_cell_and_the_method():
    names = [choice.name for choice in choice_set(LLAMA.auto_cells, swap=False, compress=("int8", "lossless"))]
    assert names[5:] == ["compress feed_forward int8", "recompute attention, compress feed_forward int8",
                         "compress feed_forward lossless", "recompute attention, compress feed_forward lossless"]
    plan = Choice(select=("attention",), compress=(("feed_forward", r"feed_forward\.w2", "lossless"),)).layer_plan(
        3, 0, 0)
    assert [(use.pattern, use.method, use.group_size) for use in plan.op_compress] == [
        (r"feed_forward\.w2", "lossless", 256)]


@pytest.mark.parametrize("budget_mib", [44, 52, 60])
def test_a_plan_that_compresses_is_written_validated_and_estimated_as_planned(tmp_path, budget_mib):
    """Where the profile makes compression cheaper than recompute, the plan compresses; the YAML it writes has the
    compress_config that says so, validates, and `estimate` gives the search's peaks; it is never slower than the best
    plan without compression."""
    budget = budget_mib * MiB
    table = profile_table(TINY, {**RECOMPUTE, **COMPRESS})
    plan = auto_plan(TINY, budget=budget, runtime="cpu", margin=0.0, times=table)
    plain = auto_plan(TINY, budget=budget, runtime="cpu", margin=0.0, times=table, compress=())
    assert any(option.choice.compress for option in plan.stages[0].options)
    assert plan.priced_s <= plain.priced_s + 1e-15
    written = tmp_path / "planned.yaml"
    written.write_text(plan.text)
    assert load_plan(written).warnings == ()
    section = yaml.safe_load(plan.text)["compress_config"]
    layers = {entry["method"]: entry["layers"] for entry in section["op_compress"]}
    chosen = {method for option in plan.stages[0].options for _, _, method in option.choice.compress}
    assert section["compress"] is True and set(layers) == chosen
    estimate = estimate_config(written, runtime="cpu")
    assert [stage.peak.peak for stage in estimate.stages] == [stage.peak.peak for stage in plan.estimate.stages]
    assert max(stage.peak.peak for stage in estimate.stages) <= budget
    assert "compress_config" not in yaml.safe_load(plain.text) or \
        yaml.safe_load(plain.text)["compress_config"] == {"compress": False}


def test_mcore_linears_are_compressed_as_the_estimate_counts_them(tmp_path):
    table = profile_table(QWEN3, {"full recompute": 0.09, "recompute self_attention": 0.07, "recompute mlp": 0.05,
                           "recompute mlp+self_attention": 0.095, "compress mlp int8": 0.002,
                           "recompute self_attention, compress mlp int8": 0.072})
    probe = auto_plan(QWEN3, budget=1 << 40, runtime="cpu", times=table, compress=("int8",))
    low = max(stage.peak.peak for stage in probe.references["full recompute"].stages)
    high = max(stage.peak.peak for stage in probe.references["nothing"].stages)
    plan = auto_plan(QWEN3, budget=(low + high) // 2, runtime="cpu", margin=0.0, times=table, compress=("int8",))
    assert any(option.choice.compress for option in plan.stages[0].options)
    written = tmp_path / "qwen3.yaml"
    written.write_text(plan.text)
    assert [stage.peak.peak for stage in estimate_config(written, runtime="cpu").stages] == \
           [stage.peak.peak for stage in plan.estimate.stages]


def test_compression_needs_a_measured_profile(capsys):
    """Nothing models the codec's time: without a profile (or a codec throughput measured on the device,
    tests/unit/test_auto_codec.py) compression is not offered, and asking for it is refused."""
    flops = auto_plan(TINY, budget=52 * MiB, runtime="cpu", margin=0.0)
    assert not any(option.choice.compress for option in flops.stages[0].options)
    assert "compress_config:\n  compress: True" not in flops.text
    with pytest.raises(ValueError, match="nothing prices the codec's time of int8"):
        auto_plan(TINY, budget=52 * MiB, runtime="cpu", compress=("int8",))
    assert main(["auto", str(TINY), "--runtime", "cpu", "--device-memory", "52MiB", "--compress", "int8"]) == 2
    assert "add --profile (or --measure)" in capsys.readouterr().err
    assert main(["auto", str(TINY), "--device-memory", "52MiB", "--compress", "int3"]) == 2
    assert "unknown method(s) int3" in capsys.readouterr().err
    assert main(["auto", str(TINY), "--device-memory", "52GiB", "--compress", "int8"]) == 2
    assert "give its throughput measured on the device (--codec-gbps int8=GBPS)" in capsys.readouterr().err


def test_a_compression_the_profile_has_no_time_for_is_not_offered():
    table = profile_table(TINY, RECOMPUTE)             # measured before compression was a choice
    plan = auto_plan(TINY, budget=52 * MiB, runtime="cpu", margin=0.0, times=table)
    assert not any(option.choice.compress for option in plan.stages[0].options)


def test_the_profile_races_at_most_a_group_of_plans_each_with_keep():
    """A race holds every plan's compiled step at once: the choices are raced in groups of at most `GROUP`, keep in
    each, and each choice is priced against keep of its own race."""
    races = []

    def race(configs, work, steps):
        races.append([path.read_text() for path in configs])
        return [tuple([1.0 + 0.01 * len(name)] * 10) for name in races[-1]]

    choices = choice_set(LLAMA.auto_cells, swap=False, compress=("int8", "int4", "lossless"))
    table = profile(load_source(TINY), 4, lambda choice: choice.name, choices, runs=1, race=race)
    assert len(races) >= 2 and all(len(names) <= GROUP and names[0] == "keep" for names in races)
    assert sorted(name for names in races for name in names[1:]) == sorted(
        choice.name for choice in choices if choice != KEEP)
    name = "compress feed_forward int4"
    assert table.added_s[name] == pytest.approx(0.01 * (len(name) - len("keep")) / 4, rel=1e-9)


def test_compression_times_measured_with_another_codec_are_not_reused():
    """The fused kernels and the graph-operator reference differ by about a quarter of a step: a profile's
    compression times count only for the codec that measured them; its recompute times stay."""
    from dataclasses import replace

    from mf_memopt.auto.timing import without_other_codec

    table = replace(profile_table(TINY, {**RECOMPUTE, **COMPRESS}), codec="reference")
    assert without_other_codec(table, "reference") is table
    fused = without_other_codec(table, "fused")
    assert set(fused.added_s) == {"keep", *RECOMPUTE}
    plan = auto_plan(TINY, budget=52 * MiB, runtime="cpu", margin=0.0, times=fused)
    assert not any(option.choice.compress for option in plan.stages[0].options)


@pytest.mark.parametrize("budget_mib", [44, 52])
def test_measure_races_a_compressing_plan_against_the_best_plan_without_compression(budget_mib):
    """`--measure`'s rivals come from the choices the search had, compression included; when auto's plan compresses,
    the fastest plan without compression is always raced beside it, named so, so the race says what compression
    bought."""
    from mf_memopt.auto.space import rivals
    from mf_memopt.config.load import load_document

    table = profile_table(TINY, {**RECOMPUTE, **COMPRESS})
    plan = auto_plan(TINY, budget=budget_mib * MiB, runtime="cpu", margin=0.0, times=table)
    plain = auto_plan(TINY, budget=budget_mib * MiB, runtime="cpu", margin=0.0, times=table, compress=())
    assert plan.compress == ("int8", "lossless") and plain.compress == ()
    assert any(option.choice.compress for option in plan.stages[0].options)
    found = rivals(load_document(TINY), plan, count=2, times=table)
    assert len(found) == 2 and found[0][0].startswith("without compression: ")
    assert found[0][1].priced_s == pytest.approx(plain.priced_s, abs=1e-12)
    assert not any(option.choice.compress for option in found[0][1].stages[0].options)
    assert yaml.safe_load(found[0][1].text)["compress_config"] == {"compress": False}
    assert all(rival.priced_s >= plan.priced_s - 1e-12 for _, rival in found)
    assert not any(name.startswith("without compression") for name, _ in rivals(load_document(TINY), plain, count=2,
                                                                                  times=table))


def test_a_race_killed_for_memory_is_raced_again_in_halves_each_with_keep():
    """A race holds every plan at once: at a larger shape six plans can be more than the machine has. A race killed
    by SIGKILL is split in two, keep in each, down to keep and one plan; every choice is still priced against keep of
    its own race."""
    from mf_memopt.auto.race import RaceKilled

    races, lines, killed = [], [], []

    def race(configs, work, steps):
        names = [path.read_text() for path in configs]
        if len(names) > 3:
            killed.append(len(names))
            raise RaceKilled(f"racing {len(names)} plans was killed (SIGKILL)")
        races.append(names)
        return [tuple([1.0 + 0.01 * len(name)] * 10) for name in names]

    choices = choice_set(LLAMA.auto_cells, swap=False, compress=("int8", "lossless"))
    table = profile(load_source(TINY), 4, lambda choice: choice.name, choices, runs=1, race=race, report=lines.append)
    assert all(len(names) <= 3 and names[0] == "keep" for names in races)
    assert sorted(name for names in races for name in names[1:]) == sorted(
        choice.name for choice in choices if choice != KEEP)
    assert killed == [6, 4]         # once a size was killed, no race of that size is tried again
    assert sum("was killed (out of memory?)" in line for line in lines) == 2
    assert "of at most 3 plans" in table.source
    name = "compress feed_forward int8"
    assert table.added_s[name] == pytest.approx(0.01 * (len(name) - len("keep")) / 4, rel=1e-9)

    def never(configs, work, steps):
        raise RaceKilled("killed")

    with pytest.raises(RaceKilled):
        profile(load_source(TINY), 4, lambda choice: choice.name, choices, runs=1, race=never)
