"""The wheel a user installs holds every module and data file of the package.

A subpackage left out of `pyproject.toml` (as `mf_memopt/estimate/` once was) only shows in
an installed wheel, never in the editable install the other tests use.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from wheel_contents import missing_files

ROOT = Path(__file__).resolve().parents[2]


def _build_wheel(tmp_path: Path) -> Path:
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source)
    shutil.copytree(ROOT / "mf_memopt", source / "mf_memopt", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check", "--no-deps",
                    "-w", str(tmp_path / "dist"), str(source)], check=True, capture_output=True)
    return next((tmp_path / "dist").glob("mf_memopt-*.whl"))


def test_wheel_holds_every_module_and_schema(tmp_path):
    wheel = _build_wheel(tmp_path)
    assert missing_files(wheel, ROOT / "mf_memopt") == []
    names = zipfile.ZipFile(wheel).namelist()
    assert "mf_memopt/estimate/core.py" in names
    assert {f"mf_memopt/schemas/{name}.schema.json" for name in ("recompute_config", "swap_config",
                                                                 "training_layout")} <= set(names)


def test_a_missing_subpackage_is_named(tmp_path):
    wheel = tmp_path / "partial.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("mf_memopt/__init__.py", "")
    missing = missing_files(wheel, ROOT / "mf_memopt")
    assert "mf_memopt/estimate/core.py" in missing and "mf_memopt/schemas/swap_config.schema.json" in missing
