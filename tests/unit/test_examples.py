"""Example folders: every shipped config validates; every invalid example fails with its expected text.

`tests/data/<folder>/<name>.expected` holds exactly what `python -m mf_memopt validate` prints
for `<name>.yaml` (warnings and errors first, then the summary line).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mf_memopt.cli import main

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted(path.relative_to(ROOT) for path in (ROOT / "configs").rglob("*.yaml"))
INVALID = sorted(path.relative_to(ROOT) for path in (ROOT / "tests" / "data" / "invalid").glob("*.yaml"))
VALID = sorted(path.relative_to(ROOT) for path in (ROOT / "tests" / "data" / "valid").glob("*.yaml"))


def _validate(path: Path, capsys) -> tuple[int, str]:
    code = main(["validate", str(path)])
    out, err = capsys.readouterr()
    return code, err + out


@pytest.fixture(autouse=True)
def _at_repository_root(monkeypatch):
    monkeypatch.chdir(ROOT)


def test_there_are_examples():
    assert len(SHIPPED) >= 7 and len(INVALID) >= 10 and len(VALID) >= 3


@pytest.mark.parametrize("path", SHIPPED, ids=str)
def test_shipped_config_is_valid_without_warnings(path, capsys):
    """Notes (where the marks differ from MindFormers', on purpose) may be printed; warnings may not."""
    code, output = _validate(path, capsys)
    assert code == 0, output
    assert output.splitlines() == [line for line in output.splitlines() if ": valid: " in line or ": note: " in line]


@pytest.mark.parametrize("path", INVALID, ids=str)
def test_invalid_example_fails_with_expected_message(path, capsys):
    code, output = _validate(path, capsys)
    assert code == 1
    assert "Traceback" not in output
    assert output == path.with_suffix(".expected").read_text()


@pytest.mark.parametrize("path", VALID, ids=str)
def test_valid_example_prints_expected_summary_and_warnings(path, capsys):
    code, output = _validate(path, capsys)
    assert code == 0
    assert output == path.with_suffix(".expected").read_text()
