"""Check a built wheel.

`python tests/wheel_contents.py WHEEL mf_memopt/`: every .py, .json and .cpp file under the package
directory must be in the wheel (a subpackage left out of the packaging config shows up here).
`python tests/wheel_contents.py --requirements WHEEL`: every runtime dependency the wheel
declares is installed, at a matching version, in the running environment.
Both exit 1 and say what is wrong.
"""

from __future__ import annotations

import sys
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


if __name__ == "__main__":
    if sys.argv[1] == "--requirements":
        problems = [f"wheel requirement not met: {text}" for text in unmet_requirements(Path(sys.argv[2]))]
    else:
        problems = [f"missing from the wheel: {name}" for name in missing_files(Path(sys.argv[1]), Path(sys.argv[2]))]
    for problem in problems:
        print(problem, file=sys.stderr)
    sys.exit(1 if problems else 0)
