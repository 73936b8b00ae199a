"""One device policy in every command: a YAML without context.device_target means Ascend (MindFormers' default);
a device this MindSpore cannot load stops the run in one line and trains nothing; targets other than Ascend and
CPU are refused; a pipeline config on CPU stops before anything is built or written."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from launching import launcher_command, launcher_env

from mf_memopt.cli import main
from mf_memopt.compare import training_runtime
from mf_memopt.config.device import device_of
from mf_memopt.document.source import load_source
from mf_memopt.runs.check import device_runtime


ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs" / "llama_tiny.yaml"
ASCEND_UNLOADABLE = "context.device_target is Ascend (MindFormers' default: context.device_target is not set), " \
                    "and this MindSpore cannot load it: Unsupported device target Ascend"
PIPELINE_ON_CPU = "pipeline_stage is 2: MindSpore's CPU backend cannot compile pipeline parallelism"


def _variant(tmp_path: Path, *, device: str | None, stages: int = 1) -> Path:
    """The tiny Llama with its device_target replaced (None: removed) and `stages` pipeline stages."""
    data = yaml.safe_load(TINY.read_text())
    if device is None:
        del data["context"]["device_target"]
    else:
        data["context"]["device_target"] = device
    data["parallel_config"]["pipeline_stage"] = stages
    data["train_dataset"]["data_loader"]["dataset_dir"] = str(tmp_path / "tokens.mindrecord")
    path = tmp_path / "variant.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _launch(config: Path, cwd: Path, *extra: str) -> subprocess.CompletedProcess:
    command = launcher_command(config, "--run_mode", "train", "--output_dir", str(cwd / "out"), *extra)
    return subprocess.run(command, cwd=cwd, env=launcher_env(), capture_output=True, text=True, timeout=600)


def _one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    assert "Traceback" not in text
    return lines[0]


# --- the same device in every command ------------------------------------------------------------------

def test_a_yaml_without_device_target_means_ascend(tmp_path):
    device = device_of(load_source(_variant(tmp_path, device=None)))
    assert (device.target, device.written, device.cpu) == ("Ascend", False, False)
    assert device_of(load_source(TINY)).cpu


def test_estimate_and_compare_take_the_same_device(tmp_path):
    bare = _variant(tmp_path, device=None)
    assert device_runtime(bare) == "ascend" == training_runtime(load_source(bare))
    assert device_runtime(TINY) == "cpu" == training_runtime(load_source(TINY))


def test_validate_refuses_a_target_mf_memopt_does_not_train_on(tmp_path, capsys):
    assert main(["validate", str(_variant(tmp_path, device=None))]) == 0
    capsys.readouterr()                 # its notes (documented differences from MindFormers) are not the refusal
    assert main(["validate", str(_variant(tmp_path, device="GPU"))]) == 1
    line = _one_line(capsys.readouterr().err)
    assert "context.device_target: is 'GPU': mf_memopt supports Ascend and CPU" in line
    assert main(["validate", str(_variant(tmp_path, device="cpu"))]) == 1
    assert "(did you mean `CPU`?)" in capsys.readouterr().err


def test_verify_without_device_target_wants_ascend_and_compiles_nothing(tmp_path, capsys):
    assert main(["verify", str(_variant(tmp_path, device=None)), "--ir-dir", str(tmp_path / "ir")]) == 1
    line = _one_line(capsys.readouterr().err)
    assert line.startswith("python -m mf_memopt verify: ") and ASCEND_UNLOADABLE in line
    assert "set context.device_target: CPU" in line
    assert not (tmp_path / "ir").exists()


def test_the_launcher_without_device_target_wants_ascend_and_trains_nothing(tmp_path):
    done = _launch(_variant(tmp_path, device=None), tmp_path)
    assert done.returncode == 1
    line = _one_line(done.stderr)
    assert line.startswith("run_mindformer_memopt.py: ") and ASCEND_UNLOADABLE in line
    assert "libmindspore_ascend" in line and "set context.device_target: CPU" in line
    assert not (tmp_path / "out").exists() and not (tmp_path / "tokens.mindrecord").exists()


def test_the_launcher_refuses_gpu_in_one_line(tmp_path):
    done = _launch(_variant(tmp_path, device="GPU"), tmp_path)
    assert done.returncode == 1
    assert "context.device_target: is 'GPU': mf_memopt supports Ascend and CPU" in _one_line(done.stderr)
    assert not (tmp_path / "out").exists()


# --- a pipeline config on CPU --------------------------------------------------------------------------

def test_the_launcher_stops_a_pipeline_config_on_cpu_before_writing(tmp_path):
    done = _launch(_variant(tmp_path, device="CPU", stages=2), tmp_path)
    assert done.returncode == 1
    line = _one_line(done.stderr)
    assert PIPELINE_ON_CPU in line and "validate, plan, estimate and auto work here" in line
    assert not (tmp_path / "out").exists() and not (tmp_path / "tokens.mindrecord").exists()


def test_msrun_stops_a_pipeline_config_on_cpu_before_starting_workers(tmp_path):
    config = _variant(tmp_path, device="CPU", stages=2)
    command = f"{ROOT / 'run_mindformer_memopt.py'} --config {config} --run_mode train --use_parallel True"
    done = subprocess.run(["bash", str(ROOT / "scripts" / "msrun_launcher.sh"), command, "2", "8139",
                           str(tmp_path / "msrun"), "True", "60"], cwd=tmp_path, env=launcher_env(),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 1
    assert PIPELINE_ON_CPU in _one_line(done.stderr)
    assert not (tmp_path / "msrun").exists() and not (tmp_path / "output").exists()


def test_verify_stops_a_pipeline_config_on_cpu_before_compiling(tmp_path, capsys):
    assert main(["verify", str(_variant(tmp_path, device="CPU", stages=2)), "--ir-dir", str(tmp_path / "ir")]) == 1
    assert PIPELINE_ON_CPU in _one_line(capsys.readouterr().err)
    assert not (tmp_path / "ir").exists()


def test_each_pipeline_worker_says_its_stage_and_layers():
    from mf_memopt.config.layout import Layout
    from mf_memopt.runtime.session import stage_line

    layout = Layout(num_layers=6, stages=2, chunks=2, chunk_sizes=((1, 2), (2, 1)))   # offsets as in the 48-layer example
    assert stage_line(layout, 0, 8).startswith("pipeline stage 0 of 2 on rank 0 of 8: layers 0, 3, 4 (")
    assert stage_line(layout, 5, 8).startswith("pipeline stage 1 of 2 on rank 5 of 8: layers 1, 2, 5 (")


@pytest.mark.parametrize("config", sorted((ROOT / "configs").glob("*.yaml")), ids=lambda path: path.name)
def test_every_shipped_training_config_says_it_trains_on_cpu(config):
    assert device_of(load_source(config)).describe() == "CPU"


@pytest.mark.parametrize("config", sorted((ROOT / "configs" / "planning").glob("*.yaml")), ids=lambda path: path.name)
def test_every_shipped_pipeline_config_means_ascend(config):
    from mf_memopt.config.load import load_plan

    assert device_of(load_source(config)).target == "Ascend" and load_plan(config).layout.stages > 1


@pytest.mark.parametrize("command", [["validate"], ["plan"], ["estimate"], ["auto", "--device-memory", "1GiB"],
                                     ["verify"]])
def test_every_command_refuses_gpu_with_the_same_line(tmp_path, capsys, command):
    config = _variant(tmp_path, device="GPU")
    assert main([command[0], str(config), *command[1:]]) == 1
    line = _one_line(capsys.readouterr().err)
    assert line == f"{config}:7: context.device_target: is 'GPU': mf_memopt supports Ascend and CPU (set " \
                   "context.device_target: CPU to run on this machine's CPU)"
