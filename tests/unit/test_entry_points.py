"""The child processes the package starts (a race, a compile, an msrun rank worker) run their entry module once.

A module that its package's `__init__` imports, run with `python -m`, is executed twice (imported, then again as
`__main__`), and runpy says so in a RuntimeWarning: the first line of every msrun worker's log, whose tail is what
an error shows. The entries are read from the commands the package builds, not named here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mf_memopt.runs import runner
from mf_memopt.verify import pipeline

ROOT = Path(__file__).resolve().parents[2]


class _Launched(Exception):  # noqa: N818 (the command was built; nothing runs)
    pass


def _entries(tmp_path: Path, monkeypatch) -> dict[str, list[str]]:
    """The module each child command runs with `-m`: the race's, verify's compile child's, its rank workers'."""
    commands = [list(pipeline.WORKER)]

    def launch(command, **_):
        commands.append(list(command))
        raise _Launched

    monkeypatch.setattr(runner, "run_owned", launch)
    with pytest.raises(_Launched):
        runner.race_child([tmp_path / "a.yaml"], work=tmp_path, steps=1)
    with pytest.raises(_Launched):
        runner.compile_graph(tmp_path / "a.yaml", report=tmp_path / "report.json", env={})
    modules = [command[command.index("-m") + 1] for command in commands]
    # arguments that end each entry at once: the race's --help; a compile of a config that does not exist
    return {module: ["--help"] if "race" in module else [str(tmp_path / "missing.yaml"), str(tmp_path / "r.json")]
            for module in modules}


def _run(arguments: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "GLOG_v": "3", "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, *arguments], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_every_child_entry_runs_once_without_runpys_warning(tmp_path, monkeypatch):
    entries = _entries(tmp_path, monkeypatch)
    assert len(entries) == 2, entries          # verify's compile child and its rank workers share one entry
    for module, arguments in entries.items():
        done = _run(["-W", "error::RuntimeWarning", "-m", module, *arguments], tmp_path)
        assert "RuntimeWarning" not in done.stderr, done.stderr
        if "race" in module:
            assert done.returncode == 0 and done.stdout.startswith(f"usage: python -m {module} "), done.stderr
        else:
            assert done.returncode == 1 and "missing.yaml: <document>: cannot read the file" in done.stderr


def test_no_package_imports_a_child_entry(tmp_path, monkeypatch):
    """What runpy checks, for every package: once they are all imported, no entry has been."""
    entries = list(_entries(tmp_path, monkeypatch))
    inits = (ROOT / "mf_memopt").rglob("__init__.py")
    packages = sorted(".".join(init.parent.relative_to(ROOT).parts) for init in inits)
    assert {"mf_memopt.auto", "mf_memopt.verify"} <= set(packages)
    code = f"import sys, {', '.join(packages)}; print([name for name in {entries!r} if name in sys.modules])"
    done = _run(["-c", code], tmp_path)
    assert done.stdout == "[]\n", done.stdout + done.stderr
