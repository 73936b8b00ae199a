"""The golden cases: `tests/cases/<family>/<case>/`, one folder per config whose plan and peaks are kept.

A case folder holds its config, `plan.json` (what `plan --json` prints) and `peak.json` (the peak of every stage,
in bytes, that `estimate --json` prints for the ascend runtime and, where the config runs on CPU, the cpu runtime;
`"cpu": null` where the estimate refuses the cpu runtime, as it does pipeline configs). The config is
`config.yaml` in the folder, or, for a config shipped under configs/, `case.json` naming it
(`{"config": "configs/llama_tiny.yaml"}`), so that the shipped example stays the only copy.

`python tests/cases/regenerate.py` writes every plan.json and peak.json after an intended change (review the diff);
tests/unit/test_golden.py compares them with what the code prints now.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path

from mf_memopt.cli import main

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "tests" / "cases"
REGENERATE = "python tests/cases/regenerate.py"
RUNTIMES = ("ascend", "cpu")


@dataclass(frozen=True)
class Case:
    folder: Path

    @property
    def name(self) -> str:
        """`<family>/<case>`, as the test ids and the messages name it."""
        return self.folder.relative_to(CASES).as_posix()

    @property
    def family(self) -> str:
        return self.folder.parent.name

    @property
    def config(self) -> str:
        """The config's path relative to the checkout (commands run from there, and print it)."""
        local = self.folder / "config.yaml"
        if local.exists():
            return local.relative_to(ROOT).as_posix()
        return json.loads((self.folder / "case.json").read_text())["config"]


def cases() -> list[Case]:
    """Every case folder: tests/cases/<family>/<case>/ with a config.yaml or a case.json."""
    return [Case(folder) for folder in sorted(CASES.glob("*/*"))
            if (folder / "config.yaml").exists() or (folder / "case.json").exists()]


def _run(*argv: str) -> tuple[int, str, str]:
    """`python -m mf_memopt ARGV` from the checkout, in this process: exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    here = Path.cwd()
    os.chdir(ROOT)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(argv))
    finally:
        os.chdir(here)
    return code, out.getvalue(), err.getvalue()


def plan_of(case: Case) -> dict:
    code, out, err = _run("plan", "--json", case.config)
    if code != 0:
        raise RuntimeError(f"{case.name}: plan --json {case.config} exited {code}: {err.strip()}")
    return json.loads(out)


def peaks_of(case: Case) -> dict:
    """{"ascend": [peak bytes of stage 0, 1, ...], "cpu": [...] or None where the cpu runtime is refused}."""
    peaks: dict = {}
    for runtime in RUNTIMES:
        code, out, err = _run("estimate", "--json", "--runtime", runtime, case.config)
        if code != 0 and runtime == "cpu" and "the cpu runtime" in err:
            peaks[runtime] = None
            continue
        if code != 0:
            raise RuntimeError(f"{case.name}: estimate --json --runtime {runtime} {case.config} exited {code}: "
                               f"{err.strip()}")
        peaks[runtime] = [stage["peak_bytes"] for stage in json.loads(out)["stages"]]
    return peaks


def family_of_case(case: Case) -> str:
    """The family the loader chooses for the case's config (the folder above the case must name it)."""
    from mf_memopt import load_plan

    here = Path.cwd()
    os.chdir(ROOT)
    try:
        return load_plan(case.config).family.name
    finally:
        os.chdir(here)


def dump(value) -> str:
    return json.dumps(value, indent=2, sort_keys=True) + "\n"
