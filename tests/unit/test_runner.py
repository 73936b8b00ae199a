"""The one child runner (`mf_memopt.runs.runner`): how a training or compile child is started, and how it fails.

A training child that finishes is exercised by `estimate --measure` and `compare` (tests/mindspore/test_step_forms.py,
tests/unit/test_compare_configs.py); here, what every caller gets when a child does not."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from mf_memopt.runs.runner import ChildFailed, child_command, compile_graph, train, yaml_dataset
from processes import alive

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs" / "llama_tiny.yaml"


def _broken(tmp_path: Path) -> Path:
    document = yaml.safe_load(TINY.read_text())
    document["model"]["model_config"]["num_layers"] = "two"
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def test_a_failed_training_child_raises_one_error_with_its_own_error_lines_and_its_log(tmp_path):
    config = _broken(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    with pytest.raises(ChildFailed) as raised:
        train(config, steps=1, work=work, log_file=work / "train.log", timeout=600)
    message = str(raised.value)
    assert message.startswith(f"training {config} failed (exit ")
    assert "num_layers" in message and "Traceback" not in message
    assert message.endswith(f"; its log: {work / 'train.log'}") and (work / "train.log").read_text()



def test_a_training_child_out_of_time_is_ended_and_reported(tmp_path, monkeypatch):
    started = []

    class Recorded(subprocess.Popen):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            started.append(self.pid)

    monkeypatch.setattr(subprocess, "Popen", Recorded)
    with pytest.raises(ChildFailed, match=r"^training .*llama_tiny.yaml did not finish within 0 s$"):
        train(TINY, steps=1, work=tmp_path, timeout=0.01)
    assert len(started) == 1
    assert not alive(started[0]), "the child outlived its time"


def test_a_failed_compile_child_raises_the_same_error(tmp_path):
    with pytest.raises(ChildFailed, match="^compiling the training graph failed:\n"):
        compile_graph(tmp_path / "missing.yaml", report=tmp_path / "report.json", env={}, timeout=600)


def test_the_child_reads_generated_tokens_under_its_output_and_the_yamls_own_dataset_where_it_is(tmp_path,
                                                                                                   monkeypatch):
    document = yaml.safe_load(TINY.read_text())
    generated = tmp_path / "generated.yaml"
    generated.write_text(yaml.safe_dump({**document, "generated_dataset": {"num_samples": 4}}))
    assert yaml_dataset(generated, tmp_path / "out") == tmp_path / "out" / "data" / "tokens.mindrecord"
    document.pop("generated_dataset", None)
    document["train_dataset"]["data_loader"]["dataset_dir"] = "data/tokens.mindrecord"
    own = tmp_path / "own.yaml"
    own.write_text(yaml.safe_dump(document))
    monkeypatch.chdir(tmp_path)
    assert yaml_dataset(own, tmp_path / "out") == tmp_path / "data" / "tokens.mindrecord"
    command = child_command(own, 2, tmp_path / "out")
    assert command[-6:] == ["--train_steps", "2", "--output_dir", str(tmp_path / "out"),
                            "--train_dataset_dir", str(tmp_path / "data" / "tokens.mindrecord")]
