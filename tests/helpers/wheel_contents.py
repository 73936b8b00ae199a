"""What a built wheel lacks: the package files it leaves out (`missing_files`) and the runtime requirements it
declares that the running environment does not meet (`unmet_requirements`).

scripts/check_wheel.sh checks the wheel it builds with them (`python tests/children/wheel_check.py`);
tests/unit/test_packaging.py checks a wheel of its own.
"""

from __future__ import annotations

import zipfile
from pathlib import Path


def missing_files(wheel: Path, package: Path) -> list[str]:
    shipped = set(zipfile.ZipFile(wheel).namelist())
    expected = sorted(str(path.relative_to(package.parent)) for pattern in ("*.py", "*.json", "*.cpp")
                      for path in package.rglob(pattern) if "__pycache__" not in path.parts)
    return [name for name in expected if name not in shipped]


def unmet_requirements(wheel: Path) -> list[str]:
    from importlib import metadata

    from packaging.requirements import Requirement

    archive = zipfile.ZipFile(wheel)
    name = next(item for item in archive.namelist() if item.endswith(".dist-info/METADATA"))
    declared = [Requirement(line.split(":", 1)[1].strip())
                for line in archive.read(name).decode().splitlines() if line.startswith("Requires-Dist:")]
    unmet = []
    for requirement in declared:
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue  # an optional extra, such as [test]
        try:
            version = metadata.version(requirement.name)
        except metadata.PackageNotFoundError:
            unmet.append(f"{requirement} is not installed")
            continue
        if not requirement.specifier.contains(version, prereleases=True):
            unmet.append(f"{requirement} but {version} is installed")
    return unmet

