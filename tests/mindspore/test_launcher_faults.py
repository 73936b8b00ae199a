"""The launcher's answers to a bad output directory, a second run, Ctrl-C, bad training sections and
a dtype the backend cannot run: one clear line each, before anything heavy where possible."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from launching import ROOT, TINY, launch, launcher_command, launcher_env
from processes import only_child


def _variant(tmp_path: Path, old: str, new: str) -> Path:
    text = TINY.read_text()
    assert old in text
    config = tmp_path / "variant.yaml"
    config.write_text(text.replace(old, new))
    return config


# --- output directory (no MindSpore needed) ---------------------------------------------------


# --- backend limits (no MindSpore needed) -----------------------------------------------------


# --- the launcher with MindFormers ---------------------------------------------------------------

def test_unknown_optimizer_and_wrapper_are_one_clear_error(tmp_path):
    config = _variant(tmp_path, "  type: AdamW\n", "  type: AdamWW\n")
    config.write_text(config.read_text().replace("type: MFTrainOneStepCell ", "type: MFTrainOneStep "))
    done = launch(str(config), "--output_dir", str(tmp_path / "out"), cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0].startswith(f"{config}:") and lines[0].endswith(
        ": optimizer.type: 'AdamWW' is not a MindFormers optimizer type (did you mean `AdamW`?)")
    assert lines[1].endswith(": runner_wrapper.type: 'MFTrainOneStep' is not a MindFormers wrapper type "
                             "(did you mean `MFTrainOneStepCell`?)")
    assert len(lines) == 2 and "Set select" not in done.stdout


def test_bfloat16_is_caught_before_the_model_is_built(tmp_path):
    config = _variant(tmp_path, '    compute_dtype: "float32"', '    compute_dtype: "bfloat16"')
    done = launch(str(config), "--output_dir", str(tmp_path / "out"), cwd=tmp_path)
    assert done.returncode == 1
    assert ": model.model_config.compute_dtype: bfloat16 has no CPU kernels in MindSpore" in done.stderr
    assert "Traceback" not in done.stderr and "Set select" not in done.stdout


def test_ctrl_c_during_training_exits_130_and_says_where(tmp_path):
    output = tmp_path / "out"
    process, stderr = _stopped_at_step_2(tmp_path, output, lambda process: process.send_signal(signal.SIGINT))
    assert process.returncode == 130, stderr[-3000:]
    (last,) = stderr.splitlines()[-1:]
    assert last.startswith("run_mindformer_memopt.py: interrupted after ")
    assert last.endswith(f"; written: {output}/apply_report.json, {output}/run_config.yaml; logs in {output}/log")
    # MindFormers' logs went under --output_dir, not under ./output of the working directory.
    assert (output / "log" / "rank_0" / "info.log").exists() and not (tmp_path / "output").exists()


def _stopped_at_step_2(tmp_path: Path, output: Path, stop) -> tuple[subprocess.Popen, str]:
    """The launcher trained on the tiny config until MindFormers logs step 2, then `stop(process)`: the finished
    process and its stderr."""
    process = subprocess.Popen(launcher_command(str(TINY), "--output_dir", str(output), "--train_dataset_dir",
                                        str(tmp_path / "tokens.mindrecord")),
                               cwd=tmp_path, env=launcher_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in process.stdout:
        if "step:[    2/" in line:
            stop(process)
            break
    _, stderr = process.communicate(timeout=300)
    return process, stderr


@pytest.mark.parametrize("how", ["SIGHUP to the launcher", "SIGTERM to the launcher and its child at once"])
def test_a_hangup_or_a_job_managers_signal_to_every_process_ends_the_run_cleanly(tmp_path, how):
    """A closed terminal sends SIGHUP; a job manager that signals every process of the job reaches the training
    child twice (directly and through the launcher): both are one stop, with the one line and status 130."""
    def stop(process: subprocess.Popen) -> None:
        if how.startswith("SIGHUP"):
            process.send_signal(signal.SIGHUP)
        else:                     # the launcher's copy comes while the child handles its own
            os.kill(only_child(process.pid), signal.SIGTERM)
            time.sleep(0.3)
            process.send_signal(signal.SIGTERM)

    process, stderr = _stopped_at_step_2(tmp_path, tmp_path / "out", stop)
    assert process.returncode == 130, stderr[-3000:]
    assert stderr.splitlines()[-1].startswith("run_mindformer_memopt.py: interrupted after ")


def test_sigterm_to_estimate_measure_ends_its_training_child_and_removes_its_files(tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = {**launcher_env(), "TMPDIR": str(scratch)}
    process = subprocess.Popen([sys.executable, "-m", "mf_memopt", "estimate", "--measure", "--steps", "100", str(TINY)],
                               cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not any((path / "output" / "apply_report.json").exists() for path in scratch.glob("mf_memopt_measure_*")):
        assert time.monotonic() < deadline and process.poll() is None, "the training child never started"
        time.sleep(0.2)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 128 + signal.SIGTERM
    assert stderr.splitlines()[-1] == ("python -m mf_memopt estimate: stopped by SIGTERM; its child process was "
                                       "ended and its temporary files removed")
    assert list(scratch.iterdir()) == []
    survivors = subprocess.run(["pgrep", "-f", str(scratch)], capture_output=True, text=True).stdout.split()
    assert survivors == []


def test_a_training_run_opens_the_users_config_exactly_once(tmp_path):
    """The plan, the checks, the record and MindFormers' Trainer all use one reading: a YAML saved during start-up
    cannot give a run whose plan and training come from two versions of it."""
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    counts = tmp_path / "opens.txt"
    (hooks / "sitecustomize.py").write_text(
        "import atexit, os, sys\n"
        f"CONFIG, COUNTS = {str(TINY)!r}, {str(counts)!r}\n"
        "seen = []\n"
        "def hook(event, args):\n"
        "    if event == 'open' and args and isinstance(args[0], (str, bytes, os.PathLike)):\n"
        "        try:\n"
        "            if os.path.realpath(os.fsdecode(args[0])) == CONFIG:\n"
        "                seen.append(1)\n"
        "        except (TypeError, ValueError):\n"
        "            pass\n"
        "sys.addaudithook(hook)\n"
        "atexit.register(lambda: open(COUNTS, 'a').write(f'{len(seen)}\\n'))\n")
    env = {**launcher_env(), "PYTHONPATH": os.pathsep.join([str(hooks), str(ROOT)])}
    done = subprocess.run(launcher_command(str(TINY), "--output_dir", str(tmp_path / "out"), "--train_steps", "1",
                                   "--train_dataset_dir", str(tmp_path / "tokens.mindrecord")),
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    per_process = [int(line) for line in counts.read_text().split()]
    assert len(per_process) >= 2 and sum(per_process) == 1      # the supervisor reads none, the training child one
