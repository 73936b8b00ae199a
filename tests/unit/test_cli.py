"""`python -m mf_memopt validate|plan`: exit codes and what is printed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from mf_memopt.cli import main

ROOT = Path(__file__).resolve().parents[2]
CASE3 = "configs/swap_case3_op_swap.yaml"


def test_validate_prints_one_summary_line(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["validate", CASE3]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert out.splitlines() == [
        "configs/swap_case3_op_swap.yaml: valid: 4 layers in 1 pipeline stage x 1 chunk; layers with full "
        "recompute: 0, select recompute: 0, comm recompute: 0; swap on (4 layers swapped); 0 conflicts resolved, "
        "0 warnings"]


def test_missing_file_is_an_issue_not_a_traceback(capsys):
    assert main(["validate", "no/such/file.yaml"]) == 1
    assert capsys.readouterr().err == "no/such/file.yaml: <document>: cannot read the file: No such file or directory\n"


def test_plan_prints_formative_lines_then_the_table(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["plan", CASE3]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "Formative layer_recompute: []"
    assert lines[5:7] == ["Formative layer swap: []",
                          "Formative op swap: {'attention': [{'backward_prefetch': 20, 'layers': [0, 1, 2]}, "
                          "{'backward_prefetch': 10, 'layers': [3]}], 'feed_forward': [{'backward_prefetch': 15, "
                          "'layers': [1, 2]}]}"]
    assert lines[8].split() == ["layer", "stage", "chunk", "full", "select", "comm", "exclude", "comm-exclude",
                                "layer-swap", "op-swap", "conflicts"]
    assert lines[10].split() == ["1", "0", "0", "-", "-", "-", "-", "-", "-", "attention=20,feed_forward=15", "-"]


def test_plan_lists_conflicts_after_the_table(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["plan", "configs/planning/interleave_48l_pp5.yaml"]) == 0
    conflicts = [line for line in capsys.readouterr().out.splitlines() if line.startswith("conflict: ")]
    assert len(conflicts) == 6
    config = ROOT / "configs/planning/interleave_48l_pp5.yaml"
    line = next(number for number, text in enumerate(config.read_text().splitlines(), 1)
                if text.startswith("  recompute: [[2, 1"))
    assert conflicts[0].startswith(f"conflict: layers 0, 1, 4, 24: full recompute (recompute_config.recompute, "
                                   f"line {line}) wins over select recompute `feed_forward\\.w1\\.activation\\.silu`")


def test_strict_fails_on_conflicts(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["validate", "--strict", "configs/planning/interleave_48l_pp5.yaml"]) == 1
    errors = capsys.readouterr().err.splitlines()
    assert len(errors) == 6
    assert all("conflict (--strict)" in line for line in errors)


def test_plan_json_is_the_plan_dictionary(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["plan", "--json", CASE3]) == 0
    data = json.loads(capsys.readouterr().out)
    assert sorted(data) == ["conflicts", "layers", "num_layers", "warnings"]
    assert data["layers"][1]["op_swap"] == {"attention": 20, "feed_forward": 15}


def test_module_entry_point_exit_codes():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    ok = subprocess.run([sys.executable, "-m", "mf_memopt", "validate", CASE3], cwd=ROOT, env=env,
                        capture_output=True, text=True)
    bad = subprocess.run([sys.executable, "-m", "mf_memopt", "validate", "tests/data/invalid/negative_count.yaml"],
                         cwd=ROOT, env=env, capture_output=True, text=True)
    assert (ok.returncode, bad.returncode) == (0, 1)
    assert bad.stderr.startswith("tests/data/invalid/negative_count.yaml:6: recompute_config.recompute[0]: ")
    assert "Traceback" not in bad.stderr


# A MindFormers 2.x PyNative trainer YAML: the sections of mindformers/pynative/config/config.py's TrainConfig.
TRAIN_CONFIG_2X = """\
training:
  steps: 10
  local_batch_size: 1
parallelism:
  tensor_parallel: 1
  pipeline_parallel: 1
model:
  model_type: qwen3
  num_hidden_layers: 4
recompute:
  full_recompute: true
"""


def test_a_mindformers_2x_train_config_gets_one_line_naming_its_form_and_the_form_read(tmp_path, capsys):
    path = tmp_path / "pynative.yaml"
    path.write_text(TRAIN_CONFIG_2X)
    assert main(["validate", str(path)]) == 1
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{path}:1: training: ")
    assert "MindFormers 2.x TrainConfig" in lines[0] and "model.model_config" in lines[0]
