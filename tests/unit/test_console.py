"""The command line as a shell uses it: a reader that stops early (`| head`), files written before the printing,
a file that cannot be written refused before the work, and errors named by the program and command as typed."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import mf_memopt.auto as auto_module
import mf_memopt.auto.balance as balance
import mf_memopt.compare as compare_module
import mf_memopt.estimate as estimate_module
import mf_memopt.runtime.datacheck as datacheck
from mf_memopt import cli
from mf_memopt.cli import main
from mf_memopt.compare.runs import Run, Step
from mf_memopt.runs import measure
from mf_memopt.runtime.errors import LaunchError

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs" / "llama_tiny.yaml"
BIG = ROOT / "configs" / "planning" / "interleave_48l_pp5.yaml"       # `plan` prints more than a pipe buffer
CASE3 = ROOT / "configs" / "swap_case3_op_swap.yaml"                  # `validate` prints one line, no notes
PP2 = ROOT / "configs" / "planning" / "llama2_7b_swap_pp2.yaml"         # two pipeline stages, for --balance
SCRIPT = Path(sys.executable).parent / "mf-memopt"                    # the venv's console script
FORMS = {"console script": [str(SCRIPT)], "module": [sys.executable, "-m", "mf_memopt"]}
SIGPIPE_STATUS = 141                                                  # 128 + SIGPIPE, as a shell shows it


def _gone_reader(command: list[str], **env: str) -> subprocess.CompletedProcess:
    """`command` with its stdout a pipe whose reader has already gone, as `| head` is once it has its lines."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(command, stdout=write, stderr=subprocess.PIPE, text=True, cwd=ROOT, timeout=300,
                              env={**os.environ, "PYTHONPATH": str(ROOT), "GLOG_v": "3", **env})
    finally:
        os.close(write)


def test_the_console_script_is_the_one_the_project_installs():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {cli.SCRIPT: "mf_memopt.cli:main"} and SCRIPT.is_file()


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("command", [["plan", str(BIG)], ["validate", str(CASE3)]])
def test_a_reader_that_goes_early_ends_either_form_quietly(form, command):
    done = _gone_reader([*FORMS[form], *command])
    assert (done.returncode, done.stderr) == (SIGPIPE_STATUS, "")


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("extra", [[], ["--json"]])
def test_estimate_writes_its_chart_before_printing(tmp_path, form, extra):
    """Unbuffered, the first line printed meets the gone reader, whatever the report's length."""
    chart = tmp_path / "m.png"
    done = _gone_reader([*FORMS[form], "estimate", str(TINY), "--png", str(chart), *extra], PYTHONUNBUFFERED="1")
    assert (done.returncode, done.stderr) == (SIGPIPE_STATUS, "") and chart.stat().st_size > 0


class _GoneStdout(io.StringIO):
    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")


def _comparison(base, candidate, **kwargs):
    run = Run(config=str(base), steps=(Step(step=1, loss=5.0, global_norm=1.0, overflow=False, loss_scale=1.0),))
    return compare_module.Comparison(base=run, candidate=run, runtime="cpu", changes=[], lossy=(), tolerance=0.01)


def test_compare_writes_its_chart_before_printing(tmp_path, monkeypatch):
    monkeypatch.setattr(compare_module, "compare_configs", _comparison)
    monkeypatch.setattr(sys, "stdout", _GoneStdout())
    chart = tmp_path / "drift.png"
    assert main(["compare", str(TINY), str(TINY), "--png", str(chart)]) == SIGPIPE_STATUS
    assert chart.stat().st_size > 0


def _no_work(*_, **__):
    raise AssertionError("the work started")


@pytest.mark.parametrize(("argv", "option"), [
    (["auto", str(TINY), "--runtime", "cpu", "--device-memory", "200MiB", "-o"], "--output"),
    (["auto", str(PP2), "--balance", "--output"], "--output"),
    (["estimate", str(TINY), "--png"], "--png"),
    (["estimate", str(TINY), "--measure", "--png"], "--png"),
    (["compare", str(TINY), str(TINY), "--png"], "--png"),
])
def test_a_file_into_a_missing_directory_is_refused_before_the_work(tmp_path, monkeypatch, capsys, argv, option):
    for module, name in [(auto_module, "auto_plan"), (balance, "balance_plan"), (estimate_module, "estimate_config"),
                         (measure, "train"), (compare_module, "compare_configs"), (cli, "load_document")]:
        monkeypatch.setattr(module, name, _no_work)
    target = tmp_path / "missing" / "out"
    assert main([*argv, str(target)]) == 2
    assert capsys.readouterr() == ("", f"{argv[0]}: {option}: cannot write {target}: no directory {target.parent}\n")


def test_a_directory_given_as_the_file_is_refused(tmp_path, capsys):
    assert main(["estimate", str(TINY), "--png", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"estimate: --png: {tmp_path} is a directory\n"


def _failing_check(source):
    raise LaunchError("the dataset child failed")


@pytest.mark.parametrize(("argv0", "program"), [("/venv/bin/mf-memopt", "mf-memopt"),
                                                ("/src/mf_memopt/__main__.py", "python -m mf_memopt")])
def test_an_error_names_the_program_and_the_command_as_typed(monkeypatch, capsys, argv0, program):
    monkeypatch.setattr(sys, "argv", [argv0])
    monkeypatch.setattr(datacheck, "run_check_data", _failing_check)
    assert main(["check-data", str(TINY)]) == 1
    assert capsys.readouterr().err == f"{program} check-data: the dataset child failed\n"


def test_the_console_script_usage_names_the_console_script():
    done = subprocess.run([str(SCRIPT), "no-such-command"], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 2 and done.stderr.startswith("usage: mf-memopt [-h] COMMAND ...")
    assert "mf-memopt: error: argument COMMAND: invalid choice: 'no-such-command'" in done.stderr
