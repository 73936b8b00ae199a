"""`auto --measure` end to end on CPU (issue 37): the step-time profile measured and cached, the plan raced against
its nearest rival, and the kept plan holding the budget by measurement."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from auto_profiles import no_user_profile  # noqa: F401 (an autouse fixture)
from mf_memopt.auto.choices import KEEP, Choice
from mf_memopt.auto.space import PlanSpace
from mf_memopt.cli import main

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs/llama_tiny.yaml"
MiB = 2**20
FULL = Choice(full=True)


def test_measure_profiles_races_rivals_and_keeps_the_fastest(capsys, tmp_path, monkeypatch):
    """End to end on a 2-layer, hidden-128 Llama: the profile is measured and cached, the plan is trained (the peak
    round, within the budget) and raced against its nearest rival, and the kept plan holds the budget by measurement
    and is the one written."""
    data = yaml.safe_load(TINY.read_text())
    data["model"]["model_config"].update(num_layers=2, hidden_size=128, seq_length=256, num_heads=2)
    config = tmp_path / "tiny2.yaml"
    config.write_text(yaml.safe_dump(data))
    out = tmp_path / "planned.yaml"
    space = PlanSpace(config)
    full_peak, none_peak = space.candidate((FULL, FULL)).peak, space.candidate((KEEP, KEEP)).peak
    budget = (full_peak + none_peak) // 2 // MiB * MiB           # halfway: some layer recomputes, some keeps
    assert full_peak < budget < none_peak
    assert main(["auto", str(config), "--runtime", "cpu", "--device-memory", f"{budget // MiB}MiB", "--measure",
                 "--rivals", "1", "--timing-runs", "1", "--json", "--output", str(out)]) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert "profile" in captured.err and list((tmp_path / "cache" / "auto_times").glob("*.json"))
    rounds = [line for line in captured.err.splitlines() if line.startswith("round ")]
    assert rounds and rounds[-1].endswith("within the budget")
    assert result["time_source"].startswith("step-time profile measured here")
    kept = [item for item in result["timed"] if item["kept"]]
    assert len(result["timed"]) == 2 and len(kept) == 1
    assert kept[0]["peak_bytes"] <= budget and out.read_text() == result["yaml"]
