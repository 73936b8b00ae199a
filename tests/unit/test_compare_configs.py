"""`compare` before any training: what a candidate may change, what it must keep, and how a drift is narrowed down.

The bisection's search is tested with a stand-in for the training child whose drift is a known function of the
quantised uses it is given; `tests/mindspore/test_compare_e2e.py` trains real runs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

import mf_memopt.compare.engine as compare_module
from mf_memopt.cli import main
from mf_memopt.compare import Comparison, compare_configs
from mf_memopt.compare.configs import LossyUse, check_only_plan_changes, lossy_uses, with_lossy_uses
from mf_memopt.compare.report import comparison_text
from mf_memopt.compare.runs import Run, Step
from mf_memopt.document.errors import ConfigError
from mf_memopt.config.load import load_document, load_plan
from mf_memopt.document.source import load_source

NAN, INF = float("nan"), float("inf")
ROOT = Path(__file__).resolve().parents[2]
LLAMA = ROOT / "configs" / "llama_tiny.yaml"
QWEN3 = ROOT / "configs" / "qwen3_tiny.yaml"
INT2_MLP = ROOT / "configs" / "compress_int2_mlp.yaml"


def _variant(tmp_path: Path, source: Path, name: str, change) -> Path:
    document = yaml.safe_load(source.read_text())
    change(document)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def test_a_candidate_that_changes_the_learning_rate_and_seed_is_refused_naming_each_key(tmp_path, capsys):
    def change(document):
        document["lr_schedule"]["learning_rate"] = 0.5
        document["seed"] = 7
        document["recompute_config"] = {"recompute": True}

    candidate = _variant(tmp_path, LLAMA, "lr.yaml", change)
    assert main(["compare", str(LLAMA), str(candidate), "--steps", "1"]) == 2
    lines = capsys.readouterr().err.splitlines()
    named = [line for line in lines if "differs from the base" in line]
    assert len(named) == 2, lines
    assert any(line.startswith(f"{candidate}:") and "lr_schedule.learning_rate: differs from the base: 0.5 here"
               in line for line in named)
    assert any(": seed: differs from the base: 7 here" in line for line in named)
    assert not any(": recompute_config" in line for line in named)


def test_a_key_only_the_base_sets_is_named_at_the_base(tmp_path):
    candidate = _variant(tmp_path, LLAMA, "no_eval.yaml", lambda document: document.pop("do_eval", None)
                         or document.__setitem__("profile", False))
    base = _variant(tmp_path, LLAMA, "base.yaml", lambda document: document.__setitem__("profile", True))
    with pytest.raises(ConfigError) as caught:
        check_only_plan_changes(load_document(base), load_document(candidate))
    assert [issue.path for issue in caught.value.issues] == ["profile"]


def test_the_plan_sections_and_the_output_directory_may_differ(tmp_path):
    def change(document):
        document["recompute_config"] = {"recompute": True}
        document["swap_config"] = {"swap": False}
        document["output_dir"] = str(tmp_path / "elsewhere")
        document["compress_config"] = {"compress": True, "compress_dense": "level0"}

    candidate = _variant(tmp_path, LLAMA, "full.yaml", change)
    check_only_plan_changes(load_document(LLAMA), load_document(candidate))     # no error


def test_mindformers_mcore_swap_keys_in_model_config_count_as_the_swap_section(tmp_path):
    def change(document):
        document.pop("swap_config", None)
        document["model"]["model_config"]["swap"] = True
        document["model"]["model_config"]["layer_swap"] = [{"backward_prefetch": 1, "layers": True}]

    candidate = _variant(tmp_path, QWEN3, "swap.yaml", change)
    check_only_plan_changes(load_document(QWEN3), load_document(candidate))     # no error


def test_quantised_uses_are_one_per_layer_and_pattern_and_lossless_ones_are_none():
    uses = lossy_uses(load_plan(INT2_MLP))
    layers = load_plan(INT2_MLP).num_layers
    assert len(uses) == layers and {use.method for use in uses} == {"int2"}
    assert [use.layer for use in uses] == list(range(layers))
    dense = load_plan(ROOT / "configs" / "compress_dense_level0.yaml")
    assert lossy_uses(dense) == [] and any(layer.op_compress for layer in dense.layers)


def test_a_bisection_variant_is_a_valid_config_with_exactly_the_uses_kept(tmp_path):
    uses = lossy_uses(load_plan(INT2_MLP))
    kept = (uses[1], uses[3])
    path = tmp_path / "variant.yaml"
    path.write_text(yaml.safe_dump(with_lossy_uses(load_source(INT2_MLP).data, kept), sort_keys=False))
    assert lossy_uses(load_plan(path)) == sorted(kept)
    check_only_plan_changes(load_document(INT2_MLP), load_document(path))


def _run(losses, norms=None, parameters=None, config="x.yaml") -> Run:
    norms = norms or [1.0] * len(losses)
    return Run(config=config, steps=tuple(Step(step=index + 1, loss=loss, global_norm=norm, overflow=False,
                                                loss_scale=1.0)
                                           for index, (loss, norm) in enumerate(zip(losses, norms))),
               parameters=parameters or {"w": "a"}, peak_bytes=2**20)


def test_an_exact_candidate_must_match_every_step_and_every_parameter():
    same = Comparison(base=_run([5.0, 4.0]), candidate=_run([5.0, 4.0]), runtime="cpu", changes=[], lossy=(),
                      tolerance=0.01)
    assert same.equivalent() and same.verdict() == "identical"
    one_ulp = Comparison(base=_run([5.0, 4.0]), candidate=_run([5.0, 4.000000476837158]), runtime="cpu",
                         changes=[], lossy=(), tolerance=0.01)
    assert not one_ulp.equivalent() and one_ulp.first_difference() == 2
    weights = Comparison(base=_run([5.0]), candidate=_run([5.0], parameters={"w": "b"}), runtime="cpu",
                         changes=[], lossy=(), tolerance=0.01)
    assert weights.verdict() == "not identical" and weights.differing_parameters() == ["w"]


def test_a_quantised_candidate_is_judged_by_its_worst_step_against_the_tolerance():
    use = (LossyUse(layer=0, pattern="p", method="int4", group_size=256),)
    inside = Comparison(base=_run([5.0, 4.0]), candidate=_run([5.02, 4.03]), runtime="cpu", changes=[], lossy=use,
                        tolerance=0.01)
    assert inside.equivalent() and inside.drift() == pytest.approx(0.0075)
    beyond = Comparison(base=_run([5.0, 4.0]), candidate=_run([5.02, 4.05]), runtime="cpu", changes=[], lossy=use,
                        tolerance=0.01)
    assert not beyond.equivalent() and beyond.verdict() == "drifts beyond tolerance"


@pytest.mark.parametrize(("losses", "norms"), [([5.001, NAN], None), ([NAN, 4.0], None), ([5.001, INF], None),
                                             ([5.001, 4.0], [1.0, NAN]), ([5.001, 4.0], [INF, 1.0])])
def test_a_quantised_candidate_whose_loss_or_norm_stops_being_finite_drifts_beyond_any_tolerance(losses, norms):
    use = (LossyUse(layer=0, pattern="p", method="int4", group_size=256),)
    result = Comparison(base=_run([5.0, 4.0]), candidate=_run(losses, norms), runtime="cpu", changes=[], lossy=use,
                        tolerance=0.01)
    assert result.drift() == INF and not result.equivalent() and result.verdict() == "drifts beyond tolerance"
    assert "not finite" in comparison_text(result)


def test_the_json_of_a_comparison_whose_loss_stops_being_finite_is_standard_json():
    use = (LossyUse(layer=0, pattern="p", method="int4", group_size=256),)
    result = Comparison(base=_run([5.0, 4.0]), candidate=_run([5.001, NAN], [1.0, -INF]), runtime="cpu", changes=[],
                        lossy=use, tolerance=0.01)
    data = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    assert data["loss_drift"] == "inf" and data["steps"][1]["candidate"]["loss"] == "nan"
    assert data["steps"][1]["candidate"]["global_norm"] == "-inf" and data["steps"][0]["candidate"]["loss"] == 5.001


def test_bisection_counts_a_half_whose_loss_becomes_nan_as_drifting(monkeypatch, tmp_path):
    def train(config, *, steps, work, runtime, dataset):
        layers = {use.layer for use in lossy_uses(load_plan(config))}
        return _run([4.0] + [NAN if 1 in layers else 4.0] * (steps - 1), config=str(config))
    monkeypatch.setattr(compare_module, "train_recorded", train)
    result = compare_configs(LLAMA, INT2_MLP, steps=2, runtime="cpu", tolerance=0.01, work_dir=tmp_path,
                             progress=lambda line: None)
    assert not result.equivalent() and [use.layer for use in result.keep_exact] == [1]


def _fake_training(drift_by_layer: dict[int, float]):
    """A training child whose loss drifts by the sum of the drifts of the quantised layers its YAML keeps."""
    def train(config, *, steps, work, runtime, dataset):
        uses = lossy_uses(load_plan(config))
        drift = sum(drift_by_layer.get(use.layer, 0.0) for use in uses)
        return _run([4.0 * (1 + drift)] * steps, config=str(config))
    return train


@pytest.mark.parametrize(("drifts", "culprits"), [({1: 0.05}, [1]), ({0: 0.02, 3: 0.03}, [0, 3]),
                                                  ({2: 0.006, 3: 0.006}, [2, 3])])
def test_bisection_names_the_layers_that_drift_alone_or_says_they_drift_together(monkeypatch, tmp_path, drifts,
                                                                                  culprits):
    monkeypatch.setattr(compare_module, "train_recorded", _fake_training(drifts))
    result = compare_configs(LLAMA, INT2_MLP, steps=2, runtime="cpu", tolerance=0.01, work_dir=tmp_path,
                             progress=lambda line: None)
    assert not result.equivalent()
    assert [use.layer for use in result.keep_exact] == culprits
    if culprits == [2, 3]:
        assert "drift together" in result.bisect_note


def test_bisection_stops_at_its_run_budget_and_says_so(monkeypatch, tmp_path):
    monkeypatch.setattr(compare_module, "train_recorded", _fake_training({0: 0.02, 1: 0.02, 2: 0.02, 3: 0.02}))
    result = compare_configs(LLAMA, INT2_MLP, steps=1, runtime="cpu", tolerance=0.01, work_dir=tmp_path,
                             max_runs=2, progress=lambda line: None)
    assert len(result.probes) == 2 and "--max-runs 2" in result.bisect_note
