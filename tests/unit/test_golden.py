"""Golden plans: `plan --json` of every shipped config, checked against a reviewed file.

After an intended change, run `python tests/golden/regenerate.py` and review the diff.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mf_memopt.cli import main

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "configs").rglob("*.yaml"))


def _golden(config: Path) -> Path:
    name = config.relative_to(ROOT / "configs").as_posix().replace("/", "__")[:-len(".yaml")]
    return ROOT / "tests" / "golden" / f"{name}.json"


@pytest.mark.parametrize("config", CONFIGS, ids=lambda path: path.name)
def test_plan_json_matches_golden(config, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["plan", "--json", str(config.relative_to(ROOT))]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(_golden(config).read_text())


def test_every_golden_file_has_its_config():
    expected = {_golden(config).name for config in CONFIGS}
    present = {path.name for path in (ROOT / "tests" / "golden").glob("*.json")}
    assert present == expected
