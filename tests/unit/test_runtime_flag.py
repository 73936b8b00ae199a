"""`--runtime` on `compare` and `estimate --measure` cannot choose where they train (the launcher trains on the
YAML's context.device_target): a flag naming another device is refused in one line before anything trains."""

from __future__ import annotations

from pathlib import Path

import pytest

import mf_memopt.compare.engine as compare_module
from mf_memopt.cli import main
from mf_memopt.runs import measure

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs" / "llama_tiny.yaml"          # context.device_target: "CPU"
REFUSAL = (f"{TINY}:10: context.device_target: --runtime ascend, but the YAML trains on CPU (leave --runtime out, "
           "or set context.device_target: Ascend)")


class Trained(Exception):
    """A training child would have started."""


def _no_training(*_, **__):
    raise Trained


def test_the_yaml_line_the_refusal_names_is_the_device():
    assert TINY.read_text().splitlines()[9].strip() == 'device_target: "CPU"'


def test_compare_refuses_another_device_before_training(monkeypatch, capsys):
    monkeypatch.setattr(compare_module, "train_recorded", _no_training)
    assert main(["compare", str(TINY), str(TINY), "--runtime", "ascend"]) == 2
    assert capsys.readouterr().err.splitlines() == [REFUSAL]


def test_estimate_measure_refuses_another_device_before_training(monkeypatch, capsys):
    monkeypatch.setattr(measure, "train", _no_training)
    assert main(["estimate", str(TINY), "--measure", "--runtime", "ascend"]) == 1
    assert capsys.readouterr().err.splitlines()[-1] == REFUSAL


@pytest.mark.parametrize("argv", [["compare", str(TINY), str(TINY)], ["estimate", str(TINY), "--measure"]])
@pytest.mark.parametrize("flag", [[], ["--runtime", "cpu"]])
def test_the_yaml_device_named_or_left_out_trains(monkeypatch, argv, flag):
    monkeypatch.setattr(compare_module, "train_recorded", _no_training)
    monkeypatch.setattr(measure, "train", _no_training)
    with pytest.raises(Trained):
        main([*argv, *flag])
